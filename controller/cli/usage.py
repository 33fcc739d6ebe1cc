"""``tiresias usage``: the node hooks' usage records the controller collected (one
line per run of a job on a node: GPUs, MPS tier and outcome, exit, checkpoint seen),
for the cluster named in the config. Reads the store, so it runs as the service user
(or whoever may read the store); records older than ``usage_max_age_s`` are gone."""
from __future__ import annotations

import json
import sys
import time

from controller.cli import reports
from controller.cli.acct import open_store
from controller.service.ops.config import DEFAULT_PATH, load
from controller.service.state.secrets import redact_url

COLUMNS = (("JobID", "job_id", 10), ("Node", "node", 10), ("User", "user", 10), ("Restarts", "restart_count", 8),
           ("GPUs", "gpus", 8), ("MPS%", "mps_percent", 5), ("MPS", "mps_status", 11), ("Exit", "exit_code", 4),
           ("Ckpt", "checkpoint_seen", 5), ("Ran", "ran", 10))


def add_arguments(p) -> None:
    p.add_argument("--config", metavar="FILE", help=f"YAML settings (default {DEFAULT_PATH} if present)")
    p.add_argument("--database-url", metavar="URL", help="store URL (overrides the config)")
    p.add_argument("--cluster", metavar="NAME", help="cluster name in the store (overrides the config)")
    p.add_argument("-S", "--starttime", metavar="TIME", help="records stored at or after TIME (ISO date or epoch s)")
    p.add_argument("--json", action="store_true", help="the records as one JSON list")


def _cell(record: dict, key: str) -> str:
    if key == "ran":
        start, end = record.get("start_s"), record.get("end_s")
        ok = isinstance(start, (int, float)) and isinstance(end, (int, float))
        return time.strftime("%H:%M:%S", time.gmtime(max(end - start, 0))) if ok else "-"
    value = record.get(key)
    if isinstance(value, list):
        return ",".join(str(v) for v in value) or "-"
    return "-" if value is None else str(value)


def run(args) -> int:
    config = load(args.config, {"database_url": args.database_url, "cluster": args.cluster})
    since = reports.parse_time(args.starttime, "-S/--starttime", False) if args.starttime else None
    store = open_store(config.store_url())
    if store is None:
        print(f"no usage records in {redact_url(config.database_url)} (the database does not exist yet)")
        return 0
    with store:
        records = store.usage_records(config.cluster, since_s=since)
    if args.json:
        reports.emit(json.dumps(records, sort_keys=True))
        return 0
    if not records:
        print(f"no usage records in {store.name} (cluster {config.cluster})", file=sys.stderr)
        return 0
    lines = [" ".join(name.rjust(width) for name, _, width in COLUMNS)]
    lines += [" ".join(_cell(r, key)[:width].rjust(width) for _, key, width in COLUMNS) for r in records]
    reports.emit("\n".join(lines))
    return 0

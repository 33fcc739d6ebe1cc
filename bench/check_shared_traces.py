"""Check the full public traces in ../shared/traces (or $TIRESIAS_TRACES) load as their
README says: job counts, the Tiresias-format conversions equal to their sources, Muri
milliseconds equal to seconds, Philly's ids, and the fast column reader equal to the
row reader. Tests use the excerpts in tests/fixtures/traces; this covers the rest.

    python bench/check_shared_traces.py      # prints one line per check; exit 1 on a mismatch
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from controller.replay import trace_rows as R  # noqa: E402
from controller.replay import traces as T  # noqa: E402

TRACES = Path(os.environ.get("TIRESIAS_TRACES", ROOT.parent / "shared" / "traces"))
# Job counts from shared/traces/README.md.
EXPECTED = {
    "itp/cluster01.csv": 1595, "itp/cluster02.csv": 5778, "itp/cluster03.csv": 3011,
    "itp/cluster04.csv": 15802, "itp/cluster05.csv": 3629, "itp/cluster06.csv": 2396,
    "itp/cluster07.csv": 12699, "itp/cluster08.csv": 13047, "itp/cluster09.csv": 11134,
    "itp/cluster10.csv": 260,
    "philly_pollux.csv": 82247,
    "muri-raw/trace1.csv": 1494, "muri-raw/trace2.csv": 5755,
    "muri-raw/trace3.csv": 992, "muri-raw/trace4.csv": 2638,
    "tiresias-format/muri_trace1_sec.csv": 1494, "tiresias-format/muri_trace2_sec.csv": 5755,
    "tiresias-format/muri_trace3_sec.csv": 992, "tiresias-format/muri_trace4_sec.csv": 2638,
    "tiresias-format/itp_cluster01_tiresias.csv": 1595,
    "tiresias-format/itp_cluster03_tiresias.csv": 3011,
    "tiresias-format/itp_cluster04_tiresias.csv": 15802,
    "tiresias-format/itp_cluster05_tiresias.csv": 3629,
    "tiresias-format/itp_cluster10_tiresias.csv": 260,
    "tiresias-format/tiresias_60_job.csv": 60,
}


def checks():
    """(name, passed, detail) per check."""
    for rel, count in EXPECTED.items():
        jobs = T.load_trace(TRACES / rel)
        yield f"{rel}: {count} jobs", len(jobs) == count, f"{len(jobs)} loaded"
    raw = T.load_trace(TRACES / "itp/cluster01.csv")
    conv = T.load_trace(TRACES / "tiresias-format/itp_cluster01_tiresias.csv")
    yield ("itp cluster01 = its Tiresias-format conversion",
           [(j.submit_time_s, j.num_gpus) for j in raw] == [(j.submit_time_s, j.num_gpus) for j in conv]
           and sorted(j.duration_s for j in raw) == sorted(j.duration_s for j in conv), "")
    for t in (1, 2, 3, 4):
        ms = T.load_trace(TRACES / f"muri-raw/trace{t}.csv")
        sec = {j.job_id: j for j in T.load_trace(TRACES / f"tiresias-format/muri_trace{t}_sec.csv")}
        same = len(ms) == len(sec) and all(
            abs(j.duration_s - sec[j.job_id].duration_s) < 1e-6 and abs(j.submit_time_s - sec[j.job_id].submit_time_s)
            < 1e-6 and j.num_gpus == sec[j.job_id].num_gpus for j in ms)
        yield f"muri trace{t}: milliseconds = seconds file", same, ""
    started = time.perf_counter()
    philly = T.load_trace(TRACES / "philly_pollux.csv")
    seconds = time.perf_counter() - started
    yield ("philly: ids 1..82,247, 15 partitions",
           {j.job_id for j in philly} == {str(i) for i in range(1, 82248)} and len({j.partition for j in philly}) == 15,
           f"read in {seconds:.2f} s")
    samples = T.load_service_samples(TRACES / "yarn_gpu_time_1000.csv")
    yield "yarn_gpu_time_1000.csv: service samples", len(samples) == 1001 and min(samples) > 0, \
        f"{len(samples)} values (the README says 1,000)"
    for rel in ("itp/cluster05.csv", "muri-raw/trace3.csv", "tiresias-format/tiresias_60_job.csv",
                "philly_pollux.csv"):
        path = TRACES / rel
        table = R.Table(path)
        fast = R.bulk_parse(table)
        bulk = R.bulk_parse
        try:
            R.bulk_parse = lambda _table: None  # force the row-by-row reader
            slow = R.parse_rows(table)
        finally:
            R.bulk_parse = bulk
        yield f"{rel}: fast reader = row reader", fast is not None and fast == slow, ""


def main() -> int:
    if not TRACES.is_dir():
        print(f"check_shared_traces: no trace directory at {TRACES}; nothing to check")
        return 0
    failed = 0
    for name, passed, detail in checks():
        failed += not passed
        print(f"{'ok  ' if passed else 'FAIL'} {name}{'  (' + detail + ')' if detail else ''}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

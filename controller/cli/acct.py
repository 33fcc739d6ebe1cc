"""Accounting of GPU jobs, like sacct: from the controller's store, or from a
'tiresias simulate --out DIR' directory (--from DIR).

Store times print as YYYY-MM-DDTHH:MM:SS (local time); simulation times are
seconds from the trace start, printed as elapsed [D-]HH:MM:SS, unless --trace names
the `tiresias trace export` file the simulation replayed: then they are dates again
(the trace's first submit + the simulated seconds), and each job shows the name and
final state the history recorded (a job that timed out or lost its node ends so in
the replay too: it runs its recorded time). -S/-E take sacct's date forms
(controller.cli.argtypes.sacct_time); a bare simulation takes seconds. Admins (root and
members of the groups slurm and tiresias-admin) read the store, opened read-only;
it is readable by the service user only. Other users see their own jobs from
Slurm's accounting: ``sacct`` runs as the caller, so Slurm decides what they may see
(``PrivateData=jobs`` keeps them from asking for anyone else's). Without -S/-E every
recorded job is listed.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

from controller.service.round.accounting import CENSORED_SAMPLE_STATES, COMPLETE_SAMPLE_STATES

from controller.service.acting.backend import ACTIVE_STATES, TRANSIENT_STATES
from controller.service.ops.config import DEFAULT_PATH, load
from controller.core.inputs import shorten
from controller.core.model import InputError
from controller.cli import argtypes, reports
from slurm_plugin.records import JOB_BASE_STATES
from controller.service.state.secrets import redact_url

# Which test may pretend to be another user: the uid the access rule reads.
_getuid = os.getuid
SACCT_EPOCH = "2000-01-01T00:00:00"  # sacct's -S when none is given (it ignores an epoch-0 start)

STATE_ALIASES = {
    "PD": "PENDING", "R": "RUNNING", "CD": "COMPLETED", "CA": "CANCELLED", "F": "FAILED", "TO": "TIMEOUT",
    "NF": "NODE_FAIL", "OOM": "OUT_OF_MEMORY", "PR": "PREEMPTED", "CANCELED": "CANCELLED",
}


# What a row's state can be: Slurm's job states, the store's GONE (left Slurm unseen)
# and DONE (every finished job).
KNOWN_STATES = (JOB_BASE_STATES | ACTIVE_STATES | COMPLETE_SAMPLE_STATES | CENSORED_SAMPLE_STATES
                | TRANSIENT_STATES | {"GONE", "DONE"})


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_argument_group("source (default: the controller's store)")
    src.add_argument("--config", metavar="FILE", help=f"YAML settings (default {DEFAULT_PATH} if present)")
    src.add_argument("--database-url", metavar="URL", help="store URL (overrides the config)")
    src.add_argument("--cluster", metavar="NAME", help="cluster name in the store (overrides the config)")
    src.add_argument("--from", dest="from_dir", metavar="DIR", help="a 'tiresias simulate --out' directory")
    src.add_argument("--policy", metavar="P", help="with --from: which jobs_<P>.csv (needed when there are several)")
    src.add_argument("--trace", metavar="FILE",
                     help="with --from: the `tiresias trace export` trace it replayed (dates, job names and the "
                          "history's states)")
    sel = p.add_argument_group("selection")
    sel.add_argument("-S", "--starttime", metavar="TIME",
                     help="jobs active at or after TIME, in sacct's forms (YYYY-MM-DD[THH:MM[:SS]], MMDD[YY], "
                          "now-7days, today, midnight, ...); --from without --trace: seconds or D-HH:MM:SS")
    sel.add_argument("-E", "--endtime", metavar="TIME", help="jobs active at or before TIME (same forms as -S)")
    sel.add_argument("-u", "--user", metavar="USER[,USER]", help="only these users")
    sel.add_argument("-j", "--jobs", metavar="JOBID[,JOBID]", help="only these job ids")
    sel.add_argument("-s", "--state", metavar="STATE[,STATE]",
                     help="only these states: PENDING (PD), RUNNING (R), COMPLETED (CD), CANCELLED (CA), FAILED (F), "
                          "...; DONE = every finished job")
    sel.add_argument("-r", "--partition", metavar="PART[,PART]", help="only these partitions")
    out = p.add_argument_group("output")
    out.add_argument("-o", "--format", metavar="FIELD[%N],...", default=reports.DEFAULT_FORMAT,
                     help=f"fields and widths, like sacct (default {reports.DEFAULT_FORMAT}); see --helpformat")
    out.add_argument("-e", "--helpformat", action="store_true", help="list the fields and exit")
    out.add_argument("-p", "--parsable", action="store_true", help="fields separated by '|', with a trailing '|'")
    out.add_argument("-P", "--parsable2", action="store_true", help="fields separated by '|', no trailing '|'")
    out.add_argument("--delimiter", metavar="CHARS", help="separator for -P (implies -P)")
    out.add_argument("-n", "--noheader", action="store_true", help="no header line")
    out.add_argument("--json", action="store_true", help="one JSON object (raw seconds and GPU-seconds)")


def _split(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def _states(text: str | None) -> set[str]:
    """-s names, aliases resolved; an unknown name is an error (a typo would
    otherwise select nothing and look like "no such jobs")."""
    wanted = set()
    for part in _split(text):
        name = part.upper()
        name = STATE_ALIASES.get(name, name)
        if name not in KNOWN_STATES:
            raise InputError(f"-s/--state value {shorten(part)!r} is not a job state (e.g. PENDING, RUNNING, "
                             f"COMPLETED, CANCELLED, FAILED, TIMEOUT, DONE; aliases {', '.join(STATE_ALIASES)})")
        wanted.add(name)
    return wanted


def _state_matches(row: reports.JobRow, wanted: set[str]) -> bool:
    if not wanted:
        return True
    return row.state in wanted or ("DONE" in wanted and row.finished)


def _overlaps(row: reports.JobRow, start: float | None, end: float | None) -> bool:
    """The job's life [submit, end (open while active)] meets the window [start, end]."""
    if end is not None and (row.submit_s is None or row.submit_s > end):
        return False
    if start is not None and row.end_s is not None and row.end_s < start:
        return False
    return True


def run(args) -> int:
    if args.helpformat:
        width = max(len(f.name) for f in reports.FIELDS)
        for f in reports.FIELDS:
            print(f"{f.name.ljust(width)}  %{f.width:<3} {f.doc}")
        return 0
    columns = reports.parse_format(args.format)
    states = _states(args.state)
    if args.policy and not args.from_dir:
        raise InputError("--policy needs --from DIR (a simulator output directory)")
    if args.trace and not args.from_dir:
        raise InputError("--trace needs --from DIR (the simulation that replayed it)")
    # a simulation of an exported trace is dated again: its times print, and -S/-E read, as the store's
    simulated = bool(args.from_dir) and not args.trace
    start = _time_option(args.starttime, "-S/--starttime", simulated)
    end = _time_option(args.endtime, "-E/--endtime", simulated)
    if start is not None and end is not None and end < start:
        raise InputError(f"-E/--endtime {args.endtime!r} is before -S/--starttime {args.starttime!r}")

    if args.from_dir:
        csvs = reports.simulation_csvs(args.from_dir)
        policy = reports.pick_policies(csvs, args.policy, args.from_dir, single=True)[0]
        rows = reports.rows_from_simulation(csvs[policy])
        source = {"source": "simulation", "directory": args.from_dir, "policy": policy,
                  "time_unit": "seconds from trace start"}
        if args.trace:
            rows = _dated(rows, args.trace)
            source.update(trace=args.trace, time_unit="epoch seconds")
        if not rows:
            print(f"no jobs in {csvs[policy]}")
            return 0
    elif not reports.is_admin(_getuid()):
        rows, source = _own_rows(args, start, end)
    else:
        loaded = _store_rows(args)
        if isinstance(loaded, int):
            return loaded
        rows, source = loaded

    users, job_ids, partitions = set(_split(args.user)), set(_split(args.jobs)), set(_split(args.partition))
    rows = [r for r in rows
            if (not users or r.user in users) and (not job_ids or r.job_id in job_ids)
            and _state_matches(r, states) and (not partitions or r.partition in partitions)
            and _overlaps(r, start, end)]

    if args.json:
        reports.emit(reports.format_json(columns, rows, source))
    elif args.parsable or args.parsable2 or args.delimiter is not None:
        delimiter = "|" if args.delimiter is None else args.delimiter
        reports.emit(reports.format_parsable(columns, rows, simulated, header=not args.noheader,
                                             delimiter=delimiter, trailing=args.parsable and not args.parsable2))
    else:
        reports.emit(reports.format_fixed(columns, rows, simulated, header=not args.noheader))
    return 0


def _time_option(text: str | None, option: str, simulated: bool) -> float | None:
    """-S/-E as epoch seconds (sacct's forms), or for a bare simulation seconds from its start."""
    if not text:
        return None
    if simulated:
        try:
            return reports.parse_time(text, option, simulated)
        except InputError:
            raise InputError(f"{option} value '{shorten(text)}': a simulation counts seconds from its trace's start "
                             "(seconds or [D-]HH:MM[:SS]); for dates give --trace FILE, the exported trace it "
                             "replayed") from None
    return argtypes.sacct_time(text, option)


def _dated(rows: list[reports.JobRow], trace: str) -> list[reports.JobRow]:
    """A simulation's rows with the dates, names and final states of the exported
    trace it replayed. A job the trace lacks means another trace: an error."""
    from controller.replay.traces import load_actuals, load_trace, time_base_s

    base = time_base_s(trace)
    if base is None:
        raise InputError(f"--trace {trace}: no jobs")
    jobs = {job.job_id: job for job in load_trace(trace)}
    actuals = load_actuals(trace)
    dated = []
    for row in rows:
        job = jobs.get(row.job_id)
        if job is None:
            raise InputError(f"--trace {trace}: has no job {row.job_id!r} of the simulation (another trace?)")
        # a state the history recorded decides how the job ended; the replay only moves when
        state = (actuals.get(row.job_id) or {}).get("state") or row.state
        dated.append(dataclasses.replace(
            row, submit_s=_plus(base, row.submit_s), start_s=_plus(base, row.start_s), end_s=_plus(base, row.end_s),
            state=state, job_name=job.job_name, user=row.user or job.user, partition=row.partition or job.partition))
    return dated


def _plus(base: float, seconds: float | None) -> float | None:
    return None if seconds is None else base + seconds


def _own_rows(args, start: float | None, end: float | None):
    """(rows, source): the caller's own jobs, asked of Slurm by the caller (no store)."""
    from slurm_plugin.accounting import merge_runs, own_recent_job_ids, run_sacct

    me = reports.user_name(_getuid())
    if set(_split(args.user)) - {me}:
        print(f"tiresias acct: note: only admins (root, groups {', '.join(reports.ADMIN_GROUPS)}) see other "
              f"users' jobs; showing {me}'s only", file=sys.stderr)
    window = [time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t)) if t is not None else default
              for t, default in ((start, SACCT_EPOCH), (end, "now"))]
    config = load(args.config, {"database_url": args.database_url, "cluster": args.cluster})
    runs, how = run_sacct(*window, users=[me], all_users=False)
    unseen = sorted(set(own_recent_job_ids()) - {run.job_id for run in runs}, key=int)
    if unseen:  # the window test on the rows below applies to these too
        runs += run_sacct(*window, all_users=False, job_ids=unseen)[0]
    rows = reports.rows_from_sacct(merge_runs(runs))
    return rows, {"source": how, "cluster": config.cluster, "restricted_to_user": me}


def _store_rows(args):
    """(rows, source) from the store (admins); or an exit code after printing why
    there is nothing."""
    from controller.service.state.store import StoreError

    config = load(args.config, {"database_url": args.database_url, "cluster": args.cluster})
    store = open_store(config.store_url())
    if store is None:
        print(f"no jobs recorded in {redact_url(config.database_url)} (the database does not exist yet)")
        return 0
    try:
        with store:
            records = store.load_jobs(config.cluster)
    except StoreError as err:
        print(f"tiresias acct: {err}", file=sys.stderr)
        return 1
    if not records:
        print(f"no jobs recorded in {store.name} (cluster {config.cluster})")
        return 0
    rows = reports.rows_from_store(records.values(), config.placement, config.pack_limit)
    return rows, {"source": "store", "database": store.name, "cluster": config.cluster}


def open_store(url: str):
    """The store, or None when its SQLite file does not exist (a read-only command
    must not create one). Errors opening it are one line and exit 1."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    from controller.service.state.store import Store, StoreError

    try:
        parsed = make_url(url)
    except ArgumentError:
        raise InputError(f"database url: cannot parse {redact_url(url)!r}") from None
    if parsed.get_backend_name() == "sqlite" and parsed.database and parsed.database != ":memory:":
        if not os.path.exists(parsed.database):
            return None
    try:
        return Store(url, access="read")
    except StoreError as err:
        raise SystemExit(f"tiresias: {err}") from None

"""Job traces from your own cluster.

`tiresias trace export` turns Slurm accounting (sacct) into a trace in the
project format, with what really happened (actual start/end, requeues, state)
so that `tiresias simulate --trace FILE --actual` can put Slurm's real JCTs next
to the simulated policies. It runs `sacct --json` (needs slurmdbd) and falls back
to `sacct -P` text; --from-file reads a saved output of either instead.
-S/-E take sacct's date forms (controller.cli.argtypes.sacct_time) and are resolved
here, so sacct and --from-file select the same window. The trace keeps each job's
GPU type, name, user, partition, nodes and real start/end. Excluded jobs (no GPUs,
never started, cancelled while pending, unfinished) are counted on stderr, then the
cluster the history shows and the simulate flags that replay it, and one warning per
kind of inconsistency. An empty window writes no file and exits 0.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from slurm_plugin.accounting import SACCT_TEXT_FIELDS, build_export, run_sacct, runs_from_output
from slurm_plugin.history_shape import history_shape
from controller.cli import argtypes
from controller.core.inputs import shorten
from controller.cli.out_paths import check_output_file
from controller.core.model import InputError
from controller.replay.traces import write_trace

DEFAULT_START = "now-7days"
DEFAULT_END = "now"


def _name_list(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",")]
    if len(names) > 1000 or any(not n or len(n) > 256 or not n.isprintable() or any(c.isspace() for c in n)
                                for n in names):
        raise argparse.ArgumentTypeError(f"value '{shorten(text)}' is not a comma-separated list of names")
    return names


def _window(start: str | None, end: str | None, default_start: str | None, default_end: str | None):
    """(start_s, end_s) epoch seconds (None: no limit) from -S/-E in sacct's forms."""
    start, end = start or default_start, end or default_end
    start_s = argtypes.sacct_time(start, "-S/--starttime") if start else None
    end_s = argtypes.sacct_time(end, "-E/--endtime") if end else None
    if start_s is not None and end_s is not None and end_s < start_s:
        raise InputError(f"-E/--endtime value {end!r} is before -S/--starttime value {start!r}")
    return start_s, end_s


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="trace_command", metavar="ACTION")
    export = sub.add_parser("export", help="write a trace from Slurm accounting (sacct)",
                            description=(__doc__ or "").strip())
    export.add_argument("--out", required=True, metavar="FILE", help="trace CSV to write (project format)")
    export.add_argument("-S", "--starttime", "--start", dest="start", metavar="TIME", default=None,
                        help=f"window start, as sacct -S: {argtypes.SACCT_TIME_FORMS} (default {DEFAULT_START}; "
                             "with --from-file: no limit)")
    export.add_argument("-E", "--endtime", "--end", dest="end", metavar="TIME", default=None,
                        help=f"window end, as sacct -E (default {DEFAULT_END}; with --from-file: no limit)")
    # sacct's spellings (-r/--partition, -u/--user) beside this command's first ones
    export.add_argument("-r", "--partition", "--partitions", dest="partitions", type=_name_list, default=[],
                        metavar="P,..", help="only these partitions (as sacct -r)")
    export.add_argument("-u", "--user", "--users", dest="users", type=_name_list, default=[], metavar="U,..",
                        help="only these users (as sacct -u)")
    export.add_argument("--from-file", metavar="F",
                        help=f"read a saved `sacct --json -a -X -D` or `sacct -P -a -X -D -o "
                             f"{','.join(SACCT_TEXT_FIELDS)}` output instead of running sacct")
    export.add_argument("--quiet", action="store_true",
                        help="no progress on stderr while sacct runs (bar on a terminal, else a line every 30 s)")
    export.add_argument("--sacct-timeout-s", type=argtypes.seconds, default=300.0, help=argparse.SUPPRESS)


def run(args) -> int:
    if getattr(args, "trace_command", None) != "export":
        raise InputError("trace: an action is required: export (see tiresias trace export --help)")
    check_output_file(args.out)  # before sacct: a bad --out must not cost its minutes
    notes: list[str] = []
    if args.from_file:
        path = Path(args.from_file)
        try:
            text = path.read_bytes()
        except OSError as err:
            raise InputError(f"{path}: cannot read: {err.strerror or err}") from None
        start_s, end_s = _window(args.start, args.end, None, None)
        runs = runs_from_output(text, str(path))
        result = build_export(runs, source=str(path), users=args.users, partitions=args.partitions,
                              start_s=start_s, end_s=end_s)
        window = f"{args.start or 'any'} .. {args.end or 'any'}"
    else:
        start_s, end_s = _window(args.start, args.end, DEFAULT_START, DEFAULT_END)
        # sacct gets the resolved times: the window is the one the forms above documented
        start, end = (time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t)) for t in (start_s, end_s))
        from controller.cli.progress import progress_for

        with progress_for(args, "sacct", "B", byte_units=True) as progress:
            runs, source = run_sacct(start, end, args.users, args.partitions, timeout_s=args.sacct_timeout_s,
                                     notes=notes, progress=progress)
        # sacct already applied the window and filters.
        result = build_export(runs, source=source)
        window = f"{start} .. {end}"
    for note in notes:
        print(f"tiresias trace export: note: {note}", file=sys.stderr)
    for line in result.summary_lines():
        print(line, file=sys.stderr)
    if result.jobs:
        for line in history_shape(result.jobs, result.actuals).lines():
            print(line, file=sys.stderr)
    for line in result.warning_lines():
        print(f"tiresias trace export: {line}", file=sys.stderr)
    if not result.jobs:
        what = "no jobs" if not result.jobs_seen else "no finished GPU jobs"
        print(f"tiresias trace export: {what} in the window {window}; {args.out} not written", file=sys.stderr)
        return 0
    out = Path(args.out)
    try:
        write_trace(out, result.jobs, actuals=result.actuals)
    except OSError as err:
        raise InputError(f"{out}: cannot write: {err.strerror or err}") from None
    print(f"wrote {out}: {len(result.jobs)} jobs (replay: tiresias simulate --trace {out} --actual)",
          file=sys.stderr)
    return 0


def replay_notes(trace: str, jobs, capacity_gpus: int, time_scale: float = 1.0) -> list[str]:
    """What `simulate` prints (stderr) before replaying an exported trace: the cluster
    the history shows, and a warning when the replay cluster is smaller than what
    the history had in use at once. Nothing for a trace without recorded runs."""
    from controller.replay.traces import load_actuals

    actuals = load_actuals(trace, time_scale=time_scale)
    if not any(rec.get("actual_start_s") is not None for rec in actuals.values()):
        return []
    shape = history_shape(jobs, actuals)
    warning = shape.capacity_warning(capacity_gpus)
    return shape.lines() + ([f"tiresias simulate: {warning}"] if warning else [])

"""Property-based fuzzing of every reader of outside data (issue 12, "Done when").

Each test feeds generated input (typed garbage mixed with the spellings that used to
slip through: ``1_0``, full-width and Arabic-Indic digits, ``²``, 5,000-digit numbers,
alias bombs, shell payloads) to one parser and asserts, for every case:

- no traceback: the parser returns or raises its own one-line error type only;
- no hang: Hypothesis' deadline fails any case slower than 10 s;
- no invalid value accepted: whatever is accepted is ASCII and inside its bounds;
- no payload executed: the marker file a payload would create never appears.

``test_zz_case_count`` checks that one run generated at least 1,000 cases in all
(``pytest -s`` prints the per-parser counts). Budget: well under a minute on 2 cores.
"""
from __future__ import annotations

import argparse
import collections
import json
import math
import os
import random
import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from controller.cli import argtypes
from controller.cli.reports import parse_format
from controller.core import inputs
from controller.core.expr import parse_expression
from controller.core.hints import parse_hints
from controller.core.model import InputError
from controller.replay.traces import load_trace
from controller.service.ops import config as config_mod
from slurm_plugin.accounting import runs_from_sacct_json, runs_from_sacct_text
from slurm_plugin.grammar import MAX_HOSTS, SlurmParseError, expand_hostlist
from slurm_plugin.parse_jobs import parse_scontrol_show_job, parse_squeue_json

ROOT = Path(__file__).resolve().parents[1]
CASES: collections.Counter = collections.Counter()
MARKER_DIR = Path(tempfile.mkdtemp(prefix="tiresias-fuzz-"))
MARKER = MARKER_DIR / "PWNED"

# Reproducible by default (the same cases every run); TIRESIAS_FUZZ_RANDOM=1 draws new
# ones and TIRESIAS_FUZZ_EXAMPLES=N sets the cases per parser, for longer hunts.
FUZZ = settings(max_examples=int(os.environ.get("TIRESIAS_FUZZ_EXAMPLES", "200")), deadline=10_000, database=None,
                derandomize=os.environ.get("TIRESIAS_FUZZ_RANDOM") != "1",
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])

ASCII_REAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
PAYLOADS = [f"$(touch {MARKER})", f"`touch {MARKER}`", f"; touch {MARKER}", f"| touch {MARKER}",
            f"__import__('os').system('touch {MARKER}')", f"{{{{touch {MARKER}}}}}"]
TRICKY_NUMBERS = ["1_0", "0.0_5", "１", "１０", "٣", "٠.٥", "²", "1²", "९", "0x10", "1e400", "-1e400", "nan",
                  "NaN", "inf", "-inf", "Infinity", "-0", "+1", " 1", "1 ", "\u00a01", "9" * 5000,
                  "1" + "0" * 400, "", " ", "1e-400", "1.5", "1e3", "-1", "0", "007", "1.", ".5", "1e", "e1",
                  "٣٣", "1\u200b", "4294967296", "18446744073709551616", "-9223372036854775809"]

numberish = st.one_of(
    st.sampled_from(TRICKY_NUMBERS + PAYLOADS),
    st.integers(-10**20, 10**20).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(alphabet="0123456789.-+eE_ ١٢３²", max_size=12),
    st.text(max_size=10),
)


class CaseTimeout(Exception):
    pass


def within_10s(test):
    """Each generated case gets 10 s of wall time (SIGALRM): a parser that hangs fails
    the test instead of stalling the suite. Hypothesis' deadline only reports cases
    that do finish."""
    import functools
    import signal

    @functools.wraps(test)
    def bounded(*args, **kwargs):
        def expired(_signum, _frame):
            raise CaseTimeout(f"one case ran over 10 s: {args or kwargs}"[:300])

        previous = signal.signal(signal.SIGALRM, expired)
        signal.setitimer(signal.ITIMER_REAL, 10.0)
        try:
            return test(*args, **kwargs)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    return bounded


def _no_payload_ran():
    assert not MARKER.exists(), "a payload was executed"


def _ascii_number(text: str) -> bool:
    return ASCII_REAL.fullmatch(text.strip()) is not None


# --------------------------------------------------------------------------- core/inputs
@FUZZ
@given(numberish, st.integers(-5, 5), st.integers(0, 10**12))
@within_10s
def test_fuzz_parse_int_and_float(text, lo, span):
    CASES["inputs"] += 1
    hi = lo + span
    try:
        value = inputs.parse_int(text, lo, hi, "n")
        assert re.fullmatch(r"[+-]?[0-9]+", text, re.ASCII) and lo <= value <= hi
    except inputs.BadValue as err:
        assert "\n" not in str(err) and len(str(err)) < 200
    try:
        real = inputs.parse_float(text, float(lo), float(hi), "x")
        assert ASCII_REAL.fullmatch(text) and lo <= real <= hi and math.isfinite(real)
    except inputs.BadValue as err:
        assert "\n" not in str(err) and len(str(err)) < 200


# --------------------------------------------------------------------------- traces, all formats
TRACE_FORMATS = {
    # header, builder(row fields) and the columns that hold numbers
    "project": ("job_id,num_gpus,submit_time_s,duration_s,skew,user_priority",
                ("num_gpus", "submit_time_s", "duration_s", "skew", "user_priority")),
    "tiresias": ("job_id,num_gpu,submit_time,iterations,model_name,duration,interval",
                 ("num_gpu", "submit_time", "duration")),
    "itp": ("job_id,submission_time,duration,num_gpu", ("submission_time", "duration", "num_gpu")),
    "philly-pollux": ("timestamp,duration,num_gpus,gpu_time,cluster", ("duration", "num_gpus")),
    "muri-raw": ("job_id,num_gpu,submit_time,iterations,model_name,batch_size,duration,interval,iteration_time,"
                 "resource_time_0,resource_time_1,resource_time_2,priority",
                 ("num_gpu", "submit_time", "duration", "priority")),
}
GOOD_VALUE = {"num_gpus": "2", "num_gpu": "2", "submit_time_s": "10", "submit_time": "10", "duration_s": "5",
              "duration": "5", "skew": "0.5", "user_priority": "1", "submission_time": "10", "priority": "0",
              "job_id": "j", "model_name": "vgg16", "iterations": "1", "interval": "0", "timestamp":
              "2017-10-09 07:01:55", "gpu_time": "1", "cluster": "c1", "batch_size": "1", "iteration_time": "1",
              "resource_time_0": "1", "resource_time_1": "1", "resource_time_2": "1"}


@FUZZ
@given(st.sampled_from(sorted(TRACE_FORMATS)),
       st.lists(st.dictionaries(st.sampled_from(sorted(GOOD_VALUE)), numberish, max_size=3), min_size=1, max_size=4))
@within_10s
def test_fuzz_traces(tmp_path_factory, fmt, overrides):
    CASES["traces"] += 1
    header, numeric = TRACE_FORMATS[fmt]
    columns = header.split(",")
    rows = []
    for k, over in enumerate(overrides):
        row = {c: over.get(c, GOOD_VALUE[c]) for c in columns}
        if "job_id" in row and "job_id" not in over:
            row["job_id"] = f"j{k}"
        rows.append(row)
    path = tmp_path_factory.mktemp("trace") / "t.csv"
    import csv

    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            writer.writerow([row[c] for c in columns])
    try:
        jobs = load_trace(path)
    except InputError as err:
        assert "\n" not in str(err) and len(str(err)) < 600
        return
    finally:
        _no_payload_ran()
    for row in rows:  # accepted: every number in the file was an ASCII number
        for c in numeric:
            text = row[c].strip()
            if c in ("skew", "user_priority", "duration_s") and text == "":  # optional in the project format
                continue
            assert _ascii_number(text), (fmt, c, text)
    for job in jobs:
        assert 1 <= job.num_gpus <= inputs.MAX_JOB_GPUS
        assert job.duration_s is None or 0 <= job.duration_s <= inputs.MAX_SECONDS
        assert 0 <= job.skew <= 1 and math.isfinite(job.submit_time_s)


# --------------------------------------------------------------------------- config (YAML)
yaml_scalar = st.one_of(st.integers(-10**30, 10**30), st.floats(allow_nan=True, allow_infinity=True),
                        numberish, st.booleans(), st.none(), st.sampled_from(["shadow", "dlas", "USR1", "INFO"]))
yaml_value = st.recursive(yaml_scalar, lambda inner: st.lists(inner, max_size=3), max_leaves=6)
SETTINGS = [s.name for s in config_mod.SCHEMA]
RAW_YAML = [
    "interval_s: 1" + "0" * 400 + "\n",
    "metrics_port: 70000\n",
    "interval_s: " + "[" * 5000 + "]" * 5000 + "\n",
    "a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
    "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n",
    "poll_s: !!python/object/apply:os.system ['touch " + str(MARKER) + "']\n",
    "interval_s: 1_0\n", "interval_s: ١٠\n", "partitions: [a, b]\npartitions: [c]\n", "? [a]\n: 1\n",
    "- 1\n", "'", "interval_s: .nan\n", "promote_knob: .inf\n", "mps_tiers: [10, 2000]\n",
    "site_factor_band: " + "9" * 5000 + "\n",
]


@FUZZ
@given(st.one_of(
    st.dictionaries(st.one_of(st.sampled_from(SETTINGS), st.text(max_size=8)), yaml_value, max_size=4).map(
        lambda d: yaml.safe_dump(d, allow_unicode=True).encode()),
    st.sampled_from(RAW_YAML).map(str.encode),
    st.sampled_from(RAW_YAML).map(lambda t: t.encode("utf-16")),
    st.sampled_from(["interval_s: 5\n# caf\xe9\n"]).map(lambda t: t.encode("latin-1")),
    st.binary(max_size=64),
))
@within_10s
def test_fuzz_config(tmp_path_factory, raw):
    CASES["config"] += 1
    path = tmp_path_factory.mktemp("cfg") / "t.yaml"
    path.write_bytes(raw)
    try:
        cfg = config_mod.load(str(path))
    except InputError as err:
        assert "\n" not in str(err) and len(str(err)) < 1200
        return
    finally:
        _no_payload_ran()
    for setting in config_mod.SCHEMA:
        value = getattr(cfg, setting.name)
        if setting.kind in ("int", "float") and not (setting.name == "promote_knob" and value == math.inf):
            assert math.isfinite(value)
            assert setting.minimum is None or value >= setting.minimum
            assert value <= config_mod.maximum(setting)
    assert 0 <= cfg.metrics_port <= 65535


# --------------------------------------------------------------------------- priority expressions
expr_text = st.one_of(
    st.text(alphabet="dqug0123456789.+-*/^() eE_\t²٣１éабв'\"[],;:#$`", max_size=24),
    st.text(max_size=16),
    st.sampled_from(["d²", "é + d", "٣ * d", "d^٢", "1" * 5000 + "*d", "d^99999999999999999999", "(" * 400 + "d"
                     + ")" * 400, "d+" * 3000 + "d", "__import__('os').system('touch " + str(MARKER) + "')"]),
)


@FUZZ
@given(expr_text)
@within_10s
def test_fuzz_expressions(text):
    CASES["expressions"] += 1
    try:
        tree = parse_expression(text)
    except InputError as err:
        assert "\n" not in str(err)
        return
    finally:
        _no_payload_ran()
    assert text.isascii(), text
    with np.errstate(all="ignore"):
        tree.evaluate(np.array([1.0, 0.0]), np.array([2.0, 0.0]), np.array([1.0, 1.0]), np.array([4.0, 1.0]))


# --------------------------------------------------------------------------- hints (Python and Lua)
HINT_PIECES = ["tiresias:skew=", "tiresias:class=", "tiresias:skew", "latency", "batch", "0.5", "1", ".", "0",
               "_", "１", "٣", "²", " ", ",", ";", "\t", "\u00a0", "e1", "-", "x",
               "tiresias:preemptable", "=", "B:", "SIG", "USR1", "kill", "@90", "10", "ſ"]
SPEC_PIECES = ["B", "R", ":", "SIG", "sig", "USR1", "usr2", "TERM", "KILL", "STOP", "1", "0", "2", "5", "@", "9",
               "x", "ſ", "١", "$", "\u00a0"]


@FUZZ
@given(st.lists(st.sampled_from(HINT_PIECES), max_size=8).map("".join) | st.text(max_size=20))
@within_10s
def test_fuzz_hints_python(comment):
    CASES["hints"] += 1
    hints = parse_hints(comment)
    assert (hints.bad is None) == (hints.problem is None)
    if hints.skew is not None:
        assert 0 <= hints.skew <= 1
        token = re.search(r"tiresias:skew=([^ \t\n\v\f\r,;]*)", comment).group(1)
        assert ASCII_REAL.fullmatch(token) and token.isascii()


def test_fuzz_hints_lua_agrees_with_python(tmp_path):
    """600 random comments through both implementations (one Lua process)."""
    from tests.test_hints import LUA_RUNNER, PLUGIN, _unescape, preempt_column
    from tests.test_job_submit_lua import INTERPRETERS, _find

    lua = _find(INTERPRETERS)
    if lua is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("no Lua interpreter under CI")
        pytest.skip("no Lua interpreter (tests/test_job_submit_lua.py installs one)")
    rng = random.Random(12)
    comments = ["".join(rng.choice(HINT_PIECES) for _ in range(rng.randint(0, 7))) for _ in range(300)]
    # and 300 preemption opt-ins with random checkpoint signal specs
    comments += ["tiresias:preemptable=" + "".join(rng.choice(SPEC_PIECES) for _ in range(rng.randint(0, 5)))
                 for _ in range(300)]

    def esc(s):
        return (s.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
                .replace("\v", "\\v").replace("\f", "\\f"))

    table = tmp_path / "cases.tsv"
    table.write_text("".join(f"{esc(c)}\t-\t-\t-\t-\n" for c in comments), encoding="utf-8")
    proc = subprocess.run([lua, str(LUA_RUNNER), str(PLUGIN), str(table)], capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.decode().split("\n")[:-1]
    assert len(lines) == len(comments)
    for comment, line in zip(comments, lines):
        _, skew, klass, bad, preempt = line.split("\t")
        hints = parse_hints(comment)
        assert preempt == preempt_column(hints), comment
        assert (None if skew == "-" else float(skew)) == hints.skew, comment
        assert (None if klass == "-" else klass) == hints.job_class, comment
        assert (None if bad == "-" else _unescape(bad)) == hints.bad, comment
    CASES["hints-lua"] += len(comments)


# --------------------------------------------------------------------------- CLI flags
FLAG_TYPES = {"nodes": (argtypes.nodes, 1, inputs.MAX_NODES), "gpus": (argtypes.gpus_per_node, 1, 1024),
              "seed": (argtypes.seed, 0, 2**32 - 1), "port": (argtypes.port, 0, 65535),
              "population": (argtypes.int_in(1, 10_000), 1, 10_000),
              "positive": (argtypes.positive_float, 0, 1e9), "seconds": (argtypes.seconds, 0, inputs.MAX_SECONDS),
              "unit": (argtypes.unit_float, 0, 1), "knob": (argtypes.knob, 0, math.inf)}


@FUZZ
@given(st.sampled_from(sorted(FLAG_TYPES)), numberish)
@within_10s
def test_fuzz_cli_flags(kind, text):
    CASES["cli"] += 1
    parse, lo, hi = FLAG_TYPES[kind]
    try:
        value = parse(text)
    except argparse.ArgumentTypeError as err:
        assert "\n" not in str(err) and len(str(err)) < 200
        return
    assert text.strip().isascii() and lo <= value <= hi, (kind, text, value)
    assert kind == "knob" or _ascii_number(text)


@FUZZ
@given(st.one_of(st.text(max_size=30), st.tuples(st.sampled_from(["JobID", "User", "State", "bogus"]), numberish)
                 .map(lambda t: f"{t[0]}%{t[1]}")),
       st.sampled_from(["", ",", ",JobID%-12"]))
@within_10s
def test_fuzz_acct_format_and_thresholds(text, tail):
    CASES["cli"] += 1
    try:
        columns = parse_format(text + tail)
        assert all(1 <= c.width <= inputs.MAX_COLUMN_WIDTH for c in columns)
    except InputError as err:
        assert "\n" not in str(err) and len(str(err)) < 600
    try:
        values = argtypes.thresholds(text)
        assert all(math.isfinite(v) for v in values)
    except argparse.ArgumentTypeError as err:
        assert "\n" not in str(err)


# --------------------------------------------------------------------------- Slurm records
slurm_number = st.one_of(
    st.integers(-10**25, 10**25), st.floats(allow_nan=True, allow_infinity=True), numberish,
    st.fixed_dictionaries({"set": st.booleans(), "infinite": st.booleans(), "number": st.integers(-10**25, 10**25)}),
    st.none(), st.lists(st.integers(), max_size=2), st.booleans())
hostlist = st.one_of(st.sampled_from(["gpu[1-99999999]", "gpu[1-3]", "n[01-04],m[1-2]", "gpu[", "gpu]", "",
                                      "(null)", "gpu[1-2][1-99999]", "gpu[٣]", "gpu[5-1]"]), st.text(max_size=12))
tres = st.one_of(st.sampled_from(["gres/gpu:2", "gres:gpu:99999999999999", "gres/gpu=１", "gres/gpu:a100:2",
                                  "gpu:1_0", "gres/mps:50", "cpu=1,gres/gpu=2"]), st.text(max_size=12))


@FUZZ
@given(st.lists(st.fixed_dictionaries({
    "job_id": slurm_number, "job_state": st.one_of(st.sampled_from(["RUNNING", "PENDING", "COMPLETED"]),
                                                   st.lists(st.sampled_from(["PENDING", "REQUEUED", "X"])),
                                                   st.integers(), st.text(max_size=5)),
    "node_count": slurm_number, "tasks": slurm_number, "start_time": slurm_number, "end_time": slurm_number,
    "submit_time": slurm_number, "time_limit": slurm_number, "restart_cnt": slurm_number, "priority": slurm_number,
    "nodes": hostlist, "tres_per_node": tres, "tres_req_str": tres, "comment": st.text(max_size=12),
}), min_size=1, max_size=3))
@within_10s
def test_fuzz_squeue_records(records):
    CASES["slurm"] += 1
    errors: list = []
    jobs = parse_squeue_json({"jobs": records}, errors)
    assert len(jobs) + len(errors) == len(records)  # each record: a job or one logged error
    for err in errors:
        assert isinstance(err, SlurmParseError) and "\n" not in str(err) and len(str(err)) < 400
    for job in jobs:
        assert job.job_id.isascii() and job.job_id.isdigit()
        assert 0 <= job.gpus and len(job.nodes) <= MAX_HOSTS
        for t in (job.start_time, job.end_time):
            assert t is None or 0 < t <= inputs.MAX_EPOCH_S
        assert job.time_limit_s is None or 0 <= job.time_limit_s <= inputs.MAX_SECONDS
        assert 0 <= job.restart_count <= 10**7


@FUZZ
@given(hostlist)
@within_10s
def test_fuzz_hostlists(text):
    CASES["slurm"] += 1
    try:
        names = expand_hostlist(text)
    except SlurmParseError as err:
        assert "\n" not in str(err)
        return
    assert len(names) <= MAX_HOSTS


SACCT_HEADER = "JobIDRaw|JobID|User|Partition|State|Submit|Start|End|Elapsed|AllocTRES|ReqTRES|NodeList"
sacct_time = st.one_of(st.sampled_from(["2024-05-01T10:00:00", "Unknown", "1969-12-31T23:59:59",
                                        "２024-05-01T10:00:00", "9999-12-31T23:59:59", ""]), st.text(max_size=8))
elapsed = st.one_of(st.sampled_from(["00:01:00", "99999999999999", "1-00:00:00", "1_0:00", "٣:00", "UNLIMITED"]),
                    numberish)


@FUZZ
@given(st.lists(st.tuples(st.one_of(st.integers(1, 10**6).map(str), numberish), sacct_time, sacct_time, sacct_time,
                          elapsed, tres, hostlist), min_size=1, max_size=3))
@within_10s
def test_fuzz_sacct_text(rows):
    CASES["slurm"] += 1
    lines = [SACCT_HEADER] + [f"{i}|{i}|alice|gpu|COMPLETED|{sub}|{sta}|{end}|{el}|{tr}|{tr}|{nl}"
                              for i, sub, sta, end, el, tr, nl in rows]
    try:
        runs = runs_from_sacct_text("\n".join(lines))
    except InputError as err:
        assert "\n" not in str(err) and len(str(err)) < 800
        return
    for run in runs:
        assert 0 <= run.elapsed_s <= inputs.MAX_SECONDS
        assert run.submit_s > 0


@FUZZ
@given(st.lists(st.fixed_dictionaries({
    "job_id": slurm_number, "state": st.fixed_dictionaries({"current": st.sampled_from(["COMPLETED", "X"])}),
    "time": st.fixed_dictionaries({"elapsed": slurm_number, "submission": slurm_number, "start": slurm_number,
                                   "end": slurm_number}),
    "tres": st.fixed_dictionaries({"allocated": st.lists(st.fixed_dictionaries(
        {"type": st.just("gres"), "name": st.just("gpu"), "count": slurm_number}), max_size=1)}),
    "nodes": hostlist}), min_size=1, max_size=2))
@within_10s
def test_fuzz_sacct_json(records):
    CASES["slurm"] += 1
    try:
        runs = runs_from_sacct_json(json.dumps({"jobs": records}))
    except InputError as err:
        assert "\n" not in str(err) and len(str(err)) < 800
        return
    for run in runs:
        assert 0 <= run.elapsed_s <= inputs.MAX_SECONDS


@FUZZ
@given(st.lists(st.tuples(numberish, st.sampled_from(["RUNNING", "PENDING", "BOGUS"]), numberish, hostlist,
                          sacct_time), min_size=1, max_size=3))
@within_10s
def test_fuzz_scontrol_text(rows):
    CASES["slurm"] += 1
    text = "\n".join(f"JobId={jid} JobName=x UserId=alice(1000) JobState={state} Restarts={rs} "
                     f"NumNodes=1 NodeList={nl} StartTime={st_} TimeLimit=01:00:00"
                     for jid, state, rs, nl, st_ in rows if "\n" not in jid + rs + nl + st_ and "\r" not in jid + rs + nl + st_)
    try:
        jobs = parse_scontrol_show_job(text, errors := [])
    except SlurmParseError as err:
        assert "\n" not in str(err)
        return
    for job in jobs:
        assert job.job_id.isascii() and len(job.nodes) <= MAX_HOSTS
    assert all(isinstance(e, SlurmParseError) for e in errors)


# --------------------------------------------------------------------------- job ids and signals
@FUZZ
@given(st.one_of(numberish, st.sampled_from(["B:USR1@90", "USR1", "SIGTERM", "10", "٣", "B:١٠", "R:USR2@٩٠", "KILL",
                                             "B:USR1@" + "9" * 5000]), st.text(max_size=10)),
       st.one_of(numberish, st.sampled_from(["12", "12_3", "٣_1", "²", "1" * 5000])))
@within_10s
def test_fuzz_signal_specs_and_job_ids(spec, job_id):
    from controller import checkpoint
    from controller.service.acting.backend import numeric_id
    from controller.service.round.contract import parse_signal_spec

    CASES["slurm"] += 1
    signal_, why = parse_signal_spec(spec, "fuzz")
    if signal_ is not None:
        assert spec.strip().isascii() and why == ""
    else:
        assert "\n" not in why
    numeric_id(job_id)  # sorts any id without raising
    try:
        number = checkpoint.signal_number(spec)
        assert spec.strip().isascii() and number > 0
    except (ValueError, KeyError):
        pass


# --------------------------------------------------------------------------- node hooks
def _node_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("tiresias_epilog_fuzz", ROOT / "epilog" / "tiresias_epilog.py")
    epilog_mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(epilog_mod)
    return epilog_mod, epilog_mod.load_node_module()


EPILOG_MOD, NODE = _node_module()
env_value = st.one_of(numberish, st.sampled_from(["0", "1", "101", "0,1", "²:0", "3:0", "0:9", "256:0", "1,a",
                                                  "../0", "/tmp", "alice", "gpu1"]))


NODE_ENV_BASE = {"SLURM_JOB_ID": "101", "SLURM_JOB_UID": "0", "SLURMD_NODENAME": "gpu1", "SLURM_CLUSTER_NAME": "tc",
                 "SLURM_JOB_USER": "alice", "SLURM_JOB_GPUS": "0", "SLURM_JOB_RESTART_COUNT": "0"}


@FUZZ
@given(st.fixed_dictionaries({}, optional={
    "SLURM_JOB_ID": env_value, "SLURM_JOB_UID": env_value, "SLURMD_NODENAME": env_value,
    "SLURM_CLUSTER_NAME": env_value, "SLURM_JOB_RESTART_COUNT": env_value, "SLURM_JOB_USER": env_value,
    "SLURM_JOB_GPUS": env_value, "SLURM_JOB_WORK_DIR": env_value, "SLURM_JOB_EXIT_CODE2": env_value,
    "SLURM_JOB_EXIT_CODE": env_value, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": env_value}),
    st.sampled_from(["ok", "garbage", "list", "badtypes"]))
@within_10s
def test_fuzz_node_hooks(tmp_path_factory, overrides, state_kind):
    """The prolog then the epilog, in process, with a generated Slurm environment and a
    possibly corrupt per-job state file: both return 0 and, for a valid job, the usage
    record is spooled and the job's state file is gone."""
    CASES["node"] += 1
    env = {k: v.replace("\0", "") for k, v in {**NODE_ENV_BASE, **overrides}.items()}  # mostly valid jobs
    base = tmp_path_factory.mktemp("node")
    values = dict(NODE.DEFAULTS, run_dir=str(base / "run"), spool_dir=str(base / "spool"),
                  log_file=str(base / "node.log"), mps_control=str(base / "no-such-mps-control"))
    config = NODE.NodeConfig(values, [])
    log = NODE.NodeLog(config.log_file, "fuzz")
    assert NODE.prolog(env, config, log) == 0
    job = NODE.JobEnv(env, config, log)
    if not job.error and state_kind != "ok":
        state_path = NODE.job_state_path(config, job.job_id)
        if os.path.isdir(os.path.dirname(state_path)):
            corrupt = {"garbage": b"{not json", "list": b"[1, 2]",
                       "badtypes": json.dumps({"mps": "x", "start_s": "abc", "gpus": {"a": 1}}).encode()}
            Path(state_path).write_bytes(corrupt[state_kind])
    assert EPILOG_MOD.epilog(NODE, env, config, log) == 0
    code, sig = EPILOG_MOD.exit_status(env)
    assert (code is None and sig is None) or (0 <= code <= 255 and 0 <= sig <= 127)
    _no_payload_ran()
    if job.error:
        return
    records = [json.loads(line) for p in (base / "spool").glob("*.jsonl") for line in p.read_text().splitlines()]
    assert [r["job_id"] for r in records] == [job.job_id], "the usage record was lost"
    assert not os.path.exists(NODE.job_state_path(config, job.job_id))


def test_zz_case_count():
    """Runs last in this file: at least 1,000 generated cases in all."""
    total = sum(CASES.values())
    print(f"\nfuzz cases: {total} ({', '.join(f'{k} {v}' for k, v in sorted(CASES.items()))})")
    if len(CASES) < 9:
        pytest.skip("only part of the fuzz file ran (selected with -k?)")
    assert total >= 1000

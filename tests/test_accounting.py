"""`tiresias trace export` from saved sacct outputs, and `simulate --actual`.

The fixtures are the recorded 22.05 `sacct --json`/`-P` outputs and the 24.11 and 26.05
JSON recorded from the same workload (tests/fixtures/slurm/record.sh). They hold: 1 and 2 COMPLETED (2 and 1 GPUs),
3 FAILED without GPUs, 4 requeued (a REQUEUED run, then RUNNING), 5/7/8 RUNNING
(GPU), 6 RUNNING with MPS only, 10 PENDING (16 GPUs). Cases the fixtures lack
(a requeued job that finished, a job cancelled while pending) are derived here
from them, as the live 22.05 cluster records them (see the inline text sample).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.cli import main as cli
from slurm_plugin.accounting import (
    build_export,
    merge_runs,
    parse_time_bound,
    runs_from_output,
    runs_from_sacct_json,
    runs_from_sacct_text,
)
from controller.core.model import InputError
from controller.replay.traces import load_actuals, load_trace

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "slurm"
JSON_2205 = FIXTURES / "22.05" / "sacct.json"
JSON_2411 = FIXTURES / "24.11" / "sacct.json"
JSON_2605 = FIXTURES / "26.05" / "sacct.json"
TEXT_2205 = FIXTURES / "22.05" / "sacct.txt"

# Recorded on the 22.05 test cluster (`sacct -P -a -X -D -o ...`): job 34 requeued
# once, 30 and 18 cancelled while pending (30 got Start = End = cancel time but no
# nodes), 40 had no GPUs. Job 34's last run is edited to COMPLETED with 2 s.
LIVE_TEXT = """\
JobIDRaw|JobID|User|Partition|State|Submit|Start|End|Elapsed|AllocTRES|ReqTRES|NodeList
18|18|alice|batch|CANCELLED by 0|2026-11-30T17:48:37|None|2026-11-30T17:48:45|00:00:00||billing=1,cpu=1,gres/gpu=1,mem=16000M,node=1|None assigned
30|30|alice|batch|CANCELLED by 0|2026-11-30T17:54:12|2026-11-30T17:54:12|2026-11-30T17:54:12|00:00:00||billing=1,cpu=1,gres/gpu=1,mem=16000M,node=1|None assigned
34|34|alice|batch|REQUEUED|2026-11-30T17:54:14|2026-11-30T17:54:15|2026-11-30T17:54:16|00:00:01|billing=1,cpu=1,gres/gpu=1,node=1|billing=1,cpu=1,gres/gpu=1,mem=16000M,node=1|gpu1
34|34|alice|batch|COMPLETED|2026-11-30T17:54:16|2026-11-30T17:54:17|2026-11-30T17:54:19|00:00:02|billing=1,cpu=1,gres/gpu=1,node=1|billing=1,cpu=1,gres/gpu=1,mem=16000M,node=1|gpu2
37|37|bob|small|COMPLETED|2026-11-30T17:55:20|2026-11-30T17:55:20|2026-11-30T17:55:30|00:00:10|billing=2,cpu=2,gres/gpu=4,node=2|billing=2,cpu=2,gres/gpu=4,mem=32000M,node=2|gpu[1-2]
40|40|alice|batch|COMPLETED|2026-11-30T17:55:22|2026-11-30T17:55:22|2026-11-30T17:55:23|00:00:01|billing=1,cpu=1,node=1|billing=1,cpu=1,mem=16000M,node=1|gpu3
"""


# The times of each recording: job 1 (submitted, started, ended), job 2 (submitted), job 4
# (submitted, first run started, both runs' elapsed seconds at the recording).
TIMES = {
    JSON_2205: dict(j1=(1796060510.0, 1796060510.0, 1796060515.0), j2=1796060528.0,
                    j4=(1796060528.0, 1796060529.0, 8.0)),
    JSON_2411: dict(j1=(1796290760.0, 1796290762.0, 1796290767.0), j2=1796290767.0,
                    j4=(1796290767.0, 1796290768.0, 3.0)),
    JSON_2605: dict(j1=(1796486440.0, 1796486442.0, 1796486447.0), j2=1796486447.0,
                    j4=(1796486447.0, 1796486448.0, 3.0)),
}
TIMES[TEXT_2205] = TIMES[JSON_2205]
# the node job 4's last run had in each recording (trace export keeps it as node_list)
NODES4 = {JSON_2205: "gpu2", JSON_2411: "gpu1", JSON_2605: "gpu1"}

pytestmark = pytest.mark.usefixtures("utc")  # sacct text times are local time (conftest.utc)


def _number(value):
    return value["number"] if isinstance(value, dict) else value  # 24.11 {set, infinite, number}


def _finished_json(path: Path) -> str:
    """The fixture with job 4's second run COMPLETED after the time it had run when
    recorded, and job 10 cancelled 31 s after its submission while pending."""
    doc = json.loads(path.read_text())
    listy = isinstance(doc["jobs"][0]["state"]["current"], list)
    rerun = [job for job in doc["jobs"] if job["job_id"] == 4][-1]  # sacct -D: runs in order
    t = rerun["time"]
    rerun["state"]["current"] = ["COMPLETED"] if listy else "COMPLETED"
    t["end"] = _number(t["start"]) + _number(t["elapsed"])
    for job in doc["jobs"]:
        if job["job_id"] == 10:
            job["state"]["current"] = ["CANCELLED"] if listy else "CANCELLED"
            job["time"]["end"] = _number(job["time"]["submission"]) + 31
    return json.dumps(doc)


# --------------------------------------------------------------------------- the fixtures as recorded
@pytest.mark.parametrize("path", [JSON_2205, JSON_2411, JSON_2605, TEXT_2205],
                         ids=["22.05-json", "24.11-json", "26.05-json", "22.05-text"])
def test_fixture_export_rows_and_counts(path):
    runs = runs_from_output(path.read_bytes(), str(path))
    assert len(runs) == 10
    result = build_export(runs, source=str(path))
    assert result.jobs_seen == 9
    (submit1, start1, end1), submit2 = TIMES[path]["j1"], TIMES[path]["j2"]
    assert [(j.job_id, j.num_gpus, j.submit_time_s, j.duration_s, j.user, j.partition) for j in result.jobs] == [
        ("1", 2, submit1, 5.0, "alice", "batch"),
        ("2", 1, submit2, 1.0, "alice", "batch"),
    ]
    assert result.actuals["1"] == {"actual_start_s": start1, "actual_end_s": end1,
                                   "requeues": 0, "state": "COMPLETED", "node_list": "gpu1"}
    assert result.excluded == {"no_gpu": ["3", "6"], "cancelled_pending": [], "never_started": ["10"],
                               "unfinished": ["4", "5", "7", "8"], "bad_times": []}


@pytest.mark.parametrize("path", [JSON_2205, JSON_2411, JSON_2605, TEXT_2205],
                         ids=["22.05-json", "24.11-json", "26.05-json", "22.05-text"])
def test_requeued_runs_merge(path):
    merged = {j.job_id: j for j in merge_runs(runs_from_output(path.read_bytes(), str(path)))}
    job = merged["4"]
    assert (job.requeues, job.submit_s, job.first_start_s, job.elapsed_s, job.gpus, job.state) == \
        (1, *TIMES[path]["j4"], 1, "RUNNING")
    assert job.last_end_s is None  # still running: excluded as unfinished
    assert merged["10"].gpus == 16 and not merged["10"].allocated


@pytest.mark.parametrize("path", [JSON_2205, JSON_2411, JSON_2605], ids=["22.05", "24.11", "26.05"])
def test_finished_requeued_job_and_cancelled_pending_json(path):
    result = build_export(runs_from_sacct_json(_finished_json(path)))
    by_id = {j.job_id: j for j in result.jobs}
    assert sorted(by_id) == ["1", "2", "4"]
    submit4, start4, elapsed4 = TIMES[path]["j4"]
    last_end = max(r.end_s for r in runs_from_sacct_json(_finished_json(path)) if r.job_id == "4")
    last_start = max(r.start_s for r in runs_from_sacct_json(_finished_json(path)) if r.job_id == "4")
    assert (by_id["4"].num_gpus, by_id["4"].duration_s, by_id["4"].submit_time_s) == (1, elapsed4, submit4)
    assert result.actuals["4"] == {"actual_start_s": start4, "actual_end_s": last_end,
                                   "requeues": 1, "state": "COMPLETED", "node_list": NODES4[path],
                                   "last_start_s": last_start}
    assert result.requeued_jobs == 1
    assert result.excluded["cancelled_pending"] == ["10"]
    assert result.excluded["never_started"] == []
    assert result.excluded["unfinished"] == ["5", "7", "8"]


def test_live_text_sample():
    result = build_export(runs_from_sacct_text(LIVE_TEXT))
    assert [(j.job_id, j.num_gpus, j.duration_s, j.user, j.partition) for j in result.jobs] == [
        ("34", 1, 3.0, "alice", "batch"), ("37", 4, 10.0, "bob", "small")]
    start = parse_time_bound("2026-11-30T17:54:14", "t")
    assert result.actuals["34"] == {"actual_start_s": start + 1, "actual_end_s": start + 5, "requeues": 1,
                                    "state": "COMPLETED", "node_list": "gpu2", "last_start_s": start + 3}
    assert result.excluded["cancelled_pending"] == ["18", "30"]
    assert result.excluded["no_gpu"] == ["40"]


def test_filters_on_saved_output():
    runs = runs_from_sacct_text(LIVE_TEXT)
    assert [j.job_id for j in build_export(runs, users=["bob"]).jobs] == ["37"]
    assert [j.job_id for j in build_export(runs, partitions=["batch"]).jobs] == ["34"]
    cut = parse_time_bound("2026-11-30T17:55:00", "t")
    assert [j.job_id for j in build_export(runs, start_s=cut).jobs] == ["37"]
    assert [j.job_id for j in build_export(runs, end_s=cut).jobs] == ["34"]


def test_text_with_requested_tres_only():
    text = "JobID|State|Submit|Start|End|Elapsed|ReqTRES\n" \
           "8|COMPLETED|2026-11-30T17:00:00|2026-11-30T17:00:10|2026-11-30T17:00:40|00:00:30|gres/gpu=3\n" \
           "9|CANCELLED by 0|2026-11-30T17:00:00|None|2026-11-30T17:00:40|00:00:00|gres/gpu=1\n"
    result = build_export(runs_from_sacct_text(text))
    assert [(j.job_id, j.num_gpus, j.duration_s) for j in result.jobs] == [("8", 3, 30.0)]
    assert result.excluded["cancelled_pending"] == ["9"]


def test_text_tolerates_steps_and_trailing_delimiter():
    text = "JobID|State|Submit|Start|End|Elapsed|AllocTRES|\n" \
           "7|COMPLETED|2026-11-30T17:00:00|2026-11-30T17:00:10|2026-11-30T17:01:10|00:01:00|gres/gpu=2|\n" \
           "7.batch|COMPLETED|2026-11-30T17:00:10|2026-11-30T17:00:10|2026-11-30T17:01:10|00:01:00||\n"
    result = build_export(runs_from_sacct_text(text))
    assert [(j.job_id, j.num_gpus, j.duration_s) for j in result.jobs] == [("7", 2, 60.0)]


# --------------------------------------------------------------------------- CLI
def test_cli_export_writes_trace_with_actuals(tmp_path, capsys):
    src = tmp_path / "sacct.json"
    src.write_text(_finished_json(JSON_2205))
    out = tmp_path / "trace.csv"
    assert cli.main(["trace", "export", "--from-file", str(src), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "3 GPU job(s) in the trace (1 requeued" in err
    assert "excluded 2 job(s) without whole GPUs" in err and ": 3,6" in err
    assert "excluded 1 job(s) cancelled while pending (never allocated): 10" in err
    assert "excluded 3 job(s) still running" in err
    jobs = load_trace(out)
    assert [(j.job_id, j.num_gpus, j.submit_time_s, j.duration_s) for j in jobs] == [
        ("1", 2, 0.0, 5.0), ("2", 1, 18.0, 1.0), ("4", 1, 18.0, 8.0)]
    actuals = load_actuals(out)
    assert actuals["4"] == {"actual_start_s": 19.0, "actual_end_s": 31.0, "requeues": 1, "state": "COMPLETED",
                            "node_list": NODES4[JSON_2205], "last_start_s": 24.0}  # its second run's start


def test_simulate_actual(tmp_path, capsys):
    src = tmp_path / "sacct.json"
    src.write_text(_finished_json(JSON_2205))  # the figures below are that recording's
    trace = tmp_path / "trace.csv"
    assert cli.main(["trace", "export", "--from-file", str(src), "--out", str(trace)]) == 0
    capsys.readouterr()
    assert cli.main(["simulate", "--trace", str(trace), "--nodes", "1", "--gpus-per-node", "4", "--policy", "dlas",
                     "--actual", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    actual = doc["actual"]
    # JCTs 5, 2, 13 s; queueing 0, 1, 1 s; requeues 1.
    assert actual["policy"] == "actual (Slurm)" and actual["jobs"] == 3
    assert actual["avg_jct_s"] == pytest.approx(20 / 3)
    assert actual["median_jct_s"] == 5.0 and actual["max_jct_s"] == 13.0
    assert actual["avg_queueing_s"] == pytest.approx(2 / 3)
    assert actual["preemptions"] == 1
    out_dir = tmp_path / "out"
    assert cli.main(["simulate", "--trace", str(trace), "--nodes", "1", "--gpus-per-node", "4", "--policy", "dlas",
                     "--actual", "--out", str(out_dir)]) == 0
    table = capsys.readouterr().out
    row = next(line for line in table.splitlines() if line.startswith("actual (Slurm)"))
    assert row.split()[2:6] == ["3", "6.7s", "5.0s", "12.2s"]
    assert (out_dir / "jct_cdf.png").stat().st_size > 0


def test_simulate_actual_needs_actuals(capsys):
    from tests.conftest import TRACE60 as trace
    assert cli.main(["simulate", "--trace", str(trace), "--actual", "--policy", "dlas"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no actual_start_s/actual_end_s columns" in err


def test_empty_window_writes_no_file(tmp_path, capsys):
    src = tmp_path / "empty.json"
    doc = json.loads(JSON_2205.read_text())
    doc["jobs"] = []
    src.write_text(json.dumps(doc))
    out = tmp_path / "trace.csv"
    assert cli.main(["trace", "export", "--from-file", str(src), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "no jobs in the window" in err and "not written" in err
    assert not out.exists()
    # A window before every submission: nothing to write either.
    assert cli.main(["trace", "export", "--from-file", str(TEXT_2205), "--out", str(out),
                     "--end", "2020-01-01"]) == 0
    assert "no jobs in the window any .. 2020-01-01" in capsys.readouterr().err
    assert not out.exists()
    # Jobs, but none finished with GPUs: also nothing to write, said differently.
    assert cli.main(["trace", "export", "--from-file", str(TEXT_2205), "--out", str(out),
                     "--users", "bob"]) == 0
    assert "no finished GPU jobs in the window" in capsys.readouterr().err
    assert not out.exists()
    empty_text = tmp_path / "empty.txt"
    empty_text.write_text("JobIDRaw|JobID|User|Partition|State|Submit|Start|End|Elapsed|AllocTRES|ReqTRES|NodeList\n")
    assert cli.main(["trace", "export", "--from-file", str(empty_text), "--out", str(out)]) == 0
    assert not out.exists()


# --------------------------------------------------------------------------- malformed input
def _bad_json(mutate) -> str:
    doc = json.loads(JSON_2205.read_text())
    mutate(doc)
    return json.dumps(doc)


@pytest.mark.parametrize("text, expected", [
    ("{not json", "not JSON"),
    ('{"meta": {}}', "no 'jobs' list"),
    ('{"jobs": 3}', "'jobs' is int, not a list"),
    (_bad_json(lambda d: d["jobs"][1]["time"].update(start="yesterday")), "jobs[1] (job 1): time.start"),
    (_bad_json(lambda d: d["jobs"][2].update(state=None)), "jobs[2] (job 2): state"),
    (_bad_json(lambda d: d["jobs"][3]["time"].update(elapsed="x")), "job 3: time.elapsed"),
    (_bad_json(lambda d: d["jobs"][3]["time"].update(submission=0)), "job 3: time.submission is missing"),
], ids=["not-json", "no-jobs", "jobs-not-list", "bad-start", "bad-state", "bad-elapsed", "no-submit"])
def test_malformed_json(text, expected):
    with pytest.raises(InputError) as err:
        runs_from_output(text, "sacct.json")
    message = str(err.value)
    assert expected in message and "\n" not in message and message.startswith("sacct.json: ")


HEADER = "JobIDRaw|JobID|User|Partition|State|Submit|Start|End|Elapsed|AllocTRES|ReqTRES|NodeList\n"
GOOD_ROW = "1|1|alice|batch|COMPLETED|2026-11-30T17:41:50|2026-11-30T17:41:50|2026-11-30T17:41:55|00:00:05|gres/gpu=2||gpu1\n"


@pytest.mark.parametrize("text, expected", [
    ("hello world\n", "neither sacct JSON nor `sacct -P` text"),
    ("JobID|User\n1|alice\n", "lacks column(s) State, Submit, Start, End, Elapsed, AllocTRES or ReqTRES"),
    (HEADER + GOOD_ROW.replace("|gpu1", "|gpu1|x|y"), "f.txt:2: row has 14 field(s), the header has 12"),
    (HEADER + GOOD_ROW.replace("2026-11-30T17:41:55", "soon"), "f.txt:2: job 1: End: bad timestamp 'soon'"),
    (HEADER + GOOD_ROW.replace("00:00:05", "5 minutes"), "f.txt:2: job 1: Elapsed: bad duration"),
    (HEADER + GOOD_ROW.replace("gres/gpu=2", "gres/gpu=two"), "f.txt:2: job 1: AllocTRES: bad count"),
    (HEADER + GOOD_ROW.replace("COMPLETED", ""), "f.txt:2: job 1: field 'State' is empty"),
    (HEADER + GOOD_ROW.replace("1|1|alice", "||alice"), "f.txt:2: field 'JobID' is empty"),
], ids=["not-sacct", "missing-columns", "ragged", "bad-time", "bad-elapsed", "bad-tres", "no-state", "no-id"])
def test_malformed_text(text, expected):
    with pytest.raises(InputError) as err:
        runs_from_output(text, "f.txt")
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_cli_malformed_is_one_line_exit_2(tmp_path, capsys):
    src = tmp_path / "bad.json"
    src.write_text('{"jobs": [{"job_id": 1, "state": {"current": 7}}]}')
    assert cli.main(["trace", "export", "--from-file", str(src), "--out", str(tmp_path / "t.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("tiresias trace: error: ") and "state.current" in err
    assert not (tmp_path / "t.csv").exists()


@pytest.mark.parametrize("argv, expected", [
    (["trace", "export", "--out", "x.csv", "--from-file", "/nonexistent/sacct.json"], "cannot read"),
    (["trace", "export", "--out", "x.csv", "--from-file", str(TEXT_2205), "--start", "last tuesday"],
     "-S/--starttime value 'last tuesday' is not a time"),
    (["trace", "export", "--out", "x.csv", "--from-file", str(TEXT_2205), "--start", "2026-12-01",
      "--end", "2026-11-01"], "-E/--endtime value '2026-11-01' is before -S/--starttime value '2026-12-01'"),
    (["trace"], "an action is required"),
])
def test_cli_bad_input(argv, expected, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err


@pytest.mark.parametrize("argv", [
    ["trace", "export"],  # --out missing
    ["trace", "export", "--out", "x.csv", "--users", "alice,,bob"],
    ["trace", "nonsense"],
])
def test_cli_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_time_bounds():
    assert parse_time_bound("now", "t", now_s=1000.0) == 1000.0
    assert parse_time_bound("now-2hours", "t", now_s=10000.0) == 2800.0
    assert parse_time_bound("now-1days", "t", now_s=100000.0) == 13600.0
    assert parse_time_bound("1796060510", "t") == 1796060510.0
    assert parse_time_bound("2026-11-30T17:41:50", "t") == 1796060510.0


def test_trace_export_takes_sacct_spellings_of_user_and_partition(tmp_path, capsys):
    """-u/--user and -r/--partition as sacct spells them select what --users/--partitions do."""
    outputs = {}
    for flags in (["--users", "alice"], ["-u", "alice"], ["--user", "alice"]):
        out = tmp_path / f"{'_'.join(flags)}.csv"
        assert cli.main(["trace", "export", "--from-file", str(TEXT_2205), "--out", str(out), *flags]) == 0
        outputs[tuple(flags)] = out.read_text()
    assert len(set(outputs.values())) == 1 and outputs[("-u", "alice")].count("\n") > 1
    capsys.readouterr()
    assert cli.main(["trace", "export", "--from-file", str(TEXT_2205), "--out", str(tmp_path / "r.csv"),
                     "-r", "no-such-partition"]) == 0
    assert "no jobs in the window" in capsys.readouterr().err


def test_trace_export_checks_its_out_path_before_reading_sacct(tmp_path, capsys, monkeypatch):
    """A bad --out is refused before sacct runs (minutes on a big history), not after."""
    import controller.cli.trace as trace_cmd

    def sacct_must_not_run(*args, **kwargs):
        raise AssertionError("sacct ran before --out was checked")

    monkeypatch.setattr(trace_cmd, "run_sacct", sacct_must_not_run)
    assert cli.main(["trace", "export", "--out", str(tmp_path / "no" / "such" / "dir" / "t.csv")]) == 2
    assert cli.main(["trace", "export", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("tiresias trace: error: --out '") for line in err)

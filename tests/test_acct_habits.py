"""Issue 29 item 4 (acct): sacct's habits in `tiresias acct` and `tiresias trace export`.

sacct's date forms for -S/-E (one parser, controller.cli.argtypes.sacct_time), -p next
to -P, the Elapsed, JobName and NodeList columns, dates instead of seconds for a replay
of an exported trace, and the history's final states (TIMEOUT, NODE_FAIL) kept.
"""
from __future__ import annotations

import time

import pytest

from controller.cli import argtypes, reports
from controller.cli import main as cli
from controller.core.model import InputError
from slurm_plugin.accounting import merge_runs, runs_from_output
from tests.conftest import ROOT

HISTORY = ROOT / "tests" / "fixtures" / "replay" / "sacct_history.txt"

pytestmark = pytest.mark.usefixtures("utc")


def _at(text: str) -> float:
    return time.mktime(time.strptime(text, "%Y-%m-%d %H:%M:%S"))


NOW = _at("2026-12-05 19:00:00")


@pytest.mark.parametrize("text, expected", [
    ("2025-11-04", "2025-11-04 00:00:00"),
    ("2025-11-04T10:30", "2025-11-04 10:30:00"),
    ("2025-11-04T10:30:15", "2025-11-04 10:30:15"),
    ("1104", "2026-11-04 00:00:00"),
    ("110425", "2025-11-04 00:00:00"),
    ("1104-08:00", "2026-11-04 08:00:00"),
    ("11/04/25-10:00", "2025-11-04 10:00:00"),
    ("11.04", "2026-11-04 00:00:00"),
    ("10:15", "2026-12-05 10:15:00"),
    ("now", "2026-12-05 19:00:00"),
    ("now-7days", "2026-11-28 19:00:00"),
    ("now-1hour", "2026-12-05 18:00:00"),
    ("now-90", "2026-12-05 18:58:30"),
    ("now+2weeks", "2026-12-19 19:00:00"),
    ("today", "2026-12-05 00:00:00"),
    ("midnight", "2026-12-05 00:00:00"),
    ("noon", "2026-12-05 12:00:00"),
    ("teatime", "2026-12-05 16:00:00"),
    ("tomorrow", "2026-12-06 00:00:00"),
    ("1793606400", "2026-11-02 08:00:00"),
])
def test_sacct_date_forms(text, expected):
    assert argtypes.sacct_time(text, "-S/--starttime", now_s=NOW) == _at(expected)


@pytest.mark.parametrize("text", ["2025-02-30", "now-7fortnights", "yesterday", "13/01", "25:00", "10am",
                                  "2025-11-04 10:00", "tuesday", ""])
def test_an_unsupported_form_names_the_option_and_value(text):
    with pytest.raises(InputError) as err:
        argtypes.sacct_time(text, "-E/--endtime", now_s=NOW)
    message = str(err.value)
    assert message.startswith(f"-E/--endtime value '{text}' is not a time") and "\n" not in message


def test_trace_export_takes_sacct_forms_and_refuses_others(tmp_path, capsys):
    by_iso, by_mmddyy = tmp_path / "a.csv", tmp_path / "b.csv"
    assert cli.main(["trace", "export", "--from-file", str(HISTORY), "--out", str(by_iso),
                     "-S", "2026-11-02T10:00", "-E", "2026-11-02T11:00"]) == 0
    assert cli.main(["trace", "export", "--from-file", str(HISTORY), "--out", str(by_mmddyy),
                     "--starttime", "110226-10:00", "--endtime", "11/02/26-11:00"]) == 0
    capsys.readouterr()
    assert by_iso.read_text() == by_mmddyy.read_text()
    assert 0 < len(by_iso.read_text().splitlines()) - 1 < 38  # the window cut the history
    assert cli.main(["trace", "export", "--from-file", str(HISTORY), "--out", str(by_iso), "-S", "10am"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "-S/--starttime value '10am' is not a time" in err


@pytest.fixture
def replay(tmp_path, capsys):
    """An exported history replayed under dgittins: (trace, simulate --out directory)."""
    trace, out = tmp_path / "mysite.csv", tmp_path / "whatif"
    assert cli.main(["trace", "export", "--from-file", str(HISTORY), "--out", str(trace)]) == 0
    assert cli.main(["simulate", "--trace", str(trace), "--node-kinds", "2:batch:a100,1:batch+debug:v100",
                     "--gpus-per-node", "4", "--policy", "dgittins", "--out", str(out)]) == 0
    capsys.readouterr()
    return trace, out


def test_acct_of_a_replayed_history_prints_dates_names_and_its_states(replay, capsys):
    trace, out = replay
    assert cli.main(["acct", "--from", str(out), "--trace", str(trace), "-S", "2026-11-02", "-P",
                     "-o", "JobID,JobName,Submit,State,Elapsed", "-s", "TO,NF,CD"]) == 0
    lines = {line.split("|")[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert lines["1012"] == "1012|train-resnet|2026-11-02T09:15:00|TIMEOUT|00:05:00"
    assert lines["1018"].startswith("1018|eval|2026-11-02T09:32:00|NODE_FAIL|")
    assert lines["1014"].startswith("1014|sweep|lr=0.1|2026-11-02T09:26:00|COMPLETED|")  # sacct -P does not escape
    assert {line.split("|")[-2] for line in lines.values()} == {"COMPLETED", "TIMEOUT", "NODE_FAIL"}
    # without --trace the replay counts seconds from its start, and says how to get dates
    assert cli.main(["acct", "--from", str(out), "-S", "2025-11-04"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "-S/--starttime value '2025-11-04'" in err and "--trace FILE" in err


def test_acct_with_a_trace_of_other_jobs_is_an_error(replay, tmp_path, capsys):
    _, out = replay
    other = tmp_path / "other.csv"
    other.write_text("job_id,num_gpus,submit_time_s,duration_s\nx,1,0,10\n")
    assert cli.main(["acct", "--from", str(out), "--trace", str(other)]) == 2
    assert "has no job '1001' of the simulation" in capsys.readouterr().err


def test_parsable_with_and_without_the_trailing_delimiter(replay, capsys):
    trace, out = replay
    argv = ["acct", "--from", str(out), "--trace", str(trace), "-j", "1012", "-o", "JobID,State"]
    assert cli.main([*argv, "-p"]) == 0
    assert capsys.readouterr().out.splitlines() == ["JobID|State|", "1012|TIMEOUT|"]
    assert cli.main([*argv, "--parsable2"]) == 0
    assert capsys.readouterr().out.splitlines() == ["JobID|State", "1012|TIMEOUT"]


def test_elapsed_jobname_nodelist_of_slurm_accounting():
    # what a user who is not an admin sees: their jobs from sacct (rows_from_sacct)
    rows = {row.job_id: row for row in reports.rows_from_sacct(merge_runs(runs_from_output(HISTORY.read_text(),
                                                                                            "h")))}
    columns = reports.parse_format("JobID,JobName,NodeList,Elapsed,Start,State")
    text = reports.format_parsable(columns, [rows["1008"], rows["1032"], rows["1018"]], simulated=False)
    assert text.splitlines() == [
        "JobID|JobName|NodeList|Elapsed|Start|State",
        "1008|train-bert|gpu[1-2]|00:30:00|2026-11-02T11:02:00|COMPLETED",
        "1032|train-resnet|gpu1|01:00:00|2026-11-02T11:32:00|COMPLETED",  # two runs: 20 + 40 minutes
        "1018|eval|gpu2|00:05:00|2026-11-02T09:49:00|NODE_FAIL",
    ]

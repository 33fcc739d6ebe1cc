"""acct, show-config and report at their own boundary: a real SQLite store, a real
simulator output directory, the CLI's exit codes and exact output."""
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from controller.cli import acct as cmd_acct

from controller.cli import reports
from controller.cli.main import main
from controller.service.ops.config import SCHEMA, load
from controller.core.model import InputError
from controller.service.state.store import JobRecord, Store

ROOT = Path(__file__).resolve().parents[1]
T0 = 1714557600.0  # 2024-05-01T10:00:00Z


pytestmark = pytest.mark.usefixtures("utc")  # expected outputs are in UTC (conftest.utc)


@pytest.fixture
def db(tmp_path):
    url = f"sqlite:///{tmp_path}/t.db"
    with Store(url) as s:
        s.save_jobs("default", [
            JobRecord("101", 4, T0, user="alice", partition="batch", first_start_s=T0 + 30, attained_gpu_s=14400,
                      executed_s=3600, level=1, skew=0.7, preemptions=1, state="DONE", finished_s=T0 + 5000,
                      end_state="COMPLETED"),
            JobRecord("102", 2, T0 + 60, user="bob", partition="batch", first_start_s=T0 + 90, attained_gpu_s=1200,
                      executed_s=600, state="RUNNING", last_running=True, last_observed_s=T0 + 690),
            JobRecord("103", 8, T0 + 120, user="alice", partition="urgent", state="PENDING", last_observed_s=T0 + 690),
        ])
    return url


@pytest.fixture(scope="module")
def simdir(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim")
    assert main(["simulate", "--jobs", "40", "--policy", "fifo,dlas", "--out", str(out), "--no-progress"]) == 0
    return out


def acct(capsys, *argv):
    code = main(["acct", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_parsable_output_is_exact(db, capsys):
    code, out, _ = acct(capsys, "--database-url", db, "-P", "-o", "JobID,User,GPUs,Submit,End,JCT,QueueWait,"
                        "AttainedGPUSeconds,Level,Preemptions,Skew,Placement,State")
    assert code == 0
    assert out == (
        "JobID|User|GPUs|Submit|End|JCT|QueueWait|AttainedGPUSeconds|Level|Preemptions|Skew|Placement|State\n"
        "101|alice|4|2024-05-01T10:00:00|2024-05-01T11:23:20|01:23:20|00:23:20|14400|2|1|0.70|consolidate|COMPLETED\n"
        "102|bob|2|2024-05-01T10:01:00|Unknown|Unknown|00:00:30|1200|1|0|0.00|spread|RUNNING\n"
        "103|alice|8|2024-05-01T10:02:00|Unknown|Unknown|00:09:30|0|1|0|0.00|spread|PENDING\n")


def test_fixed_width_header_widths_and_truncation(db, capsys):
    code, out, _ = acct(capsys, "--database-url", db, "-o", "JobID%5,User%-6,State%4", "-j", "101")
    assert code == 0
    assert out.splitlines() == ["JobID User   Sta+", "----- ------ ----", "  101 alice  COM+"]


def test_filters_state_user_partition_window(db, capsys):
    def ids(*argv):
        code, out, _ = acct(capsys, "--database-url", db, "-n", "-P", "-o", "JobID", *argv)
        assert code == 0
        return out.split()
    assert ids("-s", "R,PD") == ["102", "103"]
    assert ids("-s", "done") == ["101"]
    assert ids("-u", "alice") == ["101", "103"]
    assert ids("-r", "urgent") == ["103"]
    assert ids("-S", "2024-05-01T11:30") == ["102", "103"]  # 101 ended 11:23:20
    assert ids("-E", str(T0 + 90)) == ["101", "102"]
    assert ids("--delimiter", ";", "-o", "JobID,GPUs", "-j", "102") == ["102;2"]


def test_json_has_raw_numbers(db, capsys):
    code, out, _ = acct(capsys, "--database-url", db, "--json", "-o", "JobID,JCT,State", "-j", "101")
    assert code == 0
    doc = json.loads(out)
    assert doc["jobs"] == [{"JobID": "101", "JCT": 5000.0, "State": "COMPLETED"}]
    assert doc["source"] == "store"


@pytest.mark.parametrize("argv, needle", [
    (["-o", "JobID,Bogus"], "unknown field 'Bogus'"),
    (["-o", "JobID,GPUs%x"], "field 'GPUs' has a bad width 'x'"),
    (["-o", "JobID,,State"], "empty field name"),
    (["-S", "yesterday"], "-S/--starttime value 'yesterday'"),
    (["-S", "2024-05-02", "-E", "2024-05-01"], "is before"),
    (["--policy", "dlas"], "--policy needs --from"),
])
def test_bad_input_is_one_line_exit_2(db, capsys, argv, needle):
    code, out, err = acct(capsys, "--database-url", db, *argv)
    assert code == 2 and out == ""
    assert needle in err and len(err.strip().splitlines()) == 1


def test_bad_flag_is_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["acct", "--no-such-flag"])
    assert exit_info.value.code == 2
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err


def test_empty_and_missing_store(tmp_path, capsys):
    code, out, _ = acct(capsys, "--database-url", f"sqlite:///{tmp_path}/none.db")
    assert code == 0 and out == f"no jobs recorded in sqlite:///{tmp_path}/none.db (the database does not exist yet)\n"
    assert not (tmp_path / "none.db").exists()  # a read-only command creates nothing
    Store(f"sqlite:///{tmp_path}/empty.db").close()
    code, out, _ = acct(capsys, "--database-url", f"sqlite:///{tmp_path}/empty.db")
    assert code == 0 and out == f"no jobs recorded in {tmp_path}/empty.db (cluster default)\n"


SACCT_STAND_IN = """#!/bin/sh
# The sacct a non-admin's `tiresias acct` asks: records its arguments, answers as
# Slurm would for the calling user (-P text; no --json, as without slurmdbd's JSON).
echo "$*" >> "$(dirname "$0")/asked"
case "$*" in *--json*) echo "sacct: --json not available" >&2; exit 1;; esac
echo "JobIDRaw|JobID|User|Partition|State|Submit|Start|End|Elapsed|AllocTRES|ReqTRES|NodeList"
echo "501|501|alice|batch|COMPLETED|2024-05-01T10:00:00|2024-05-01T10:00:30|2024-05-01T10:10:30|00:10:00|\
cpu=1,gres/gpu=2,node=1|cpu=1,gres/gpu=2|gpu1"
"""


def test_non_admin_reads_slurm_not_the_store(db, tmp_path, capsys, monkeypatch):
    """A user who is not an admin gets her jobs from sacct run as herself (Slurm
    decides what she may see), never from the store filtered in her own process."""
    import pwd
    alice = pwd.getpwnam("alice").pw_uid if _has_user("alice") else pytest.skip("no user alice")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sacct").write_text(SACCT_STAND_IN)
    (bin_dir / "sacct").chmod(0o755)
    # squeue --me (her jobs slurmctld still holds) answers as for a user with none: the
    # test's own process is root, whose jobs on the test cluster are not alice's
    (bin_dir / "squeue").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(cmd_acct, "_getuid", lambda: alice)
    code, out, err = acct(capsys, "--database-url", db, "-n", "-P", "-o", "JobID,User,GPUs,State", "-u", "alice,bob")
    assert code == 0 and out.split() == ["501|alice|2|COMPLETED"], out  # Slurm's answer, not the store's 101, 103
    assert "showing alice's only" in err
    asked = (bin_dir / "asked").read_text().splitlines()
    assert asked and all("-u alice" in line and "-a" not in line.split() for line in asked), asked
    monkeypatch.setattr(cmd_acct, "_getuid", lambda: 0)  # an admin reads the store
    code, out, _ = acct(capsys, "--database-url", db, "-n", "-P", "-o", "JobID")
    assert out.split() == ["101", "102", "103"]


def _has_user(name):
    import pwd
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def test_admin_rule():
    assert reports.is_admin(0)
    if _has_user("alice"):
        import pwd
        assert not reports.is_admin(pwd.getpwnam("alice").pw_uid)


def test_acct_from_simulation(simdir, capsys):
    code, out, err = acct(capsys, "--from", str(simdir))
    assert code == 2 and "choose one with --policy" in err
    code, out, _ = acct(capsys, "--from", str(simdir), "--policy", "dlas", "-P", "-o",
                        "JobID,Submit,Start,End,JCT,Level,State", "-j", "1")
    assert code == 0
    header, row = out.splitlines()
    job_id, submit, start, end, jct, level, state = row.split("|")
    assert (job_id, submit, level, state) == ("1", "00:00:00", "", "COMPLETED")
    assert reports.parse_time(end, "-E", True) - reports.parse_time(submit, "-S", True) == pytest.approx(
        reports.parse_time(jct, "x", True), abs=1)
    code, out, err = acct(capsys, "--from", str(simdir), "--policy", "srtf")
    assert code == 2 and "no jobs_srtf.csv" in err


def test_elapsed_and_time_parsing():
    assert reports.format_elapsed(59) == "00:00:59"
    assert reports.format_elapsed(90061) == "1-01:01:01"
    assert reports.format_elapsed(None) == "Unknown"
    assert reports.parse_time("1-01:01:01", "-S", True) == 90061
    assert reports.parse_time("2024-05-01T10:00:00", "-S", False) == T0
    with pytest.raises(InputError, match="-S"):
        reports.parse_time("1-xx", "-S", True)


def test_occupancy_series_is_exact_without_preemption():
    rows = [reports.JobRow("1", "u", "p", 2, 0.0, 10.0, 30.0, 20.0, 40.0, "COMPLETED"),
            reports.JobRow("2", "u", "p", 4, 5.0, 30.0, 40.0, 10.0, 40.0, "COMPLETED")]
    times, pending, busy = reports.occupancy_series(rows, 100.0)
    assert times == [0.0, 5.0, 10.0, 30.0, 40.0]
    assert pending == [1, 2, 1, 0, 0]
    assert busy == [0, 0, 2, 4, 0]
    # a preempted job: its GPU-seconds are preserved by the even spread
    rows = [reports.JobRow("3", "u", "p", 2, 0.0, 0.0, 100.0, 50.0, 100.0, "COMPLETED", preemptions=1)]
    times, pending, busy = reports.occupancy_series(rows, 100.0)
    area = sum((b - a) * v for a, b, v in zip(times, times[1:], busy))
    assert area == pytest.approx(100.0)


# -- show-config ------------------------------------------------------------------


def test_show_config_table_and_yaml_roundtrip(tmp_path, capsys):
    config_file = tmp_path / "c.yaml"
    config_file.write_text("mode: enforce\npromote_knob: 8\n")
    assert main(["show-config", "--config", str(config_file)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"# effective settings: {config_file} over the defaults"
    line = next(l for l in out.splitlines() if l.startswith("mode "))
    assert line.split()[:3] == ["mode", "enforce", "file"]
    assert next(l for l in out.splitlines() if l.startswith("interval_s ")).split()[:3] == ["interval_s", "10.0",
                                                                                           "default"]
    assert main(["show-config", "--config", str(config_file), "--yaml"]) == 0
    pasted = tmp_path / "pasted.yaml"
    pasted.write_text(capsys.readouterr().out)
    assert load(str(pasted)) == load(str(config_file))


def test_show_config_default_yaml_loads_to_defaults(tmp_path, capsys, monkeypatch):
    from controller.cli import show_config as cmd_show_config
    from controller.service.ops import config as config_module
    monkeypatch.setattr(cmd_show_config, "DEFAULT_PATH", str(tmp_path / "absent.yaml"))
    monkeypatch.setattr(config_module, "DEFAULT_PATH", str(tmp_path / "absent.yaml"))
    assert main(["show-config", "--yaml"]) == 0
    text = capsys.readouterr().out
    assert "built-in defaults" in text
    assert set(yaml.safe_load(text)) == {s.name for s in SCHEMA}


@pytest.mark.parametrize("content, needle", [
    ("bogus: 1\n", "unknown key 'bogus'"), ("interval_s: -3\n", "key 'interval_s' value '-3'"),
    ("mode: yolo\n", "key 'mode' value 'yolo'"), ("mode: [\n", "not valid YAML")])
def test_show_config_bad_file(tmp_path, capsys, content, needle):
    bad = tmp_path / "bad.yaml"
    bad.write_text(content)
    assert main(["show-config", "--config", str(bad)]) == 2
    captured = capsys.readouterr()
    assert needle in captured.err and len(captured.err.strip().splitlines()) == 1 and captured.out == ""


def test_packaged_example_config_lists_every_key():
    path = ROOT / "packaging" / "tiresias.yaml"
    assert set(yaml.safe_load(path.read_text())) == {s.name for s in SCHEMA}
    assert load(str(path)) == load(str(path), {})  # loads cleanly
    assert load(str(path)).mode == "shadow"


def test_packaged_unit_and_sysusers():
    unit = (ROOT / "packaging" / "tiresias.service").read_text()
    assert "ExecStart=/opt/tiresias/bin/tiresias run --config /etc/tiresias/tiresias.yaml" in unit
    assert "User=tiresias" in unit and "AdminLevel=Operator" in unit
    sysusers = (ROOT / "packaging" / "tiresias.sysusers").read_text()
    assert any(line.split()[:2] == ["u", "tiresias"] for line in sysusers.splitlines() if line.strip())
    import shutil
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze not installed")
    proc = subprocess.run(["systemd-analyze", "verify", str(ROOT / "packaging" / "tiresias.service")],
                          capture_output=True, text=True, timeout=60)
    # The binary is installed by pip on the target host; anything else is a unit error.
    problems = [l for l in proc.stderr.splitlines() if l.strip() and "is not executable" not in l]
    assert problems == []


# -- report -----------------------------------------------------------------------


def test_report_from_simulation(simdir, tmp_path, capsys):
    out = tmp_path / "figs"
    assert main(["report", "--from", str(simdir), "--out", str(out)]) == 0
    for name in ("jct_cdf.png", "queue_length.png", "gpu_utilization.png"):
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10000
    assert "wrote" in capsys.readouterr().out


def test_report_from_store_and_empty(db, tmp_path, capsys):
    out = tmp_path / "figs"
    assert main(["report", "--database-url", db, "--out", str(out), "--capacity-gpus", "16"]) == 0
    assert (out / "gpu_utilization.png").exists()
    captured = capsys.readouterr()
    assert "2 job(s) not finished" in captured.err
    assert main(["report", "--database-url", f"sqlite:///{tmp_path}/none.db", "--out", str(tmp_path / "x")]) == 0
    assert "nothing to plot" in capsys.readouterr().out
    assert not (tmp_path / "x").exists()


def test_report_bad_flags(capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        main(["report"])  # --out is required
    assert exit_info.value.code == 2
    assert main(["report", "--out", str(tmp_path), "--from", str(tmp_path / "nope")]) == 2
    assert "not a directory" in capsys.readouterr().err

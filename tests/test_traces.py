"""Trace readers: every shipped trace, formats, errors, round trip."""
from __future__ import annotations

from pathlib import Path

import pytest

from controller.core.model import InputError, JobSpec
from controller.replay.traces import (
    load_actuals,
    load_service_samples,
    load_trace,
    write_trace,
)

from tests.conftest import FIXTURE_TRACES, TRACE60

# The excerpts in tests/fixtures/traces (run on every clone): one per format.
FIXTURE_COUNTS = {
    "itp_cluster10.csv": 260, "itp_cluster10_tiresias.csv": 260, "philly_pollux_head200.csv": 200,
    "muri_trace3_head200.csv": 200, "muri_trace3_sec_head200.csv": 200, "tiresias_60_job.csv": 60,
}


def test_fixture_dir_holds_every_listed_excerpt():
    assert {p.name for p in FIXTURE_TRACES.glob("*.csv")} == set(FIXTURE_COUNTS) | {"yarn_gpu_time_head300.csv"}


@pytest.mark.parametrize("name", sorted(FIXTURE_COUNTS))
def test_every_fixture_trace_loads(name):
    jobs = load_trace(FIXTURE_TRACES / name)
    assert len(jobs) == FIXTURE_COUNTS[name]
    assert jobs[0].submit_time_s == 0.0
    times = [j.submit_time_s for j in jobs]
    assert times == sorted(times)
    assert len({j.job_id for j in jobs}) == len(jobs)
    assert all(j.num_gpus >= 1 and j.duration_s >= 0 and 0.0 <= j.skew <= 1.0 and j.partition for j in jobs)


def test_itp_excerpt_matches_its_tiresias_conversion():
    jobs = load_trace(FIXTURE_TRACES / "itp_cluster10.csv")
    conv = load_trace(FIXTURE_TRACES / "itp_cluster10_tiresias.csv")
    assert [(j.submit_time_s, j.num_gpus) for j in jobs] == [(j.submit_time_s, j.num_gpus) for j in conv]
    assert sorted(j.duration_s for j in jobs) == sorted(j.duration_s for j in conv)
    assert max(j.num_gpus for j in jobs) == 16


def test_muri_excerpt_milliseconds_match_seconds():
    raw = load_trace(FIXTURE_TRACES / "muri_trace3_head200.csv")
    by_id = {j.job_id: j for j in load_trace(FIXTURE_TRACES / "muri_trace3_sec_head200.csv")}
    assert len(raw) == len(by_id) == 200
    for j in raw:
        s = by_id[j.job_id]
        assert j.duration_s == pytest.approx(s.duration_s, abs=1e-6)
        assert j.submit_time_s == pytest.approx(s.submit_time_s, abs=1e-6)
        assert j.user_priority in (1, 2)


def test_philly_excerpt_ids_are_row_numbers():
    jobs = load_trace(FIXTURE_TRACES / "philly_pollux_head200.csv")
    assert {j.job_id for j in jobs} == {str(i) for i in range(1, 201)}
    assert len({j.partition for j in jobs}) == 5


def test_service_samples_excerpt():
    s = load_service_samples(FIXTURE_TRACES / "yarn_gpu_time_head300.csv")
    assert len(s) == 300 and min(s) > 0
    with pytest.raises(InputError, match="unknown trace header 'duration'"):
        load_trace(FIXTURE_TRACES / "yarn_gpu_time_head300.csv")


@pytest.mark.parametrize("name", ["itp_cluster10.csv", "muri_trace3_head200.csv", "tiresias_60_job.csv",
                                  "philly_pollux_head200.csv"])
def test_fast_path_equals_row_path_on_excerpts(name):
    _fast_equals_slow(FIXTURE_TRACES / name)


def test_tiresias_60_skew_from_model():
    jobs = load_trace(TRACE60)
    by_id = {j.job_id: j for j in jobs}
    assert by_id["0"].model_name == "vgg19" and by_id["0"].skew == pytest.approx(0.73)
    assert by_id["2"].model_name == "inception4" and by_id["2"].skew == pytest.approx(0.036)


# --------------------------------------------------------------------------- small files
def _write(tmp_path: Path, text: str, name: str = "t.csv") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_unsorted_input_sorted_stably_and_rebased(tmp_path):
    p = _write(tmp_path, "job_id,submission_time,duration,num_gpu\n"
                         "a,500,10,1\nb,200,20,2\nc,500,30,4\nd,300,0,1\n")
    jobs = load_trace(p)
    assert [j.job_id for j in jobs] == ["b", "d", "a", "c"]  # ties keep row order
    assert [j.submit_time_s for j in jobs] == [0.0, 100.0, 300.0, 300.0]
    assert jobs[1].duration_s == 0.0  # zero duration is legal


def test_time_scale(tmp_path):
    p = _write(tmp_path, "job_id,submission_time,duration,num_gpu\na,100,10,1\nb,300,20,2\n")
    jobs = load_trace(p, time_scale=0.5)
    assert [(j.submit_time_s, j.duration_s) for j in jobs] == [(0.0, 5.0), (100.0, 10.0)]
    with pytest.raises(InputError, match="time_scale"):
        load_trace(p, time_scale=0)


def test_philly_format_small(tmp_path):
    p = _write(tmp_path, "timestamp,duration,num_gpus,gpu_time,cluster\n"
                         "2017-10-09 07:01:55,66.0,1,66.0,c1\n"
                         "2017-10-09 06:01:55,10.0,8,80.0,c2\n"
                         "\n")
    jobs = load_trace(p)
    assert [(j.job_id, j.submit_time_s, j.partition, j.num_gpus) for j in jobs] == [
        ("2", 0.0, "c2", 8), ("1", 3600.0, "c1", 1)]


def test_muri_raw_small(tmp_path):
    p = _write(tmp_path, "job_id,num_gpu,submit_time,iterations,model_name,batch_size,duration,interval,"
                         "iteration_time,resource_time_0,resource_time_1,resource_time_2,priority\n"
                         "0,1,1000,5,vgg16,128,2500,0,490,446,8,0,1\n"
                         "1,8,4000,5,resnet50,128,1000,0,490,446,8,0,0\n")
    a, b = load_trace(p)
    assert (a.submit_time_s, a.duration_s, a.user_priority, a.skew) == (0.0, 2.5, 2, pytest.approx(0.72))
    assert (b.submit_time_s, b.duration_s, b.user_priority) == (3.0, 1.0, 1)


def test_round_trip(tmp_path):
    jobs = [
        JobSpec("j1", 4, 0.0, 3600.0, 0.72, 3, "gpu-a", "alice", "vgg16"),
        JobSpec("j,2", 1, 12.5, None, 0.1, 1, "default", "", "resnet50"),
        JobSpec("j3", 8, 12.5, 0.1 + 0.2, 0.0, 2, "gpu-b", "bob \"b\"", ""),
    ]
    p = tmp_path / "out.csv"
    write_trace(p, jobs)
    assert load_trace(p) == jobs
    text = p.read_text()
    assert text.splitlines()[0] == "job_id,num_gpus,submit_time_s,duration_s,skew,user_priority,partition,user,model_name"
    assert text.splitlines()[1] == "j1,4,0,3600,0.72,3,gpu-a,alice,vgg16"
    write_trace(tmp_path / "again.csv", load_trace(p))
    assert (tmp_path / "again.csv").read_text() == text  # deterministic
    assert load_actuals(p) == {}


def test_round_trip_real_trace(tmp_path):
    jobs = load_trace(TRACE60)
    write_trace(tmp_path / "x.csv", jobs)
    assert load_trace(tmp_path / "x.csv") == jobs


def test_actuals(tmp_path):
    jobs = [JobSpec("a", 2, 0.0, 100.0), JobSpec("b", 1, 50.0, 10.0)]
    acts = {"a": {"actual_start_s": 5.0, "actual_end_s": 110.0, "requeues": 1, "state": "COMPLETED"},
            "b": {"actual_start_s": None, "actual_end_s": None, "requeues": 0, "state": "PENDING"}}
    p = tmp_path / "acct.csv"
    write_trace(p, jobs, actuals=acts)
    assert load_trace(p) == jobs
    assert load_actuals(p) == acts
    # Shifted like the submit times.
    p2 = _write(tmp_path, "job_id,num_gpus,submit_time_s,duration_s,actual_start_s,actual_end_s,requeues,state\n"
                          "x,1,1000,5,1010,1015,,COMPLETED\n", "acct2.csv")
    assert load_actuals(p2) == {"x": {"actual_start_s": 10.0, "actual_end_s": 15.0,
                                      "requeues": 0, "state": "COMPLETED"}}


def test_project_format_defaults(tmp_path):
    p = _write(tmp_path, "job_id,num_gpus,submit_time_s,duration_s,model_name,extra\n"
                         "x,2,7,5,vgg19,whatever\n")
    (j,) = load_trace(p)
    assert j == JobSpec("x", 2, 0.0, 5.0, pytest.approx(0.73), 1, "default", "", "vgg19")


ITP_HEADER = "job_id,submission_time,duration,num_gpu\n"


@pytest.mark.parametrize("row,field,value", [
    ("a,10,5,abc", "num_gpu", "abc"),
    ("a,10,5,0", "num_gpu", "0"),
    ("a,10,5,-2", "num_gpu", "-2"),
    ("a,10,5,1.5", "num_gpu", "1.5"),
    ("a,10,-5,1", "duration", "-5"),
    ("a,10,nan,1", "duration", "nan"),
    ("a,-1,5,1", "submission_time", "-1"),
    ("a,1e,5,1", "submission_time", "1e"),
    ("a,10,,1", "duration", ""),
    (",10,5,1", "job_id", ""),
])
def test_bad_field_names_file_line_field_value(tmp_path, row, field, value):
    p = _write(tmp_path, ITP_HEADER + "ok1,0,5,1\n" + row + "\nok2,3,5,1\n")
    with pytest.raises(InputError) as ei:
        load_trace(p)
    msg = str(ei.value)
    assert msg.startswith(f"{p}:3: field '{field}' value '{value}' ")
    assert "\n" not in msg


def test_bad_field_line_number_counts_blank_lines(tmp_path):
    p = _write(tmp_path, ITP_HEADER + "\nok1,0,5,1\n\nbad,1,5,x\n")
    with pytest.raises(InputError, match=r":5: field 'num_gpu' value 'x' is not a positive integer"):
        load_trace(p)


def test_bad_philly_timestamp(tmp_path):
    p = _write(tmp_path, "timestamp,duration,num_gpus,gpu_time,cluster\n"
                         "2017-10-09 07:01:55,66.0,1,66.0,c1\n2017-13-09 07:01:55,1,1,1,c1\n")
    with pytest.raises(InputError, match=r":3: field 'timestamp' value '2017-13-09 07:01:55' is not a datetime"):
        load_trace(p)


def test_short_row(tmp_path):
    p = _write(tmp_path, ITP_HEADER + "a,1,5\n")
    with pytest.raises(InputError, match=r":2: row has 3 fields, the header has 4"):
        load_trace(p)


def test_duplicate_id(tmp_path):
    p = _write(tmp_path, ITP_HEADER + "a,1,5,1\nb,2,5,1\na,3,5,1\n")
    with pytest.raises(InputError, match=r":4: field 'job_id' value 'a' is a duplicate \(first on line 2\)"):
        load_trace(p)


def test_unknown_header_lists_formats(tmp_path):
    p = _write(tmp_path, "foo,bar,baz\n1,2,3\n")
    with pytest.raises(InputError) as ei:
        load_trace(p)
    msg = str(ei.value)
    assert msg.startswith(f"{p}:1: unknown trace header 'foo,bar,baz'")
    for name in ("project", "tiresias", "itp", "philly-pollux", "muri-raw"):
        assert name in msg
    assert "\n" not in msg


def test_missing_column_named(tmp_path):
    p = _write(tmp_path, "job_id,submission_time,num_gpu\na,1,1\n")
    with pytest.raises(InputError, match=r":1: header .* looks like the itp format but lacks column\(s\) 'duration'"):
        load_trace(p)


def test_empty_file_and_header_only(tmp_path):
    with pytest.raises(InputError, match="empty file"):
        load_trace(_write(tmp_path, "", "e.csv"))
    assert load_trace(_write(tmp_path, ITP_HEADER, "h.csv")) == []


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="cannot read trace"):
        load_trace(tmp_path / "nope.csv")


def test_header_case_and_bom(tmp_path):
    p = tmp_path / "bom.csv"
    p.write_text("\ufeffJob_ID, Submission_Time ,Duration,NUM_GPU\na,1,5,1\n", encoding="utf-8")
    (j,) = load_trace(p)
    assert j.job_id == "a" and j.num_gpus == 1


def _fast_equals_slow(path):
    from controller.replay import trace_rows as T

    table = T.Table(path)
    fast = T.bulk_parse(table)
    assert fast is not None
    orig = T.bulk_parse
    try:
        T.bulk_parse = lambda _t: None
        slow = T.parse_rows(table)
    finally:
        T.bulk_parse = orig
    assert fast == slow


from hypothesis import given, settings, strategies as st  # noqa: E402

text_field = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp")), max_size=8)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(
    st.integers(1, 512),
    st.floats(0, 1e7, allow_nan=False),
    st.one_of(st.none(), st.floats(0, 1e7, allow_nan=False)),
    st.floats(0, 1, allow_nan=False),
    st.integers(0, 5), text_field, text_field, text_field,
), min_size=1, max_size=20))
def test_round_trip_property(rows):
    import tempfile

    jobs = [JobSpec(f"j{i}", g, t, d, sk, pr, pa or "default", u, m)
            for i, (g, t, d, sk, pr, pa, u, m) in enumerate(rows)]
    base = min(j.submit_time_s for j in jobs)
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "x.csv"
        write_trace(p, jobs)
        back = load_trace(p)
    expect = sorted(jobs, key=lambda j: j.submit_time_s)  # stable: ties keep order
    assert [j.job_id for j in back] == [j.job_id for j in expect]
    for a, b in zip(back, expect):
        assert a.submit_time_s == b.submit_time_s - base
        assert (a.num_gpus, a.duration_s, a.skew, a.user_priority, a.partition, a.user, a.model_name) == \
            (b.num_gpus, b.duration_s, b.skew, b.user_priority, b.partition, b.user, b.model_name)


def test_no_other_test_reads_the_full_traces():
    """A fresh clone has no public trace directory beside it: every test uses tests/fixtures/traces
    (conftest.FIXTURE_TRACES, TRACE60); the full traces are checked by a benchmark
    in bench/."""
    import re

    here = Path(__file__).resolve().parent
    offenders = []
    for path in sorted(here.glob("test_*.py")):
        text = path.read_text()
        if path.name == "test_traces.py":  # this guard itself names what it looks for
            text = text.split("def test_no_other_test_reads_the_full_traces", 1)[0]
        if re.search(r"(?<![A-Z_])TRACES\b", text) or re.search(r"[\"']shared[\"']\s*/\s*[\"']traces", text) \
                or "shared" + "/traces" in text:
            offenders.append(path.name)
    assert offenders == []

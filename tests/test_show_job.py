"""26.05's --exclusive from `scontrol show job -o ID` (issue 35, item 6).

26.05's squeue JSON no longer says a job's --exclusive mode, so the Slurm adapter asks
`scontrol show job -o ID` for each pending job it does not know yet. Before: one
`scontrol show job -o` without an id, every job of every state, each time a pending job's
mode was unknown; the answer was keyed by numeric JobId, so a pending array task with a
record of its own ("12_3") never matched: the dump ran every full observation, the task
stayed unknown (never a reason to preempt), and a time-out of that call failed the whole
observation. Here a scripted slurmctld (recorded 26.05 records, the real backend and
parser) counts the calls and their arguments."""
import json
import subprocess

from slurm_plugin import exclusive_modes
from slurm_plugin.backend import SlurmBackend
from slurm_plugin.commands import CommandResult
from tests.test_resources_model import FIXTURES, number, pending_record, recorded


def show_line(job_id, mode="NO", array=None):
    """One `scontrol show job -o` line as 26.05 prints it (its keys in their order)."""
    head = f"JobId={job_id} JobName=wrap"
    if array:
        head += f" ArrayJobId={array[0]} ArrayTaskId={array[1]}"
    return (f"{head} UserId=alice(1001) Priority=1 OverSubscribe={'YES' if mode == 'YES' else 'NO'} "
            f"Exclusive={mode if mode != 'YES' else 'NO'} Contiguous=0\n")


class ShowJobSlurm:
    """A 26.05 slurmctld answering squeue, sinfo and `scontrol show job -o ID` for
    ``records`` (squeue --json records) with ``lines`` (planned id -> its show-job line);
    ``slow``: the ids whose show-job times out."""

    def __init__(self, records, lines):
        self.meta = recorded("26.05", "squeue.json")["meta"]
        self.records, self.lines, self.slow = records, lines, set()
        self.shows: list[list[str]] = []  # every scontrol show job argv

    def __call__(self, argv, timeout_s, env):
        if argv[:3] == ["scontrol", "show", "job"]:
            self.shows.append(list(argv))
            asked = argv[4:]
            if asked and asked[0] in self.slow:
                raise subprocess.TimeoutExpired(argv, timeout_s)
            if not asked:  # the old whole dump: every line, keyed by numeric JobId
                return CommandResult(0, "".join(line for line, _ in self.lines.values()), "")
            line = self.lines.get(asked[0])
            if line is None:
                return CommandResult(1, "", "slurm_load_jobs error: Invalid job id specified\n")
            return CommandResult(0, line[0], "")
        text = {"squeue": json.dumps({"meta": self.meta, "jobs": self.records}),
                "sinfo": (FIXTURES / "26.05" / "sinfo.json").read_text()}.get(argv[0], "")
        return CommandResult(0, text, "")

    def asked(self):
        shows, self.shows = self.shows, []
        return [argv[4:] for argv in shows]


def plain(job_id, submit=1000, **fields):
    return pending_record("26.05", 1, job_id=job_id, submit_time=number("26.05", submit), **fields)


def task_record(array_id, task, job_id):
    """A pending task with a record of its own (requeued or split off): planned "ARRAY_TASK"."""
    return plain(job_id, array_job_id=number("26.05", array_id), array_task_id=number("26.05", task))


def by_id(observation):
    return {job.job_id: job for job in observation.jobs}


def test_a_pending_task_is_asked_once_under_its_own_id_and_planned_with_its_mode():
    slurm = ShowJobSlurm([task_record(12, 3, 20)], {"12_3": (show_line(20, "NO", (12, 3)), None)})
    backend = SlurmBackend(runner=slurm)
    job = by_id(backend.observe())["12_3"]
    assert slurm.asked() == [["12_3"]]  # only the new pending job, by its planned id
    assert not job.unmodelled and not job.exclusive  # its mode known: it may cause a preemption
    for _ in range(3):
        assert not by_id(backend.observe())["12_3"].unmodelled
    assert slurm.asked() == []  # known: never asked again while it pends


def test_an_exclusive_task_and_an_array_record_are_keyed_as_planned():
    from slurm_plugin.parse_jobs import parse_show_job_sharing

    text = show_line(20, "NODE", (12, 3)) + show_line(21, "NO", (12, "5-50%4")) + show_line(22, "YES")
    assert parse_show_job_sharing(text) == {"12_3": "exclusive", "12": "", "22": "oversubscribe"}
    slurm = ShowJobSlurm([task_record(12, 3, 20)], {"12_3": (show_line(20, "NODE", (12, 3)), None)})
    assert by_id(SlurmBackend(runner=slurm).observe())["12_3"].exclusive


def test_at_most_twenty_new_ids_per_observation_the_rest_next_round(monkeypatch):
    # (a few new jobs among many known ones: here the whole-dump share set out of reach)
    monkeypatch.setattr(exclusive_modes, "SHOW_ALL_JOBS_SHARE", 2.0)
    records = [plain(100 + i, submit=1000 + i) for i in range(30)]
    slurm = ShowJobSlurm(records, {str(100 + i): (show_line(100 + i), None) for i in range(30)})
    backend = SlurmBackend(runner=slurm)
    first = backend.observe()
    assert slurm.asked() == [[str(100 + i)] for i in range(exclusive_modes.MAX_SHOW_JOB_IDS)]
    unknown = [j.job_id for j in first.jobs if j.unmodelled]
    assert unknown == [str(100 + i) for i in range(20, 30)]  # not read yet: never preempted for
    assert all("unreported_request" in by_id(first)[i].unmodelled_reasons for i in unknown)
    assert any("10 pending jobs' --exclusive left for the next" in line for line in first.skipped)
    second = backend.observe()
    assert slurm.asked() == [[str(100 + i)] for i in range(20, 30)]
    assert not any(j.unmodelled for j in second.jobs)
    backend.observe()
    assert slurm.asked() == []


def test_a_slow_show_job_leaves_those_modes_unknown_not_the_observation():
    records = [plain(100), plain(101), plain(102)]
    slurm = ShowJobSlurm(records, {str(i): (show_line(i), None) for i in (100, 101, 102)})
    slurm.slow = {"101"}
    backend = SlurmBackend(runner=slurm)
    observation = backend.observe()  # before: BackendUnavailable, the whole observation lost
    jobs = by_id(observation)
    assert not jobs["100"].unmodelled
    assert jobs["101"].unmodelled_reasons == ("unreported_request",) and "--exclusive" in jobs["101"].unmodelled
    assert jobs["102"].unmodelled  # the first time-out ends the reads: a slow slurmctld costs one wait
    assert slurm.asked() == [["100"], ["101"]]
    assert any("scontrol show job 101" in line and "did not answer" in line for line in observation.skipped)
    slurm.slow = set()
    jobs = by_id(backend.observe())
    assert slurm.asked() == [["102"], ["101"]]  # the never-asked first, then the one that failed
    assert not any(job.unmodelled for job in jobs.values())


def test_an_unreachable_slurmctld_on_show_job_does_not_fail_the_observation():
    slurm = ShowJobSlurm([plain(100)], {})

    def runner(argv, timeout_s, env):
        if argv[:3] == ["scontrol", "show", "job"]:
            return CommandResult(1, "", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)")
        return slurm(argv, timeout_s, env)
    observation = SlurmBackend(runner=runner).observe()
    assert by_id(observation)["100"].unmodelled_reasons == ("unreported_request",)


def test_a_job_that_left_and_came_back_under_a_new_submit_time_is_asked_again():
    slurm = ShowJobSlurm([plain(100, submit=1000)], {"100": (show_line(100, "NODE"), None)})
    backend = SlurmBackend(runner=slurm)
    assert by_id(backend.observe())["100"].exclusive
    slurm.records[0]["priority"] = number("26.05", 5)  # the record moved, the job did not
    backend.observe()
    assert slurm.asked() == [["100"]]
    slurm.records[0]["submit_time"] = number("26.05", 2000)  # another job under that id
    slurm.lines["100"] = (show_line(100, "NO"), None)
    assert not by_id(backend.observe())["100"].exclusive
    assert slurm.asked() == [["100"]]
    assert backend._sharing["100"][1] == ""
    slurm.records.clear()  # it left the queue: its mode is forgotten
    backend.observe()
    assert "100" not in backend._sharing


def test_many_unknown_modes_are_read_in_one_dump_a_few_by_their_ids():
    """A controller just started (or a submit burst): more than twenty pending jobs of
    unknown mode and at least a tenth of the pending ones are read with one `scontrol
    show job -o` (one RPC), array tasks keyed as planned; the few new ones after that are
    asked by their ids. Twenty a round, a fresh controller at 10,000 pending jobs took
    500 rounds before every job could cause a preemption."""
    records = [plain(100 + i, submit=1000 + i) for i in range(60)] + [task_record(12, 3, 20)]
    lines = {str(100 + i): (show_line(100 + i, "NODE" if i % 7 == 0 else "NO"), None) for i in range(60)}
    lines["12_3"] = (show_line(20, "NO", (12, 3)), None)
    slurm = ShowJobSlurm(records, lines)
    backend = SlurmBackend(runner=slurm)
    jobs = by_id(backend.observe())
    assert slurm.asked() == [[]]  # one dump, no id
    assert not any(job.unmodelled for job in jobs.values())
    assert jobs["100"].exclusive and jobs["107"].exclusive and not jobs["101"].exclusive and not jobs["12_3"].exclusive
    # a few new ones among the known: by their ids
    slurm.records.append(plain(200, submit=3000))
    slurm.lines["200"] = (show_line(200), None)
    assert not by_id(backend.observe())["200"].unmodelled
    assert slurm.asked() == [["200"]]


def test_jobs_a_dump_did_not_answer_are_asked_by_id_not_dumped_again():
    records = [plain(100 + i, submit=1000 + i) for i in range(60)]
    lines = {str(100 + i): (show_line(100 + i), None) for i in range(60) if i % 2 == 0}  # half unanswered
    slurm = ShowJobSlurm(records, lines)
    backend = SlurmBackend(runner=slurm)
    backend.observe()
    assert slurm.asked() == [[]]  # the dump
    backend.observe()
    assert slurm.asked() == [[str(100 + i)] for i in range(1, 40, 2)]  # twenty of those left, by id: no second dump


def test_a_dump_that_times_out_leaves_the_modes_unknown_not_the_observation():
    records = [plain(100 + i, submit=1000 + i) for i in range(30)]
    slurm = ShowJobSlurm(records, {str(100 + i): (show_line(100 + i), None) for i in range(30)})

    def runner(argv, timeout_s, env):
        if argv == ["scontrol", "show", "job", "-o"]:
            raise subprocess.TimeoutExpired(argv, timeout_s)
        return slurm(argv, timeout_s, env)
    backend = SlurmBackend(runner=runner)
    observation = backend.observe()
    assert all(job.unmodelled_reasons == ("unreported_request",) for job in observation.jobs)
    assert any("scontrol show job" in line and "unknown this round" in line for line in observation.skipped)
    assert not any(job.unmodelled for job in SlurmBackend(runner=slurm).observe().jobs)  # answered: all known

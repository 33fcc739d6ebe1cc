"""The AdminComment line: its text, the site's part kept, written only on change and
within bounds, nothing outside enforce mode (controller.service.round.admin_comment)."""
from __future__ import annotations

import dataclasses

import pytest

from controller.service.round.admin_comment import AdminComments, combined, our_line, ours_in, rounded_gpu_s, site_part
from controller.service.acting.backend import ObservedJob
from controller.service.ops.config import from_mapping
from controller.service.round.daemon import Controller
from tests.test_controller import ScriptedBackend, store  # noqa: F401  (fixture)


@pytest.mark.parametrize("value, text", [(0, "0"), (99.9, "99"), (5400, "5,400"), (5467.2, "5,400"),
                                         (129_999, "120,000"), (1_234_567, "1,200,000")])
def test_attained_has_two_significant_digits(value, text):
    assert rounded_gpu_s(value) == text


def test_line_reads_like_the_issue():
    assert our_line(1, 3, 5400, 4, True, True) == \
        "tiresias: queue 2/3 · 5,400 GPU-s attained · position 4 · preemptable"
    assert our_line(0, 2, 10, 1, False, False) == "tiresias: queue 1/2 · 10 GPU-s attained · position 1"
    assert our_line(0, 0, 10, 2, True, False) == "tiresias: 10 GPU-s attained · position 2 · not preemptable"
    # no place in the plan order (the memo keeps the text before and after the position)
    assert our_line(1, 3, 5400, None, True, False) == "tiresias: queue 2/3 · 5,400 GPU-s attained · not preemptable"
    assert our_line(0, 2, 10, None, False, False) == "tiresias: queue 1/2 · 10 GPU-s attained"
    # the same parts with two positions: each line its own position
    assert our_line(0, 2, 10, 7, True, True).endswith("position 7 · preemptable")
    assert our_line(0, 2, 10, 8, True, True).endswith("position 8 · preemptable")


def test_site_text_is_kept_and_ours_replaced():
    ours = "tiresias: queue 1/2 · 0 GPU-s attained · position 1"
    assert combined("", ours) == f"[{ours}]"
    first = combined("billing=ml-team", ours)
    assert first == f"billing=ml-team [{ours}]"
    newer = "tiresias: queue 2/2 · 5,000 GPU-s attained · position 3"
    second = combined(first, newer)
    assert second == f"billing=ml-team [{newer}]" and ours_in(second) == newer
    assert site_part(second) == "billing=ml-team"
    # the site appended after our part: their text stays, ours moves to the end
    assert combined(f"{first} audit ok", newer) == f"billing=ml-team audit ok [{newer}]"
    assert site_part("[not ours] x") == "[not ours] x"  # only the tiresias bracket is ours


def _job(job_id, admin_comment="", state="PENDING"):
    return ObservedJob(job_id=job_id, user="alice", partition="batch", state=state, reason="Priority", gpus=1,
                       admin_comment=admin_comment)


def test_updates_only_on_change_urgent_first_and_bounded():
    comments = AdminComments(refresh_s=300, max_per_round=2)
    line = "tiresias: queue 1/2 · 0 GPU-s attained · position 1"
    observed = {"1": _job("1", f"[{line}]"), "2": _job("2", "site"), "3": _job("3"), "4": _job("4")}
    wanted = {j: (line, (0, False)) for j in observed}
    got = comments.updates(wanted, observed, now=0)
    assert "1" not in got  # Slurm already shows it
    assert len(got) == 2 and got.get("2", f"site [{line}]") == f"site [{line}]"  # the cap
    for job_id, text in got.items():
        comments.written(job_id, (0, False), 0)
        observed[job_id] = dataclasses.replace(observed[job_id], admin_comment=text)
    # routine change (service, position) of a written job: not before refresh_s
    written = set(got)
    moved = {j: (line.replace("position 1", "position 2"), (0, False)) for j in written}
    assert comments.updates(moved, observed, now=100) == {}
    assert set(comments.updates(moved, observed, now=300)) == written
    # a queue change is written at once
    demoted = {j: (line.replace("queue 1/2", "queue 2/2"), (1, False)) for j in written}
    assert set(comments.updates(demoted, observed, now=101)) == written


def _controller(store, backend, mode="enforce", **settings):  # noqa: F811
    config = from_mapping({"mode": mode, "preempt_min_runtime_s": 0, "queues_gpu_s": [100.0], **settings})
    return Controller(config, backend, store, clock=lambda: backend.now)


def _admin_calls(backend):
    return [call for call in backend.calls if call[0] == "set_admin_comment"]


def test_controller_writes_on_change_keeps_site_text_and_shadow_writes_nothing(store):  # noqa: F811
    backend = ScriptedBackend()
    backend.add("1", 4, "RUNNING", start=1000.0, nodes=[("gpu1", 4)])
    backend.add("2", 16)
    backend.jobs["2"] = dataclasses.replace(backend.jobs["2"], admin_comment="site: reserved for ml-team")
    shadow = _controller(store, backend, mode="shadow")
    shadow.run_round()
    assert _admin_calls(backend) == [] and not any("admin" in w for w in shadow.executor.would)
    c = _controller(store, backend, admin_comment_refresh_s=0)
    c.run_round()
    calls = dict((job_id, text) for _, job_id, text in _admin_calls(backend))
    assert calls["1"] == "[tiresias: queue 1/2 · 0 GPU-s attained · position 1 · preemptable]"
    assert calls["2"] == "site: reserved for ml-team [tiresias: queue 1/2 · 0 GPU-s attained · position 2]"
    for job_id, text in calls.items():  # Slurm now shows what was written
        backend.jobs[job_id] = dataclasses.replace(backend.jobs[job_id], admin_comment=text)
    backend.calls.clear()
    c.run_round()
    assert _admin_calls(backend) == []  # nothing changed: nothing written
    backend.now += 30  # job 1: 4 GPUs x 30 s = 120 GPU-s, past the 100 GPU-s threshold: queue 2
    c.run_round()
    texts = {job_id: text for _, job_id, text in _admin_calls(backend)}
    assert texts["1"].startswith("[tiresias: queue 2/2 · 120 GPU-s attained")


def test_admin_comment_off(store):  # noqa: F811
    backend = ScriptedBackend()
    backend.add("1", 4)
    _controller(store, backend, admin_comment=False).run_round()
    assert _admin_calls(backend) == []


@pytest.mark.parametrize("text", ["two\nlines", "x" * 1025, "tab\there"])
def test_slurm_lever_refuses_bad_text_before_running_anything(text):
    from slurm_plugin.backend import SlurmBackend

    def never(argv, timeout_s, env):
        raise AssertionError(f"ran {argv}")

    with pytest.raises(ValueError, match="AdminComment must be one printable line"):
        SlurmBackend(runner=never).set_admin_comment("12", text)


class _Plan:
    def __init__(self, levels):
        self.levels, self.order, self.round_id = levels, list(levels), 1


class _Executor:
    def __init__(self):
        self.texts: dict[str, str] = {}

    def apply(self, action):
        self.texts[action.job_id] = action.text
        return dataclasses.make_dataclass("Outcome", ["applied"])(True)


def _hundred_pending():
    """100 pending jobs in queue 1, their plan, the jobs whose line was made (attained
    service asked: a line made) and an executor that applies every write."""
    observed = {str(j): _job(str(j)) for j in range(100)}
    looked: list[str] = []

    def attained(job_id):
        looked.append(job_id)
        return 0.0

    return observed, _Plan({j: 0 for j in observed}), looked, attained, _Executor()


def test_a_round_looks_at_changed_records_and_due_refreshes_only_within_the_rpc_budget():
    """Issue 37: the pass touches the jobs whose record or level changed and the
    refreshes a heap says are due, and writes no more than the RPC budget the bands
    left (one RPC a line); the rest waits, counted."""
    from controller.core.levers.bands import RpcBudget
    budget = RpcBudget(per_s=1.0, burst=20)
    comments = AdminComments(refresh_s=300, max_per_round=50, budget=budget)
    observed, plan, looked, attained, executor = _hundred_pending()

    def round_at(now):
        looked.clear()
        return comments.apply(plan, observed, attained, 2, lambda job: False, executor, now)

    assert round_at(0) == 20 and comments.waiting == 80 and comments.backlog
    for job_id, text in executor.texts.items():  # Slurm shows what was written: a new record
        observed[job_id] = dataclasses.replace(observed[job_id], admin_comment=text)
    assert round_at(10) == 10  # 1/s over 10 s
    # lines made for the 10 written only: the 70 first lines that wait are counted without
    # theirs; the 20 written and unchanged are not looked at
    assert len(looked) == 10 and comments.waiting == 70
    for job_id, text in executor.texts.items():
        observed[job_id] = dataclasses.replace(observed[job_id], admin_comment=text)
    for now in range(20, 100, 10):
        round_at(now)
        for job_id, text in executor.texts.items():
            observed[job_id] = dataclasses.replace(observed[job_id], admin_comment=text)
    assert comments.waiting == 0 and len(executor.texts) == 100
    round_at(150)
    assert looked == [] and comments.next_refresh_s() == 300  # nothing changed, nothing due
    plan.order = list(reversed(plan.order))  # every position changes: written when due, not before
    round_at(200)
    assert looked == []
    round_at(300)
    assert 0 < len(looked) <= 20 + 10  # the due ones, first the 20 written at 0, then what the budget allows


def test_due_refreshes_over_the_cap_are_neither_looked_at_nor_lost():
    """Issue 37 (110,000 jobs): a round makes the due lines it can write, oldest first, and
    leaves the rest in the heap unlooked-at; they are counted as waiting and written in the
    rounds after, none skipped."""
    comments = AdminComments(refresh_s=300, max_per_round=10)
    observed, plan, looked, attained, executor = _hundred_pending()

    def round_at(now):
        looked.clear()
        executor.texts.clear()
        written = comments.apply(plan, observed, attained, 2, lambda job: False, executor, now)
        for job_id, text in executor.texts.items():  # Slurm shows what was written: a new record
            observed[job_id] = dataclasses.replace(observed[job_id], admin_comment=text)
        return written

    for now in range(0, 10):  # every first line, ten a round
        assert round_at(now) == 10
    assert comments.waiting == 0 and not comments.backlog
    plan = _Plan({j: 0 for j in reversed(observed)})  # every position changes: due at 300 to 309
    assert round_at(305) == 10 and len(looked) == 10  # of the 60 rows due by 305, the 10 it writes
    assert comments.waiting == 50 and comments.backlog
    first = set(executor.texts)
    assert first == {str(j) for j in range(10)}  # oldest first: the lines written at 0
    seen = set(first)
    for now in range(306, 320):
        round_at(now)
        assert len(looked) == len(executor.texts) <= 10  # a line made only for a line written
        seen |= set(executor.texts)
    assert seen == set(observed) and comments.waiting == 0 and not comments.backlog


def test_a_pass_looks_only_at_what_changed_and_writes_what_a_look_at_every_job_writes():
    """Issue 37 (at 110,000 jobs the look at every job was 0.18 s of a round): a pass looks
    only at the jobs whose record or level changed since the last pass, with those it held
    or left wanting a line (the cap, a failed write), and writes the very lines, in the
    very order, a look at every job writes, over rounds of changed records, levels, holds
    and quiet rounds (the records of the last pass shown again, our writes laid over)."""
    import random

    from controller.core.levers.comments import CommentBook

    class Counting(dict):
        looks = 0

        def get(self, key, default=None):
            Counting.looks += 1
            return super().get(key, default)

    rng = random.Random(7)
    ids = [str(j) for j in range(60)]
    shown = {j: _job(j, "site" if int(j) % 3 else "", "RUNNING" if int(j) % 5 == 0 else "PENDING") for j in ids}
    books = {"all": CommentBook(refresh_s=50, max_per_round=6), "changed": CommentBook(refresh_s=50, max_per_round=6)}
    views = {name: dict(shown) for name in books}
    plan = _Plan({j: int(j) % 2 for j in ids})
    looks = {"all": 0, "changed": 0}
    for now in range(0, 200, 5):
        if now % 20 == 10:  # a planned round: some levels change, some records (a site's edit)
            plan = _Plan({j: (level + (rng.random() < 0.1)) % 3 for j, level in plan.levels.items()})
            for j in rng.sample(ids, 5):
                for name in books:
                    views[name][j] = dataclasses.replace(views[name][j], admin_comment=f"edit {now}")
        hold = set(rng.sample(ids, 3)) if now % 20 == 10 else set()
        fails = set(rng.sample(ids, 2))  # their writes fail: looked at again, not lost
        writes = {}
        for name, book in books.items():
            if name == "all":
                book.look_at_all()
            observed = Counting(views[name])
            before = Counting.looks
            actions, keys, due = book.plan(plan, observed, lambda job_id: 100.0 * int(job_id), 3,
                                           lambda job: True, float(now), hold=hold)
            looks[name] += Counting.looks - before
            book.settle(actions, keys, due, lambda action: action.job_id not in fails, float(now))
            for action in actions:  # Slurm shows what was written
                if action.job_id not in fails:
                    views[name][action.job_id] = dataclasses.replace(views[name][action.job_id],
                                                                     admin_comment=action.text)
            writes[name] = [(a.job_id, a.text) for a in actions]
        assert writes["changed"] == writes["all"], now
    assert views["changed"] == views["all"] and all("[tiresias: " in job.admin_comment for job in views["all"].values())
    assert looks["changed"] < looks["all"] / 2


def test_the_unlooked_refreshes_are_counted_at_most_once_a_minute():
    """The due refreshes a backlog leaves unlooked-at are counted from the heap (a pass
    over every row) at most every WAITING_COUNTED_EVERY_S; the urgent lines every round."""
    from controller.core.levers.comments import WAITING_COUNTED_EVERY_S
    comments = AdminComments(refresh_s=100, max_per_round=10)
    observed, _, _, attained, executor = _hundred_pending()
    plan = _Plan({j: 0 for j in observed})

    def round_at(now):
        executor.texts.clear()
        comments.apply(plan, observed, attained, 2, lambda job: False, executor, now)
        for job_id, text in executor.texts.items():
            observed[job_id] = dataclasses.replace(observed[job_id], admin_comment=text)

    for now in range(10):  # every first line, ten a round
        round_at(now)
    plan = _Plan({j: 0 for j in reversed(observed)})  # every line changes: due at 100 to 109
    round_at(110)
    assert comments.waiting == 90
    round_at(111)
    assert comments.waiting == 90  # counted at 110, not again yet
    round_at(110 + WAITING_COUNTED_EVERY_S)
    assert comments.waiting == 100 - 10 * 3  # counted again: 30 written since

"""The simulator's walk over waiting lists kept per node class (QueueBook._take_by_class,
issue 37 item 5): it passes a class whose nodes hold nothing within reach whole, and must
decide what the walk over the per-size lists decides (QueueBook._take_waiting), round
after round of arrivals, ends, demotions and preemptions."""
from __future__ import annotations

import random

import pytest

from controller.core.engine import EngineConfig
from controller.core.model import JobSpec
from controller.core.queue_book import QueueBook
from controller.core.victims import OwnNodesReach
from controller.replay.run_config import SimConfig
from controller.replay.simulator import Simulation

KINDS = ((3, ("a",), ""), (2, ("b",), ""), (1, ("c",), ""), (2, ("d",), ""))


def workload(seed: int, count: int = 300) -> list[JobSpec]:
    rng = random.Random(seed)
    specs, t = [], 0.0
    for i in range(count):
        t += rng.expovariate(1 / 40.0)
        part = rng.choice("abcd")
        room = {"a": 12, "b": 8, "c": 4, "d": 8}[part]
        gpus = rng.choice([g for g in (1, 1, 2, 4, 8) if g <= room])
        specs.append(JobSpec(f"j{i}", gpus, t, rng.choice([30.0, 200.0, 900.0, 4000.0]), partitions=(part,),
                             preemptable=rng.random() > 0.1))
    return specs


def outcomes(specs, policy: str):
    config = SimConfig(nodes=8, gpus_per_node=4, node_kinds=KINDS,
                       engine=EngineConfig(policy=policy, thresholds_gpu_s=(600.0, 6000.0)))
    result = Simulation(config).run(specs)
    return [(o.job_id, o.start_s, o.end_s) for o in result.outcomes], result.preemptions, result.rounds


def replay_protected(seed: int, policy: str = "dlas", max_per_job=None) -> None:
    """The workload replayed with runs protected for their first 300 s (protections that
    end: the book repins), and at most ``max_per_job`` preemptions a job."""
    config = SimConfig(nodes=8, gpus_per_node=4, node_kinds=KINDS,
                       engine=EngineConfig(policy=policy, thresholds_gpu_s=(600.0, 6000.0),
                                           preempt_min_runtime_s=300.0, preempt_max_per_job=max_per_job))
    Simulation(config).run(workload(seed))


@pytest.mark.parametrize("policy", ["dlas", "dgittins"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_class_walk_decides_as_the_size_walk(policy, seed, monkeypatch):
    specs = workload(seed)
    calls = {"class": 0, "asked": 0}
    by_class, admits = QueueBook._take_by_class, OwnNodesReach.admits

    def counting_take(self, *args):
        calls["class"] += 1
        return by_class(self, *args)

    def counting_admits(self, job, key=None):
        calls["asked"] += 1
        return admits(self, job, key)

    monkeypatch.setattr(QueueBook, "_take_by_class", counting_take)
    monkeypatch.setattr(OwnNodesReach, "admits", counting_admits)
    fast = outcomes(specs, policy)
    fast_asked = calls["asked"]
    assert calls["class"] > 0  # the class walk ran
    # the walk over per-size lists, asking every waiting job
    monkeypatch.setattr(QueueBook, "_take_by_class",
                        lambda self, level, free, selected, skip_pinned, reach:
                        self._take_waiting(self.waiting[level], free, selected, skip_pinned, reach))
    calls["asked"] = 0
    slow = outcomes(specs, policy)
    assert fast == slow
    assert fast[1] > 0  # preemptions happened: entered and running jobs were walked
    assert fast_asked < calls["asked"]  # and the class walk passed some jobs without asking


def test_the_class_lists_follow_the_size_lists():
    """After many adds, removes and a rekey, the per-class lists hold exactly the per-size
    lists' items, split by class, in order."""
    rng = random.Random(7)
    book = QueueBook(3)
    book.class_function = lambda job: job.spec.partitions
    book.within_function = lambda job, level: 0.0
    from controller.core.model import JobState
    jobs = [JobState(spec=JobSpec(f"j{i}", rng.choice([1, 2, 4]), 0.0, 10.0, partitions=(rng.choice("xyz"),)),
                     index=i) for i in range(200)]
    listed = set()
    for step in range(600):
        job = rng.choice(jobs)
        if job.index in listed:
            book.remove(job)
            listed.discard(job.index)
        else:
            book.add_waiting(job, rng.randrange(3), 1 + rng.randrange(2), float(rng.randrange(50)),
                             rng.choice([0.0, -1.0]))
            listed.add(job.index)
        if step % 150 == 149:
            book.rekey(lambda level, items: [rng.random() for _ in items], range(3))
    for level in range(3):
        split: dict = {}
        for size, items in book.waiting[level].items():
            for item in items:
                split.setdefault((size, item[2].spec.partitions), []).append(item)
        assert split == book.by_class[level]
        sizes: dict = {}  # the class walk's gang sizes per class, ascending
        for size, kind in sorted(split):
            sizes.setdefault(kind, []).append(size)
        assert book.class_sizes[level] == sizes
        for items in book.by_class[level].values():
            assert items == sorted(items)
        assert book.merged[level] == sorted(item for items in book.waiting[level].values() for item in items)
        assert book.merged_jobs[level] == [job for _, _, job in book.merged[level]]
    plain = QueueBook(3)
    for level in range(3):
        for item in book.merged[level]:
            plain.add_waiting(item[2], level, item[0][1], item[0][2], item[0][0])
    assert book.order() == plain.order()  # the kept order equals the sorted one


class _Forgets(dict):
    """A memo that never remembers: every job's bound is summed again."""

    def __setitem__(self, key, value):
        pass


@pytest.mark.parametrize("seed", [1, 2])
def test_the_wait_audit_asks_what_it_asks_without_its_refusal_memo(seed, monkeypatch):
    """SimCluster.audit_waits passes a job whose node set already refused as many GPUs
    this round: the same jobs reach the victim search as when every bound is summed."""
    from controller.replay import cluster
    asked = []
    search = cluster.victims_for

    def recording(job, *args, **kwargs):
        asked.append(job.job_id)
        return search(job, *args, **kwargs)

    monkeypatch.setattr(cluster, "victims_for", recording)
    fast = outcomes(workload(seed), "dlas")
    fast_asked, asked[:] = list(asked), []
    monkeypatch.setattr(cluster, "_refusals", _Forgets)
    assert outcomes(workload(seed), "dlas") == fast
    assert asked == fast_asked and asked  # asked the same jobs, and some


@pytest.mark.parametrize("seed", [1, 2])
def test_the_kept_movable_gpus_count_as_the_running_jobs_do(seed, monkeypatch):
    """The walk's reach counts each level's preemptable running GPUs per node from the
    book's kept sums (QueueBook.movable_on): every round they equal the count job by job
    (OwnNodesReach._count / _uncount on the live jobs), through starts, preemptions,
    demotions and protections that end (fails with a repin or a removal left out)."""
    from controller.core.protection import may_preempt
    start, enter = OwnNodesReach._start, OwnNodesReach.enter
    checked = []

    def by_job(reach, levels) -> dict:
        below = {}
        for level in levels:
            for job in reach.book.running[level].values():
                if may_preempt(job, True):
                    for node, gpus in job.placement:
                        if node in reach.free_by_node:
                            below[node] = below.get(node, 0) + gpus
        return below

    def checking_start(self):
        start(self)
        expected = by_job(self, range(self.level + 1, self.book.num_levels))
        for job in self.book.entered.values():  # entered running jobs: counted job by job in both
            if job.index not in self.kept_jobs and may_preempt(job, True):
                for node, gpus in job.placement:
                    if node in self.free_by_node:
                        expected[node] = expected.get(node, 0) + gpus
        assert {n: g for n, g in self.below.items() if g} == {n: g for n, g in expected.items() if g}
        checked.append(1)

    def checking_enter(self, level):
        if self.started:
            copy = dict(self.below)
            for node, gpus in by_job(self, [level]).items():
                if copy.get(node, 0) > 0:
                    copy[node] = max(copy[node] - gpus, 0)
            enter(self, level)
            # every value checked; a node at 0 and one left out count alike (read with .get(node, 0))
            assert {n: g for n, g in self.below.items() if g} == {n: g for n, g in copy.items() if g}
            assert all(g >= 0 for g in self.below.values())
        else:
            enter(self, level)

    monkeypatch.setattr(OwnNodesReach, "_start", checking_start)
    monkeypatch.setattr(OwnNodesReach, "enter", checking_enter)
    outcomes(workload(seed), "dlas")
    replay_protected(seed)
    assert checked


def _pieces_checked(monkeypatch) -> list:
    """Every round, SimCluster.walk_pieces from the book's pieces (QueueBook.order_parts)
    equals walk_pieces from the whole walk order: the same candidate victims at the same
    places, and the same jobs that do not run at the same places."""
    from controller.replay.cluster import SimCluster
    pieces = SimCluster.walk_pieces
    checked = []

    def not_running(spans) -> list:
        return [(first + at, job.index) for first, listed in spans for at, job in enumerate(listed)
                if not job.running]

    def checking(self, order, now, book=None):
        fast = pieces(self, order, now, book)
        if book is not None:
            full = pieces(self, order, now)
            assert [(rank, job.index) for rank, job in fast[0]] == [(rank, job.index) for rank, job in full[0]]
            assert not_running(fast[1]) == not_running(full[1])
            checked.append(len(full[0]))
        return fast

    view = SimCluster.audit_view

    def drained(candidates, rank) -> tuple:
        """What the audit reads from its first pass on (at ``rank``, a waiting job's place)."""
        candidates.pass_before(rank, set())
        return (candidates.lowest, {n: g for n, g in candidates.within_reach.items() if g},
                [(place, job.index) for place, job in candidates.remaining()])

    def checking_view(self, order, now, book=None):
        if book is not None:  # the lazy view (or walk_pieces' from the book) against the full order's
            fast, full = view(self, order, now, book), view(self, order, now)
            assert fast[0].lowest == full[0].lowest
            assert not_running(fast[1]) == not_running(full[1])
            first = next((rank for rank, index in not_running(full[1])
                          if full[0].lowest is not None and rank < full[0].lowest), None)
            if first is not None:
                assert drained(fast[0], first) == drained(full[0], first)
                checked.append(len(drained(view(self, order, now)[0], first)[2]))
        return view(self, order, now, book)

    monkeypatch.setattr(SimCluster, "walk_pieces", checking)
    monkeypatch.setattr(SimCluster, "audit_view", checking_view)
    return checked


@pytest.mark.parametrize("policy", ["dlas", "dgittins"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_audits_pieces_of_the_book_equal_the_walk_order(policy, seed, monkeypatch):
    checked = _pieces_checked(monkeypatch)
    outcomes(workload(seed), policy)
    assert len(checked) > 50 and sum(checked) > 0  # many rounds, with candidates
    before = len(checked)
    replay_protected(seed, policy, max_per_job=2)
    assert len(checked) > before + 50


def test_the_audits_pieces_check_fails_off_by_one(monkeypatch):
    """The check above fails when the places of a level's waiting items are off by one."""
    parts = QueueBook.order_parts

    def off_by_one(self):
        levels, still = parts(self)
        return [(first + (number % 2), listed) for number, (first, listed) in enumerate(levels)], still

    monkeypatch.setattr(QueueBook, "order_parts", off_by_one)
    _pieces_checked(monkeypatch)
    with pytest.raises(AssertionError):
        for seed in (1, 2, 3):
            outcomes(workload(seed), "dlas")


@pytest.mark.parametrize("policy", ["dlas", "dgittins"])
@pytest.mark.parametrize("seed", [1, 2])
def test_the_audit_over_the_books_pieces_asks_and_counts_as_over_the_walk_order(policy, seed, monkeypatch):
    """audit_waits over the book's pieces (spans left once every node set there refused
    its smallest gang) asks the victim search about the same jobs, finds the same waits
    and replays the same as over the whole walk order."""
    from controller.replay import cluster
    asked = []
    search, pieces = cluster.victims_for, cluster.SimCluster.walk_pieces

    def recording(job, *args, **kwargs):
        asked.append(job.job_id)
        return search(job, *args, **kwargs)

    def run():
        config = SimConfig(nodes=8, gpus_per_node=4, node_kinds=KINDS,
                           engine=EngineConfig(policy=policy, thresholds_gpu_s=(600.0, 6000.0)))
        result = Simulation(config).run(workload(seed, 400))
        return ([(o.job_id, o.start_s, o.end_s) for o in result.outcomes], result.waited_behind_victim,
                result.behind_examples, result.preemptions)

    monkeypatch.setattr(cluster, "victims_for", recording)
    fast = run()
    fast_asked, asked[:] = list(asked), []
    monkeypatch.setattr(cluster.SimCluster, "walk_pieces", lambda self, order, now, book=None: pieces(self, order, now))
    assert run() == fast
    assert asked == fast_asked and asked


def _choices_checked(monkeypatch) -> list:
    """Every round that chooses victims from the book's pieces: the newcomers' places and
    the running jobs' places (QueueBook.place_in_order, running_places) equal their
    positions in ``order()``, and the choice equals the one made from ``order()``."""
    from controller.core import mlfq_round
    choose = mlfq_round.choose_victims
    checked = []

    def checking(newcomers, walk_victims, order, free_by_node, **options):
        book = options.get("book")
        if book is not None:
            assert options["room"]() is None  # choosing twice takes no CPUs or memory twice
            ordered = order()
            position = {job.index: at for at, job in enumerate(ordered)}
            running, spans = book.running_places()
            assert [(place, job.index) for place, job in running] == \
                [(at, job.index) for at, job in enumerate(ordered) if job.running]
            assert [book.place_in_order(job, spans) for job in newcomers] == \
                [position[job.index] for job in newcomers]
            full = choose(newcomers, walk_victims, order, free_by_node, **{**options, "book": None})
            fast = choose(newcomers, walk_victims, order, free_by_node, **options)
            assert [(job.index, tuple(slots), at) for job, slots, at in fast.starts] == \
                [(job.index, tuple(slots), at) for job, slots, at in full.starts]
            assert [job.index for job in fast.victims] == [job.index for job in full.victims]
            assert [job.index for job in fast.unplaced] == [job.index for job in full.unplaced]
            assert {i: job.index for i, job in fast.beneficiary.items()} == \
                {i: job.index for i, job in full.beneficiary.items()}
            checked.append(len(fast.victims))
            return fast
        return choose(newcomers, walk_victims, order, free_by_node, **options)

    monkeypatch.setattr(mlfq_round, "choose_victims", checking)
    return checked


@pytest.mark.parametrize("policy", ["dlas", "dgittins"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_victims_chosen_from_the_books_pieces_equal_those_from_the_walk_order(policy, seed, monkeypatch):
    checked = _choices_checked(monkeypatch)
    outcomes(workload(seed), policy)
    assert len(checked) > 50 and sum(checked) > 0  # many rounds, with victims


def test_the_choice_check_fails_off_by_one(monkeypatch):
    """The check above fails when a newcomer's place is off by one."""
    place = QueueBook.place_in_order
    monkeypatch.setattr(QueueBook, "place_in_order", lambda self, job, spans: place(self, job, spans) + 1)
    _choices_checked(monkeypatch)
    with pytest.raises(AssertionError):
        outcomes(workload(1), "dlas")


def _movable_below_checked(monkeypatch) -> list:
    """At every level the walk's reach enters, the book's kept sums below each level
    (QueueBook.movable_below) equal movable_on summed over the levels after it."""
    enter = OwnNodesReach.enter
    checked = []

    def checking(self, level):
        book = self.book
        for at in range(book.num_levels):
            summed: dict = {}
            for on in book.movable_on[at + 1:]:
                for node, gpus in on.items():
                    summed[node] = summed.get(node, 0) + gpus
            assert book.movable_below[at] == summed
        checked.append(level)
        return enter(self, level)

    monkeypatch.setattr(OwnNodesReach, "enter", checking)
    return checked


@pytest.mark.parametrize("policy", ["dlas", "dgittins"])
@pytest.mark.parametrize("seed", [1, 2])
def test_the_books_movable_sums_below_each_level_equal_the_levels_after_it(policy, seed, monkeypatch):
    """Through starts, preemptions, demotions and protections that end (repin)."""
    checked = _movable_below_checked(monkeypatch)
    outcomes(workload(seed), policy)
    replay_protected(seed, policy)
    assert len(checked) > 100 and max(checked) == 2


def test_the_movable_sums_check_fails_off_by_one(monkeypatch):
    """The check above fails when a job's GPUs are kept below its own level too."""
    movable = QueueBook._movable

    def one_level_too_far(self, index, level, placement):
        movable(self, index, level, placement)
        if level + 1 < self.num_levels:
            on = self.movable_below[level]
            for node, gpus in placement:
                on[node] = on.get(node, 0) + gpus

    monkeypatch.setattr(QueueBook, "_movable", one_level_too_far)
    _movable_below_checked(monkeypatch)
    with pytest.raises(AssertionError):
        outcomes(workload(1), "dlas")


def _after_checked(monkeypatch) -> list:
    """Every time the victim choice asks the book for the running jobs after a place
    (QueueBook.running_places with ``after``), they are those of the whole list placed
    after it, for that place and the ones around it."""
    places = QueueBook.running_places
    checked = []

    def checking(self, after=-1, parts=None):
        fast = places(self, after, parts)
        full = places(self)[0]
        for other in (after - 1, after, after + 1):
            assert places(self, other)[0] == [item for item in full if item[0] > other]
        checked.append(len(fast[0]))
        return fast

    monkeypatch.setattr(QueueBook, "running_places", checking)
    return checked


@pytest.mark.parametrize("policy", ["dlas", "dgittins"])
@pytest.mark.parametrize("seed", [1, 2])
def test_the_running_jobs_after_a_place_are_those_of_the_whole_list(policy, seed, monkeypatch):
    checked = _after_checked(monkeypatch)
    outcomes(workload(seed), policy)
    assert len(checked) > 50 and sum(checked) > 0


def test_the_running_after_check_fails_off_by_one(monkeypatch):
    """The check above fails when a running list is cut one place late."""
    places = QueueBook.running_places

    def late(self, after=-1, parts=None):
        listed, spans = places(self, after, parts)
        return (listed[1:] if after >= 0 else listed), spans

    monkeypatch.setattr(QueueBook, "running_places", late)
    _after_checked(monkeypatch)
    with pytest.raises(AssertionError):
        outcomes(workload(1), "dlas")


def _keys_checked(monkeypatch) -> list:
    """Every key the class walk hands the reach (kept per node class for the round,
    OwnNodesReach.class_keys) is the job's own class_key, and after every class walk each
    kept key is the key of every waiting job of its class."""
    take, admits = QueueBook._take_by_class, OwnNodesReach.admits
    checked = []

    def checking(self, level, free, selected, skip_pinned, reach):
        left = take(self, level, free, selected, skip_pinned, reach)
        for walked in range(level + 1):
            for (_, kind), items in self.by_class[walked].items():
                if kind in reach.class_keys:
                    assert all(reach.class_key(job) == reach.class_keys[kind] for _, _, job in items)
        return left

    def checking_admits(self, job, key=None):
        if key is not None:
            assert key == self.class_key(job)
            checked.append(job.spec.partitions)
        return admits(self, job, key)

    monkeypatch.setattr(QueueBook, "_take_by_class", checking)
    monkeypatch.setattr(OwnNodesReach, "admits", checking_admits)
    return checked


@pytest.mark.parametrize("seed", [1, 2])
def test_the_kept_class_keys_are_the_jobs_keys(seed, monkeypatch):
    checked = _keys_checked(monkeypatch)
    outcomes(workload(seed), "dlas")
    assert len(set(checked)) == 4  # every partition's class asked with its key


class _OneKey(dict):
    """A key memo that mixes the classes up: every class reads the first key kept."""

    def get(self, kind, default=None):
        return next(iter(self.values())) if self else default


def test_the_class_keys_check_fails_with_the_classes_mixed_up(monkeypatch):
    init = OwnNodesReach.__init__

    def mixing(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.class_keys = _OneKey()

    monkeypatch.setattr(OwnNodesReach, "__init__", mixing)
    _keys_checked(monkeypatch)
    with pytest.raises(AssertionError):
        outcomes(workload(1), "dlas")


def _sums_checked(monkeypatch) -> list:
    """Every time the walk asks a reach for a node set's GPUs (OwnNodesReach.within, kept
    per node set until a claim or uncount touches one of its nodes or the walk enters a
    level), each kept sum equals its nodes' free and candidates' GPUs summed now, and the
    refusal bound kept with it (``short``) is one more: a gang of that many is refused."""
    within = OwnNodesReach.within
    checked = []

    def checking(self, key):
        gpus = within(self, key)
        for kept, summed in self.sums.items():
            nodes = self.free.keys() | self.below.keys() if kept is None else kept
            fresh = sum(self.free.get(node, 0) + self.below.get(node, 0) for node in nodes)
            assert summed == fresh
            assert self.short[kept] == fresh + 1
        checked.append(gpus)
        return gpus

    monkeypatch.setattr(OwnNodesReach, "within", checking)
    return checked


@pytest.mark.parametrize("policy", ["dlas", "dgittins"])
@pytest.mark.parametrize("seed", [1, 2])
def test_the_reachs_kept_sums_equal_its_nodes_summed(policy, seed, monkeypatch):
    """Through claims, kept entered jobs, levels entered, protections that end."""
    checked = _sums_checked(monkeypatch)
    outcomes(workload(seed), policy)
    replay_protected(seed, policy)
    assert len(checked) > 100 and min(checked) == 0 and max(checked) > 8


def test_the_kept_sums_check_fails_when_a_claim_leaves_them(monkeypatch):
    """The check above fails when a claim does not drop the sums of its nodes."""
    monkeypatch.setattr(OwnNodesReach, "_touched", lambda self, nodes: None)
    _sums_checked(monkeypatch)
    with pytest.raises(AssertionError):
        outcomes(workload(1), "dlas")


def test_the_kept_sums_check_fails_off_by_one(monkeypatch):
    """The check above fails when the refusal bound is one GPU too high."""
    within = OwnNodesReach.within

    def lax(self, key):
        gpus = within(self, key)
        self.short[key] = gpus + 2
        return gpus

    monkeypatch.setattr(OwnNodesReach, "within", lax)
    _sums_checked(monkeypatch)
    with pytest.raises(AssertionError):
        outcomes(workload(1), "dlas")


def test_the_reach_keys_are_kept_only_while_the_eligibility_is_the_same():
    """QueueBook.reach_keys: one dict across rounds with the same Eligibility (the
    engine's while the nodes stay the same), a fresh one with another."""
    book, first, second = QueueBook(2), object(), object()
    kept = book.reach_keys(first)
    kept["class"] = "nodes"
    assert book.reach_keys(first) is kept
    assert book.reach_keys(second) == {}
    assert book.reach_keys(first) == {}  # back to the first: asked anew, nothing assumed

"""The handoff brake lifts only when what was freed could make the job fit (issue 35, item 5).

A braked job (its handoff failed: Slurm did not start it on what its victims freed)
gets no preemption until something it depends on changes. On the old rule any job
leaving the nodes it may use lifted it: a job of an EXCLUSIVE partition whose nodes
each kept another job had one victim preempted 6 times in an hour, every time a small
job there ended. Now a departure lifts it only when, on the nodes it may use, what is
free plus what its victims hold reaches its need (GPUs; CPUs and memory per node where
it asks; --exclusive: no other job left on the node)."""
from __future__ import annotations

from controller.core.levers.handoffs import Brake, ClusterView, HandoffBook
from controller.core.model import JobSpec, Node


def node(name, gpus_free, cpus_free=8, mem_free=16000):
    return Node(name, 4, gpus_free, cpus_total=8, cpus_free=cpus_free, mem_total_mb=16000, mem_free_mb=mem_free)


class World:
    """Nodes and running jobs (job id -> ((node, GPUs, CPUs, MB), ...)); free counts follow."""

    def __init__(self, running: dict, with_holdings: bool = True):
        self.running = dict(running)
        self.with_holdings = with_holdings

    def view(self):
        used: dict[str, list[int]] = {}
        for held in self.running.values():
            for name, gpus, cpus, mem in held:
                got = used.setdefault(name, [0, 0, 0])
                got[0] += gpus
                got[1] += cpus
                got[2] += mem
        nodes = [node(n, 4 - used.get(n, [0, 0, 0])[0], 8 - used.get(n, [0, 0, 0])[1],
                      16000 - used.get(n, [0, 0, 0])[2]) for n in ("n1", "n2")]
        return ClusterView(nodes, [(j, tuple(n for n, *_ in held)) for j, held in self.running.items()],
                           held=dict(self.running) if self.with_holdings else None)


def braked(world: World, spec: JobSpec, victims=("v",)) -> HandoffBook:
    book = HandoffBook()
    book.braked[spec.job_id] = Brake(0.0, 100.0, tuple(victims), ("r1.1",), world.view().needs(spec))
    return book


def check(book: HandoffBook, world: World, spec: JobSpec) -> list:
    view = world.view()
    return book.check(lambda job_id: "PENDING" if job_id == spec.job_id else "RUNNING", 200.0, 60.0,
                      lambda job_id: view.needs(spec))


EXCLUSIVE = JobSpec("9", 3, 0.0, exclusive=True)


def test_exclusive_job_stays_braked_while_every_node_keeps_another_job():
    # n1: the victim v (back on its GPUs after its requeue) and u1, kept; n2: u2, kept, and w
    world = World({"v": (("n1", 3, 1, 0),), "u1": (("n1", 1, 1, 0),), "u2": (("n2", 1, 1, 0),),
                   "w": (("n2", 3, 1, 0),)})
    book = braked(world, EXCLUSIVE)
    del world.running["w"]  # w leaves n2, u2 stays: no whole node for it (the old rule lifted here)
    assert check(book, world, EXCLUSIVE) == [] and "9" in book.braked
    world.running["x"] = (("n2", 2, 1, 0),)  # a job comes to n2 after w left
    assert check(book, world, EXCLUSIVE) == [] and "9" in book.braked
    del world.running["u1"]  # u1 leaves n1: the victim alone holds it, preempting it again empties it
    events = check(book, world, EXCLUSIVE)
    assert [(e.kind, e.detail) for e in events] == [("released", "job u1 left the nodes it may use")]
    assert "9" not in book.braked


def test_a_departure_that_frees_too_few_gpus_keeps_the_brake_and_one_that_reaches_it_lifts():
    spec = JobSpec("9", 4, 0.0)
    # n1: victim v (2 GPUs), kept k (1), x (1); n2 full of kept jobs
    world = World({"v": (("n1", 2, 1, 0),), "k": (("n1", 1, 1, 0),), "x": (("n1", 1, 1, 0),),
                   "n2job": (("n2", 4, 1, 0),)})
    book = braked(world, spec)
    del world.running["x"]  # 1 free + v's 2: 3 of 4
    assert check(book, world, spec) == [] and "9" in book.braked
    del world.running["k"]  # 2 free + v's 2: it fits where the preemption is repeated
    assert [e.kind for e in check(book, world, spec)] == ["released"]


def test_memory_per_node_counts_where_it_asks():
    spec = JobSpec("9", 2, 0.0, mem_per_node_mb=12000)
    # n1: victim v (2 GPUs, 4000 MB), m (0 GPU... a 1-GPU job holding 10000 MB), y (1 GPU)
    world = World({"v": (("n1", 2, 1, 4000),), "m": (("n1", 1, 1, 10000),), "y": (("n1", 1, 1, 0),),
                   "n2job": (("n2", 4, 1, 14000),)})
    book = braked(world, spec)
    del world.running["y"]  # a GPU freed, but n1's memory stays m's: 2000 + 4000 < 12000
    assert check(book, world, spec) == [] and "9" in book.braked
    del world.running["m"]
    assert [e.kind for e in check(book, world, spec)] == ["released"]


def test_request_change_and_a_node_coming_up_still_lift():
    world = World({"v": (("n1", 3, 1, 0),), "u1": (("n1", 1, 1, 0),), "u2": (("n2", 1, 1, 0),)})
    book = braked(world, EXCLUSIVE)
    plain = JobSpec("9", 3, 0.0)
    assert [e.detail for e in check(book, world, plain)] == ["its request changed"]


def test_without_holdings_any_departure_lifts_as_before():
    world = World({"v": (("n1", 3, 1, 0),), "u1": (("n1", 1, 1, 0),), "u2": (("n2", 1, 1, 0),),
                   "w": (("n2", 3, 1, 0),)}, with_holdings=False)
    book = braked(world, EXCLUSIVE)
    del world.running["w"]
    assert [e.kind for e in check(book, world, EXCLUSIVE)] == ["released"]

"""Controller.run_forever, the loop that runs in production, on a virtual clock: the
light poll between rounds, a full observation only on a change or after interval_s,
and the fallback for a backend without poll()."""
import dataclasses

from bench.scripted_slurm import VirtualTime
from controller.service.acting.backend import BackendUnavailable
from tests.test_controller import ScriptedBackend, controller, store  # noqa: F401 - store is a fixture


class PollingBackend(ScriptedBackend):
    """ScriptedBackend with the light change check; counts polls and observations."""

    def __init__(self):
        super().__init__()
        self.polls = self.observations = 0

    def poll(self):
        self.polls += 1
        if self.down:
            raise BackendUnavailable("slurmctld: connection refused")
        return frozenset((j.job_id, j.state) for j in self.jobs.values())

    def observe(self):
        self.observations += 1
        return super().observe()


def run_for(c, backend, seconds, every_s=0.0, change=None):
    clock = VirtualTime(backend.now)
    c.clock = clock

    def tick():
        backend.now = clock.now_s
        if change is not None:
            change()
    stop = clock.stop_after(seconds, every_s or 1.0, tick)
    rounds = []
    real_round = c.run_round
    c.run_round = lambda observation=None: rounds.append(clock.now_s) or real_round(observation)
    c.run_forever(stop)
    return rounds


def test_between_rounds_the_loop_only_polls(store):  # noqa: F811
    backend = PollingBackend()
    backend.add("1", 2, "RUNNING", start=1000.0, nodes=[("gpu1", 2)])
    c = controller(store, backend, poll_s=2.0, interval_s=10.0)
    rounds = run_for(c, backend, 60.0)
    assert backend.polls == 30
    assert backend.observations == len(rounds) == 6  # one full observation per interval_s
    assert [t - rounds[0] for t in rounds] == [0, 10, 20, 30, 40, 50]


def test_a_change_seen_by_the_poll_runs_a_round_at_once(store):  # noqa: F811
    backend = PollingBackend()
    backend.add("1", 2, "RUNNING", start=1000.0, nodes=[("gpu1", 2)])
    c = controller(store, backend, poll_s=2.0, interval_s=10.0)
    start = backend.now

    def change():
        if backend.now - start == 4.0:  # a job is submitted between two polls
            backend.add("2", 1)
    rounds = run_for(c, backend, 10.0, change=change)
    assert [t - start for t in rounds] == [0.0, 4.0]  # the poll at 4 s saw it: a round, not a wait
    assert "2" in c.records


def test_a_poll_that_fails_is_an_outage_and_nothing_is_observed(store):  # noqa: F811
    backend = PollingBackend()
    backend.add("1", 2, "RUNNING", start=1000.0, nodes=[("gpu1", 2)])
    backend.down = True
    c = controller(store, backend, poll_s=2.0, interval_s=10.0)
    start = backend.now

    def recover():
        if backend.now - start == 6.0:
            backend.down = False
    rounds = run_for(c, backend, 10.0, change=recover)
    assert backend.observations == len(rounds) == 1 and rounds[0] - start == 6.0
    assert c._outage_since is None  # the answer after the outage ended it


def test_a_backend_without_poll_is_observed_every_poll_s(store):  # noqa: F811
    backend = ScriptedBackend()  # every attribute is a recorder: its poll() answers None
    backend.add("1", 2, "RUNNING", start=1000.0, nodes=[("gpu1", 2)])
    observations = []
    real_observe = backend.observe
    backend.observe = lambda: observations.append(1) or real_observe()
    c = controller(store, backend, poll_s=2.0, interval_s=10.0)
    start = backend.now

    def finish():
        if backend.now - start == 14.0:
            backend.jobs["1"] = dataclasses.replace(backend.jobs["1"], state="COMPLETED", end_time_s=backend.now)
    rounds = run_for(c, backend, 20.0, change=finish)
    assert len(observations) == 10
    assert [t - start for t in rounds] == [0.0, 10.0, 14.0]


def test_a_clean_stop_writes_every_clock_row_that_lags(store):  # noqa: F811
    """A pending job's clock row is written every few rounds
    (accounting.PENDING_CLOCKS_EVERY_ROUNDS): when the loop stops, every active job's
    row holds what memory holds."""
    backend = PollingBackend()
    for i in range(16):
        backend.add(f"r{i}", 1, "RUNNING", start=1000.0, nodes=[(f"gpu{i % 4 + 1}", 1)])
    for i in range(16):
        backend.add(f"p{i}", 2)
    c = controller(store, backend, poll_s=2.0, interval_s=10.0)
    rounds = run_for(c, backend, 35.0)
    assert len(rounds) >= 3
    stored = store.load_jobs("default", include_finished=False)
    assert stored.keys() == c.records.keys()
    assert all(stored[job_id] == record for job_id, record in c.records.items())
    assert {r.last_observed_s for r in stored.values()} == {rounds[-1]}

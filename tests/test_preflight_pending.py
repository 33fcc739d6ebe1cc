"""The preflight when slurmctld does not answer at start (issue 28, item 6): enforce
acts on nothing (no SiteFactor, signal, requeue, pin, move) until the check has run
and passed, tries it again before every round, and stops when it refuses; shadow
runs its rounds meanwhile. Controller.run_forever on a virtual clock against the
scripted backend of tests/test_controller.py."""
import logging

from bench.scripted_slurm import VirtualTime
from controller.service.acting.backend import BackendReader, BackendUnavailable
from controller.service.ops.config import from_mapping
from controller.service.round.daemon import Controller
from controller.service.ops.preflight import Pending
from tests.test_controller import ScriptedBackend, store  # noqa: F401 - store is a fixture
from tests.test_preflight import BROKEN, GOOD, config_text

LEVERS = {"set_site_factors", "apply_bands", "pin_nodes", "signal", "requeue", "release_begin_time",
          "move_partition", "set_admin_comment", "set_mps_share", "hold", "release_hold"}


class SlurmctldLate(ScriptedBackend):
    """squeue answers; `scontrol show config` does not until ``config`` is set."""

    def __init__(self):
        super().__init__()
        self.config = None
        self.config_reads = self.observations = 0
        self.add("1", 4, "RUNNING", start=1000.0, nodes=[("gpu1", 4)])
        self.add("2", 2)  # pending: the first round that acts bands it

    def slurm_config(self):
        self.config_reads += 1
        if self.config is None:
            raise BackendUnavailable("scontrol show config exited 1: Unable to contact slurm controller")
        return self.config

    def partition_config(self):
        return "PartitionName=batch Default=YES PreemptMode=OFF State=UP Nodes=gpu[1-4]\n"

    def observe(self):
        self.observations += 1
        return super().observe()

    def levers(self) -> list[str]:
        return [call[0] for call in self.calls if call[0] in LEVERS]


def late_controller(store, backend, mode="enforce"):  # noqa: F811
    config = from_mapping({"mode": mode, "preempt_min_runtime_s": 0, "queues_gpu_s": [100.0], "poll_s": 2.0,
                           "interval_s": 10.0})
    clock = VirtualTime(backend.now)
    pending = Pending(mode, backend, config.site_factor_band, 85, logging.getLogger("tiresias.test"))
    return Controller(config, backend, store, clock=clock, preflight=pending), clock


def run_for(c, clock, backend, seconds, change=None):
    def tick():
        backend.now = clock.now_s
        if change is not None:
            change()
    c.run_forever(clock.stop_after(seconds, 1.0, tick))


def test_enforce_acts_on_nothing_until_the_preflight_ran_and_passed(store, caplog):  # noqa: F811
    backend = SlurmctldLate()
    c, clock = late_controller(store, backend)
    with caplog.at_level(logging.WARNING):
        run_for(c, clock, backend, 20.0)
    assert backend.config_reads == 10  # tried before every round (every poll_s)
    assert backend.observations == 0 and backend.levers() == [] and not c.records
    assert not [r for r in caplog.records if "preflight" in r.getMessage()]  # at_start said it; nothing more
    backend.config = config_text(GOOD, CliFilterPlugins="cli_filter/lua")
    with caplog.at_level(logging.WARNING):
        run_for(c, clock, backend, 20.0)
    assert backend.config_reads == 11 and c.preflight is None and not c.preflight_refused
    assert backend.observations > 0 and backend.levers()  # acting now: job 2's band
    assert [r.getMessage() for r in caplog.records if "preflight" in r.getMessage()] == [
        "preflight: slurmctld answers: slurm.conf settings checked (all right), enforce acts from now on"]


def test_enforce_stops_when_the_late_preflight_refuses(store, caplog):  # noqa: F811
    backend = SlurmctldLate()
    c, clock = late_controller(store, backend)

    def answer():
        if clock.now_s >= 1006.0:  # slurmctld answers after 6 s, with a wrong slurm.conf
            backend.config = BROKEN.read_text()
    with caplog.at_level(logging.ERROR):
        run_for(c, clock, backend, 60.0, change=answer)
    assert c.preflight_refused and clock.now_s < 1000.0 + 60.0  # stopped, not run out
    assert backend.observations == 0 and backend.levers() == []
    assert any("enforce mode refuses to start" in r.getMessage() for r in caplog.records)


def test_shadow_runs_its_rounds_while_the_preflight_is_pending(store):  # noqa: F811
    backend = SlurmctldLate()
    c, clock = late_controller(store, backend, mode="shadow")
    run_for(c, clock, backend, 10.0)
    assert backend.observations > 0 and "2" in c.records and c.preflight is not None
    backend.config = config_text(GOOD)
    run_for(c, clock, backend, 4.0)
    assert c.preflight is None and not c.preflight_refused


def test_tiresias_run_exits_1_when_the_late_preflight_refuses(tmp_path, monkeypatch, caplog):
    """`tiresias run --mode enforce` (no --once): slurmctld does not answer the check at
    start, then answers with a wrong slurm.conf: the loop stops before observing and
    the command exits 1, as a refusal at start does."""
    import slurm_plugin.backend
    from controller.cli.main import main

    class AnswersLate(BackendReader):
        def __init__(self, partitions=None, command_timeout_s=None):
            self.reads = 0

        def slurm_config(self):
            self.reads += 1
            if self.reads == 1:
                raise BackendUnavailable("scontrol show config exited 1: Unable to contact slurm controller")
            return BROKEN.read_text()

        def observe(self):
            raise KeyboardInterrupt("a refused controller must not observe")  # not swallowed by the loop

    monkeypatch.setattr(slurm_plugin.backend, "SlurmBackend", AnswersLate)
    with caplog.at_level(logging.WARNING):
        assert main(["run", "--mode", "enforce", "--database-url", f"sqlite:///{tmp_path}/t.db"]) == 1
    messages = [r.getMessage() for r in caplog.records]
    assert any("not checked yet" in m for m in messages)
    assert any("enforce mode refuses to start" in m for m in messages)

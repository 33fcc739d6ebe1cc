"""controller.service.round.sharing on its own: the round's MPS decisions from an observation,
each logged once; the GPU pool built from nodes' free GPUs."""
from controller.core.model import Node
from controller.service.ops.config import from_mapping
from controller.service.acting.executor import LeverExecutor
from controller.service.ops.report import RoundReport
from controller.service.round.sharing import GpuSharing, shared_gpus
from tests.test_colocation_controller import mps_job
from tests.test_controller import ScriptedBackend


def sharer(backend, **settings):
    config = from_mapping({"mode": "enforce", "gpu_sharing": True, **settings})
    return GpuSharing(config, LeverExecutor(backend, config.mode))


def test_pending_latency_job_gets_its_tier_once():
    backend = ScriptedBackend()
    mps_job(backend, "1", 50, comment="tiresias:class=latency")
    sharing = sharer(backend)
    report = RoundReport(1, backend.now, None)
    sharing.apply(backend.observe(), report)
    [(lever, job_id, tier)] = backend.calls
    assert (lever, job_id) == ("set_mps_share", "1") and tier != 50
    assert report.applied[0]["kind"] == "share" and report.applied[0]["applied"]
    sharing.apply(backend.observe(), RoundReport(2, backend.now, None))
    assert len(backend.calls) == 1  # the same decision is not made again


def test_running_job_gets_advice_only():
    backend = ScriptedBackend()
    mps_job(backend, "1", 50, state="RUNNING", nodes=["gpu1"], comment="tiresias:class=latency")
    sharing = sharer(backend)
    report = RoundReport(1, backend.now, None)
    sharing.apply(backend.observe(), report)
    assert backend.calls == []
    [advice] = report.applied
    assert advice["job_id"] == "1" and not advice["applied"] and "advice only (requeue)" in advice["detail"]
    again = RoundReport(2, backend.now, None)
    sharing.apply(backend.observe(), again)
    assert again.applied == []  # logged once


def test_pool_excludes_whole_gpu_jobs_and_unavailable_nodes():
    policy = from_mapping({"gpu_sharing": True}).colocation_policy()
    nodes = [Node("gpu1", 4, 1), Node("gpu2", 4, 4, available=False)]
    gpus = shared_gpus(nodes, [], policy)
    assert [(g.node, g.gpu) for g in gpus] == [("gpu1", 0)]

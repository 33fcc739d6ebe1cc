"""The controller on a site-shaped cluster (issue 18, items 1 and 5), through the
scripted backend: partitions and GPU types decide which running job yields, CPU-only
jobs in a shared partition keep queue 1's band instead of SiteFactor 0. Each test
failed on the old controller (it preempted across partitions and types, and left
CPU jobs at 0 under the GPU jobs' 100,000+ bands)."""
import dataclasses

from controller.core.model import Node
from tests.test_controller import ScriptedBackend, controller, store  # noqa: F401  (fixture)


def site_backend():
    backend = ScriptedBackend()
    backend.nodes = [Node("gpu1", 4, 4, partitions=("batch",), gpu_type="v100"),
                     Node("gpu2", 4, 4, partitions=("batch", "urgent"), gpu_type="a100")]
    return backend


def long_running(backend, job_id, node, partition):
    backend.add(job_id, 4, state="RUNNING", start=backend.now - 5000, nodes=((node, 4),))
    backend.jobs[job_id] = dataclasses.replace(backend.jobs[job_id], partition=partition)


def preempted(backend):
    return sorted(call[1] for call in backend.calls if call[0] == "signal")


def test_job_of_partition_urgent_preempts_only_on_its_nodes(store):
    backend = site_backend()
    long_running(backend, "1", "gpu1", "batch")
    long_running(backend, "2", "gpu2", "batch")
    c = controller(store, backend)
    c.run_round()
    backend.now += 600
    c.run_round()  # both long past queue 1
    backend.add("3", 4)
    backend.jobs["3"] = dataclasses.replace(backend.jobs["3"], partition="urgent")
    backend.now += 10
    c.run_round()
    assert preempted(backend) == ["2"]  # gpu2 is urgent's; job 1 on gpu1 is never its victim


def test_a100_job_never_preempts_a_v100_job(store):
    backend = site_backend()
    long_running(backend, "1", "gpu1", "batch")  # on the v100 node
    long_running(backend, "4", "gpu2", "batch")  # on the a100 node, outside the contract
    backend.jobs["4"] = dataclasses.replace(backend.jobs["4"], requeueable=False)
    c = controller(store, backend)
    c.run_round()
    backend.now += 600
    c.run_round()
    backend.add("3", 4)
    backend.jobs["3"] = dataclasses.replace(backend.jobs["3"], gpu_type="a100")
    backend.now += 10
    report = c.run_round()
    assert preempted(backend) == []  # job 1's v100 GPUs are no use to an a100 job
    assert not report.plan.of_kind("start")
    backend.jobs["3"] = dataclasses.replace(backend.jobs["3"], gpu_type="")
    backend.now += 10
    c.run_round()
    assert preempted(backend) == ["1"]  # control: a job of any type does take them


def test_cpu_only_pending_job_gets_queue_one_band_not_zero(store):
    backend = site_backend()
    backend.add("1", 4)
    backend.add("9", 0)  # CPU only, shared partition batch
    c = controller(store, backend)
    c.run_round()
    bands = {}
    for call in backend.calls:
        if call[0] == "set_site_factors":
            bands.update(call[1])
    band = c.config.site_factor_band
    assert bands["9"] == 2 * band == bands["1"]  # K = 2: queue 1's band, as a new GPU job's
    calls = len(backend.calls)
    backend.now += 30
    c.run_round()
    assert not [call for call in backend.calls[calls:] if call[0] == "set_site_factors"]  # sent once

"""GPU sharing applied by the controller (controller.service.round.sharing): a scripted
backend, a real SQLite store. The policy itself is controller.core.levers.colocation; the real
Slurm end-to-end test is tests/test_slurm_colocation.py."""
from dataclasses import replace

import pytest

from controller.service.acting.backend import ObservedJob
from controller.service.ops.config import from_mapping
from controller.core.model import InputError
from tests.test_controller import ScriptedBackend, controller, store  # noqa: F401  (fixture)


def mps_job(backend, job_id, mps, state="PENDING", user="alice", comment="", nodes=(), reason="Priority",
            requeueable=True):
    backend.jobs[job_id] = ObservedJob(
        job_id=job_id, user=user, partition="batch", state=state, reason=reason, gpus=0, mps=mps,
        nodes=tuple(nodes), gpus_by_node=tuple((n, 0) for n in nodes), submit_time_s=backend.now,
        start_time_s=backend.now if state == "RUNNING" else None, requeueable=requeueable, comment=comment)
    backend.now += 1


def share_calls(backend):
    return [call for call in backend.calls if call[0] == "set_mps_share"]


def shares(store, job_id):
    return [d for d in store.decisions("default", job_id=job_id) if d["kind"] == "share"]


def sharing(store, backend, **settings):
    return controller(store, backend, gpu_sharing=True, **settings)


def test_off_by_default_changes_nothing(store):
    backend = ScriptedBackend()
    mps_job(backend, "1", 30, comment="tiresias:class=latency")
    controller(store, backend).run_round()
    assert share_calls(backend) == [] and shares(store, "1") == []


def test_tiers_latency_class_and_default(store):
    backend = ScriptedBackend()
    mps_job(backend, "1", 50, comment="tiresias:class=latency")  # latency: the large tier
    mps_job(backend, "2", 50)  # asked for a tier: kept, no lever
    mps_job(backend, "3", 30)  # not a tier: default
    mps_job(backend, "4", 100, comment="x tiresias:class=latency;y")  # latency caps at 75
    c = sharing(store, backend)
    report = c.run_round()
    assert share_calls(backend) == [("set_mps_share", "1", 75), ("set_mps_share", "3", 25),
                                    ("set_mps_share", "4", 75)]
    entries = {e["job_id"]: e for e in report.applied if e["kind"] == "share"}
    assert set(entries) == {"1", "3", "4"} and all(e["applied"] for e in entries.values())
    assert "latency-critical class gets the large tier 75%" in entries["1"]["reason"]
    assert "50% -> 75%" in entries["1"]["reason"]
    assert "not a tier" in entries["3"]["reason"]
    logged = shares(store, "3")
    assert len(logged) == 1 and logged[0]["applied"] and "default tier 25%" in logged[0]["reason"]
    # Slurm now reports the new shares: nothing more to do
    for job_id, tier in (("1", 75), ("3", 25), ("4", 75)):
        backend.jobs[job_id] = replace(backend.jobs[job_id], mps=tier)
    backend.calls.clear()
    c.run_round()
    assert share_calls(backend) == []


def test_configured_tiers_are_used(store):
    backend = ScriptedBackend()
    mps_job(backend, "1", 40, comment="tiresias:class=latency")
    mps_job(backend, "2", 40)
    sharing(store, backend, mps_tiers=[20, 40, 60], mps_default_tier=20, mps_latency_tier=60).run_round()
    assert share_calls(backend) == [("set_mps_share", "1", 60)]


def test_one_user_per_gpu_and_one_latency_job_per_gpu(store):
    backend = ScriptedBackend()
    backend.nodes = [replace(backend.nodes[0], gpus_total=1, gpus_free=1)]  # one node, one GPU
    mps_job(backend, "1", 25, "RUNNING", user="bob", nodes=["gpu1"])
    mps_job(backend, "2", 30, user="alice")  # the only GPU is bob's: waits, share unchanged
    c = sharing(store, backend)
    c.run_round()
    assert share_calls(backend) == []
    waits = shares(store, "2")
    assert len(waits) == 1 and not waits[0]["applied"]
    assert "one user per GPU" in waits[0]["reason"] and "waits" in waits[0]["detail"]
    c.run_round()
    assert len(shares(store, "2")) == 1  # logged once while it waits
    # with multi-user allowed it shares, and the reason says the users are time-sliced
    backend2 = ScriptedBackend()
    backend2.nodes = backend.nodes
    for job in backend.jobs.values():
        backend2.jobs[job.job_id] = job
    c2 = sharing(store, backend2, mps_allow_multi_user=True, cluster="other")
    report = c2.run_round()
    assert share_calls(backend2) == [("set_mps_share", "2", 25)]
    assert "time-slices" in next(e for e in report.applied if e["job_id"] == "2")["reason"]


def test_second_latency_job_waits_for_a_gpu_without_one(store):
    backend = ScriptedBackend()
    backend.nodes = [replace(backend.nodes[0], gpus_total=1, gpus_free=1)]
    mps_job(backend, "1", 75, "RUNNING", comment="tiresias:class=latency", nodes=["gpu1"])
    mps_job(backend, "2", 10, comment="tiresias:class=latency")
    report = sharing(store, backend).run_round()
    assert share_calls(backend) == []
    entry = next(e for e in report.applied if e["job_id"] == "2")
    assert "latency-critical" in entry["reason"] and not entry["applied"]


def test_gpus_held_by_whole_gpu_jobs_are_not_shared(store):
    backend = ScriptedBackend()
    backend.nodes = [replace(backend.nodes[0], gpus_total=2, gpus_free=2)]
    backend.add("9", 2, "RUNNING", start=backend.now, nodes=[("gpu1", 2)])
    mps_job(backend, "1", 50)
    report = sharing(store, backend).run_round()
    entry = next(e for e in report.applied if e["job_id"] == "1" and e["kind"] == "share")
    assert "no shared GPUs" in entry["reason"]


def test_running_jobs_get_advice_only(store):
    backend = ScriptedBackend()
    mps_job(backend, "1", 50, "RUNNING", comment="tiresias:class=latency", nodes=["gpu1"])
    mps_job(backend, "2", 30, "RUNNING", nodes=["gpu2"], requeueable=False)
    mps_job(backend, "3", 25, "RUNNING", nodes=["gpu3"])  # at its tier: nothing
    c = sharing(store, backend)
    c.run_round()
    c.run_round()
    assert share_calls(backend) == []
    assert not [call for call in backend.calls if call[0] in ("requeue", "signal")]
    advice = shares(store, "1")
    assert len(advice) == 1 and not advice[0]["applied"]
    assert "checkpoint + requeue" in advice[0]["reason"] and "advice only (requeue)" in advice[0]["detail"]
    assert "not requeueable" in shares(store, "2")[0]["reason"]
    assert shares(store, "3") == []


def test_shadow_mode_logs_once_and_changes_nothing(store):
    backend = ScriptedBackend()
    mps_job(backend, "1", 50, comment="tiresias:class=latency")
    c = sharing(store, backend, mode="shadow")
    c.run_round()
    c.run_round()
    assert backend.calls == []
    # (the pending MPS job's SiteFactor band is a would-call of every shadow round)
    assert [call for call in c.executor.would if not call.startswith("set_site_factors")] == ["set_mps_share(1, 75)"]
    logged = shares(store, "1")
    assert len(logged) == 1 and not logged[0]["applied"] and "would set_mps_share" in logged[0]["detail"]


@pytest.mark.parametrize("comment", ["tiresias:class=", "tiresias:class=\x00\udcff", "tiresias:class=urgent",
                                     "tiresias:skew=abc tiresias:class=latency=1", "é" * 5000])
def test_garbage_comments_never_crash_the_round(store, comment):
    backend = ScriptedBackend()
    mps_job(backend, "1", 50, comment=comment)
    report = sharing(store, backend).run_round()
    assert report.plan is not None
    assert share_calls(backend) == []  # unknown class -> batch, 50 is a tier


def test_a_planning_error_skips_sharing_not_the_round(store, monkeypatch):
    import controller.core.levers.sharing as sharing_module  # the rule, where plan_colocation is called

    def broken(*args, **kwargs):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(sharing_module, "plan_colocation", broken)
    backend = ScriptedBackend()
    mps_job(backend, "1", 50, comment="tiresias:class=latency")
    backend.add("2", 1)
    report = sharing(store, backend).run_round()
    assert share_calls(backend) == [] and report.plan is not None


def test_multi_gpu_totals_are_left_alone(store):
    backend = ScriptedBackend()
    mps_job(backend, "1", 200, comment="tiresias:class=latency")
    sharing(store, backend).run_round()
    assert share_calls(backend) == []


@pytest.mark.parametrize("data, needle", [
    ({"mps_tiers": [0, 50]}, "1..100"),
    ({"mps_tiers": [10, 101]}, "1..100"),
    ({"mps_tiers": []}, "mps_tiers"),
    ({"mps_tiers": [10, "x"]}, "mps_tiers"),
    ({"mps_default_tier": 30}, "mps_default_tier"),
    ({"mps_latency_tier": 80}, "mps_latency_tier"),
    ({"mps_max_tenants": 0}, "mps_max_tenants"),
    ({"gpu_sharing": "yes"}, "gpu_sharing"),
])
def test_bad_sharing_config(data, needle):
    with pytest.raises(InputError, match=needle):
        from_mapping(data)


def test_packaged_config_lists_the_sharing_keys():
    from pathlib import Path

    import yaml

    data = yaml.safe_load((Path(__file__).resolve().parents[1] / "packaging" / "tiresias.yaml").read_text())
    config = from_mapping(data)
    assert config.gpu_sharing is False and config.mps_tiers == (10, 25, 50, 75, 100)
    assert (config.mps_default_tier, config.mps_latency_tier, config.mps_max_tenants) == (25, 75, 4)
    assert config.mps_allow_multi_user is False


def _holds(backend):
    return [call for call in backend.calls if call[0] in ("hold", "release_hold")]


def test_a_refused_job_is_held_released_when_a_gpu_admits_it_and_restore_releases(store):  # noqa: F811
    """mps_allow_multi_user false: a second user's job is held (main only logged it, and
    Slurm started it on bob's GPU); released once the GPU is free; recorded for restore."""
    from controller.service.acting.restore import restore

    backend = ScriptedBackend()
    backend.nodes = [replace(backend.nodes[0], gpus_total=1, gpus_free=1)]
    mps_job(backend, "1", 25, "RUNNING", user="bob", nodes=["gpu1"])
    mps_job(backend, "2", 25, user="alice")
    c = sharing(store, backend)
    report = c.run_round()
    assert _holds(backend) == [("hold", "2")]
    held = next(e for e in report.applied if e["kind"] == "hold")
    assert held["applied"] and held["job_id"] == "2" and "no GPU admits it" in held["reason"]
    assert set(store.levers("default").get("hold", {})) == {"2"}
    backend.jobs["2"] = replace(backend.jobs["2"], reason="JobHeldAdmin")
    c.run_round()
    assert _holds(backend) == [("hold", "2")], "held once"
    del backend.jobs["1"]  # bob's job ended: the GPU admits alice's
    c = sharing(store, backend)  # a restarted controller still knows the hold is its own
    c.run_round()
    assert _holds(backend) == [("hold", "2"), ("release_hold", "2")]
    assert "hold" not in store.levers("default") or not store.levers("default")["hold"]

    # a hold still in place when the admin restores is released
    mps_job(backend, "3", 25, "RUNNING", user="bob", nodes=["gpu1"])
    mps_job(backend, "4", 25, user="carol")
    c.run_round()
    assert _holds(backend)[-1] == ("hold", "4")
    backend.jobs["4"] = replace(backend.jobs["4"], reason="JobHeldAdmin")
    lines = restore(backend, store, "default").lines()
    assert _holds(backend)[-1] == ("release_hold", "4") and "job 4: hold reset: released" in lines
    assert not store.levers("default").get("hold")


def _bands(backend, job_id):
    return [call[1][job_id] for call in backend.calls if call[0] == "set_site_factors" and job_id in call[1]]


def test_a_pending_mps_job_gets_the_band_of_its_service_in_gpu_equivalents(store):  # noqa: F811
    """Left at SiteFactor 0 a pending MPS job waited below every CPU job. It gets the band
    a GPU job with its service would: a new one queue 1's (the CPU jobs' band too); one
    that ran mps:50 for 300 s attained 150 GPU-s (half a GPU), past the 100 GPU-s
    threshold: once requeued, queue 2's band and half a band for having run."""
    backend = ScriptedBackend()
    backend.add("9", 0)  # a CPU-only job
    mps_job(backend, "1", 50)
    mps_job(backend, "2", 50, "RUNNING", nodes=["gpu1"])
    c = controller(store, backend)  # gpu_sharing off: the bands do not depend on it
    c.run_round()
    band = c.config.site_factor_band
    assert _bands(backend, "1") == [2 * band] and _bands(backend, "9") == [2 * band]
    backend.now += 300
    c.run_round()
    assert c.records["2"].attained_gpu_s == pytest.approx(0.5 * 301)  # from its start, a second before
    backend.jobs["2"] = replace(backend.jobs["2"], state="PENDING", nodes=(), gpus_by_node=(), restart_count=1)
    c = controller(store, backend)  # a restarted controller: the service is in the store
    c.run_round()
    assert _bands(backend, "2") == [band + band // 2]
    backend.jobs["2"] = replace(backend.jobs["2"], state="COMPLETED", end_time_s=backend.now)
    c.run_round()
    assert "2" not in c.records  # closed as any job
    assert store.service_samples_censored("default")[0] == []  # but no sample of the GPU jobs' service


def test_a_users_own_hold_is_never_taken_over_nor_released(store):  # noqa: F811
    """sbatch -H (JobHeldUser): the controller's hold (an operator's) would turn it into
    JobHeldAdmin, its release then started the job the user held."""
    from controller.service.acting.restore import restore

    backend = ScriptedBackend()
    backend.nodes = [replace(backend.nodes[0], gpus_total=1, gpus_free=1)]
    mps_job(backend, "1", 25, "RUNNING", user="bob", nodes=["gpu1"])
    mps_job(backend, "2", 25, user="alice", reason="JobHeldUser")  # no GPU admits it: bob's
    c = sharing(store, backend)
    c.run_round()
    del backend.jobs["1"]  # bob's job ended: the GPU would admit alice's
    c.run_round()
    assert _holds(backend) == [] and not store.levers("default").get("hold")

    # a hold of the controller's that shows the user's hold now (ours released by an
    # admin, the user held the job since) is not released, after a restart neither
    mps_job(backend, "3", 25, "RUNNING", user="bob", nodes=["gpu1"])
    mps_job(backend, "4", 25, user="carol")
    c.run_round()
    assert _holds(backend) == [("hold", "4")]
    backend.jobs["4"] = replace(backend.jobs["4"], reason="JobHeldUser")
    del backend.jobs["3"]
    sharing(store, backend).run_round()
    c.run_round()
    assert _holds(backend) == [("hold", "4")]
    lines = restore(backend, store, "default").lines()
    assert _holds(backend) == [("hold", "4")]
    assert "job 4: hold kept: held by its user (JobHeldUser), not by the controller" in lines


"""``preemption: slurm`` as a strategy of the planner (issue 36): the story of a job
slurmctld preempted goes on past "left to slurmctld": the preemption decision cites the
band decisions that rank the victim below the job the plan starts, and slurmctld's
requeue, once observed, is a decision of its own citing the preemption. The controller's
own mechanism tells the same chain (preemption -> requeue)."""
from controller.cli.explain import story_lines
from controller.core.ids import kind_of
from tests.test_controller import ScriptedBackend, controller, store  # noqa: F401  (fixture)
from tests.test_slurm_preemption_mechanism import QOS_ROW

FULL = [(f"gpu{i}", 4) for i in range(1, 5)]


def story(store, job_id: str) -> tuple[list[dict], list[str]]:
    decisions = store.decisions("default", job_id=job_id, limit=1000)[::-1]
    own = {d["decision_id"] for d in decisions}
    cited = {c for d in decisions for c in (d.get("cause_id") or "").split(",") if c} - own
    causes = {d["decision_id"]: d for d in store.decisions_by_id("default", cited)}
    effects = [d for d in store.decisions_caused_by("default", own) if d["job_id"] != job_id]
    return decisions, story_lines(job_id, decisions, causes, effects)


def test_the_story_of_a_job_slurmctld_preempted_cites_the_bands_and_the_observed_requeue(store):
    backend = ScriptedBackend()
    backend.add("1", 16, "RUNNING", start=0.0, nodes=FULL)
    backend.qos_config = lambda: QOS_ROW
    c = controller(store, backend, preemption="slurm")
    c.run_round()  # job 1 attains 1000 s x 16 GPUs: queue 2
    backend.add("2", 4)
    c.run_round()
    backend.now += 30
    c.run_round()
    assert not [call for call in backend.calls if call[0] in ("signal", "requeue")]
    backend.add("1", 16, "PENDING", restarts=1)  # slurmctld requeued it for job 2
    backend.now += 30
    c.run_round()
    decisions, lines = story(store, "1")
    preempt = [d for d in decisions if d["kind"] == "preempt"][-1]
    assert "left to slurmctld" in preempt["detail"] and not preempt["applied"]
    bands = preempt["cause_id"].split(",")
    assert bands and all(kind_of(b) == "band" for b in bands), preempt
    logged_bands = {d["decision_id"]: d for d in store.decisions_by_id("default", set(bands))}
    assert set(logged_bands) == set(bands)  # the band decisions are in the log: the story resolves them
    assert {d["job_id"] for d in logged_bands.values()} == {"1", "2"}  # the victim's band and its beneficiary's
    requeue = [d for d in decisions if d["kind"] == "requeue"]
    assert len(requeue) == 1 and kind_of(requeue[0]["decision_id"]) == "slurm_requeue"
    assert requeue[0]["cause_id"] == preempt["decision_id"] and "restart count 0 -> 1" in requeue[0]["detail"]
    text = "\n".join(lines)
    assert f"caused by {preempt['decision_id']} (preempt" in text
    for band in bands:
        assert f"caused by {band} (band" in text and "not in the log" not in text
    assert "requeued by slurmctld" in text


def test_the_story_of_a_job_the_controller_preempted_tells_the_same_chain(store):
    backend = ScriptedBackend()
    backend.add("1", 16, "RUNNING", start=0.0, nodes=FULL, signal="B:USR1@0")
    c = controller(store, backend, preempt_grace_s=10)
    c.run_round()
    backend.add("2", 4)
    c.run_round()
    backend.now += 30
    c.run_round()
    decisions, lines = story(store, "1")
    preempt = [d for d in decisions if d["kind"] == "preempt" and d["applied"]]
    requeue = [d for d in decisions if d["kind"] == "requeue"]
    assert preempt and requeue and requeue[-1]["cause_id"] == preempt[0]["decision_id"]
    assert f"caused by {preempt[0]['decision_id']} (preempt" in "\n".join(lines)

"""Head to head on real Slurm (issue 30): the controller's own preemption
(``preemption: controller``) against slurmctld's (``preemption: slurm``: preempt/qos,
the declared jobs' QOS with requeue,within, the controller's bands on running jobs too).

The same workload runs once per mechanism, each on its own isolated instance shaped like
a site's (containers/slurm-cluster.sh TIRESIAS_INSTANCE_SITE=1: nodes g1-g2 gpu:v100:4,
g3-g4 gpu:a100:4; partitions batch (all four) and urgent (g3-g4); accounting in the
default instance's slurmdbd; cli_filter.lua on the submit side). The two instances differ
only in what the mechanism needs: the Slurm one has TIRESIAS_INSTANCE_SLURM_PREEMPT=1
(PreemptType=preempt/qos, PreemptMode=REQUEUE, preempt_send_user_signal, QOS tpreempt
with GraceTime=10, and cli_filter's PREEMPTABLE_QOS=tpreempt); the controller one has
Slurm's preemption off. The controller's grace is the same 10 s, and every job's
``#SBATCH --signal=B:USR1@10`` asks for it.

The workload: the first ``--jobs`` jobs of a trace (default the 60-job trace in
tests/fixtures), durations and arrivals compressed as bench/ab_slurm.py does, alternately
alice's and bob's; every third job asks for partition urgent (the a100 nodes), every
fourth asks for v100 GPUs, and every fifth says --no-requeue (undeclared: never a victim).
On 25.05+ ``--undeclared-qos tcrossprio`` puts those in a QOS whose Preempt list names
tpreempt with PreemptMode=requeue,priority, so they preempt declared jobs by priority too.

Per mechanism: average, median and p95 JCT, preemptions (runs ended by a requeue),
preemptions that started nobody (no other job started on the victim's nodes within
``--started-within-s`` of its end), GPU-seconds run beyond the jobs' own work (work
redone and grace), jobs that ended other than COMPLETED (a victim that finishes its work
after slurmctld's preemption set its end to the grace's end is TIMEOUT with exit 0: not
lost, but an afterok dependency on it fails), all from sacct's record of
every run (sacct -D). Needs root. About 2 x 8 minutes:

    .venv/bin/python bench/ab_preemption.py
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.ab_slurm import DEFAULT_TRACE, p95, workload  # noqa: E402
from bench.slurm_harness import JOB_SCRIPT, ControllerProcess, Instance, cluster_script, write_config  # noqa: E402

GRACE_S = 10  # tpreempt's GraceTime (containers/slurm-cluster.sh), the controller's preempt_grace_s
SCRIPT = JOB_SCRIPT.replace("#SBATCH --signal=B:USR1@3", f"#SBATCH --signal=B:USR1@{GRACE_S}")
ACTIVE = ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "REQUEUED", "SUSPENDED")
ENV = {"TIRESIAS_INSTANCE_SITE": "1", "TIRESIAS_INSTANCE_ACCOUNTING": "1", "TIRESIAS_INSTANCE_CLI_FILTER": "1"}


def site_jobs(jobs, undeclared_qos: str) -> list[dict]:
    """The workload's jobs with their user, partition, GPU type and contract."""
    out = []
    for k, (arrival, gpus, work) in enumerate(jobs):
        urgent, v100, undeclared = k % 3 == 2, k % 4 == 1 and k % 3 != 2, k % 5 == 4
        if urgent or v100:
            gpus = min(gpus, 8)  # two nodes of one kind
        extra = "-p urgent" if urgent else "-p batch"
        if undeclared:
            extra += " --no-requeue" + (f" --qos={undeclared_qos}" if undeclared_qos else "")
        out.append({"arrival": arrival, "gpus": gpus, "work": work, "user": "alice" if k % 2 == 0 else "bob",
                    "extra": extra, "type": "v100" if v100 else ""})
    return out


def sacct_runs(instance: Instance, ids) -> list[dict]:
    """Every run of the jobs ``ids`` (sacct -D -X): id, state, start, end, nodes, GPUs."""
    out = instance.run(["sacct", "-D", "-X", "-P", "-n", "--format=JobID,State,Start,End,NodeList,AllocTRES",
                        "-j", ",".join(ids)], timeout_s=60).stdout
    runs = []
    for line in out.splitlines():
        job_id, state, start, end, nodes, tres = (line.split("|") + [""] * 6)[:6]
        if start in ("", "Unknown", "None") or end in ("", "Unknown", "None"):
            continue
        gpus = sum(int(item.split("=")[1]) for item in tres.split(",") if item.startswith("gres/gpu="))
        runs.append({"job": job_id, "state": state.split()[0], "start": _epoch(start), "end": _epoch(end),
                     "nodes": set(expand(instance, nodes)), "gpus": gpus})
    return runs


def _epoch(text: str) -> float:
    return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


def expand(instance: Instance, hostlist: str) -> list[str]:
    if not hostlist or hostlist == "None assigned":
        return []
    return instance.run(["scontrol", "show", "hostnames", hostlist]).stdout.split()


def run_mechanism(mechanism: str, name: str, jobs: list[dict], settings: dict, timeout_s: float,
                  started_within_s: float, save_dir: Path | None = None) -> dict:
    env = dict(ENV, TIRESIAS_INSTANCE_SLURM_PREEMPT="1" if mechanism == "slurm" else "0")
    default = cluster_script("default", "up")  # its slurmdbd holds the instance's accounting and QOS
    if default.returncode != 0:
        raise SystemExit(f"the default test cluster did not come up:\n{default.stdout[-2000:]}{default.stderr[-2000:]}")
    up = cluster_script(name, "up", extra_env=env)
    if up.returncode != 0:
        raise SystemExit(f"instance {name} did not come up:\n{up.stdout[-2000:]}{up.stderr[-2000:]}")
    instance = Instance(name)
    instance.cancel_all()
    workdirs = {}
    for user in ("alice", "bob"):
        workdirs[user] = instance.workdir(user)
        (Path(workdirs[user]) / "job.sh").write_text(SCRIPT)
    with tempfile.TemporaryDirectory(prefix=f"tiresias-abp-{mechanism}-") as tmp:
        config = write_config(Path(tmp) / "tiresias.yaml", f"sqlite:///{tmp}/t.db", name, preemption=mechanism,
                              preempt_qos="tpreempt", **settings)
        proc = ControllerProcess(instance, config, Path(tmp) / "controller.log").start()
        time.sleep(2)
        started = time.time()
        submitted: dict[str, float] = {}
        pending = list(jobs)
        states: dict[str, dict] = {}
        while (pending or any(states.get(j, {}).get("job_state", "PENDING") in ACTIVE for j in submitted)) \
                and time.time() - started < timeout_s:
            while pending and time.time() - started >= pending[0]["arrival"]:
                job = pending.pop(0)
                job_id, _ = instance.submit(job["user"], job["gpus"], job["work"], f"abp{len(submitted)}",
                                            workdir=workdirs[job["user"]], extra=job["extra"] + " --time=60",
                                            gpu_type=job["type"])
                submitted[job_id] = time.time()
            try:
                states.update(instance.squeue())
            except Exception as err:  # a slow answer: look again next time
                print(f"  squeue failed: {err}", file=sys.stderr)
            time.sleep(1.0)
        alive = proc.alive()
        proc.stop()
        log_tail = (Path(tmp) / "controller.log").read_text()[-1500:] if not alive else ""
        if save_dir is not None:
            shutil.copy(Path(tmp) / "controller.log", save_dir / f"{mechanism}-controller.log")
    unfinished = [j for j in submitted if states.get(j, {}).get("job_state", "PENDING") in ACTIVE]
    instance.cancel_all()
    time.sleep(2)
    runs = sacct_runs(instance, list(submitted))
    instance.cleanup()
    cluster_script(name, "down", extra_env=env)
    if log_tail:
        print(f"  {mechanism}: the controller exited early:\n{log_tail}", file=sys.stderr)
    if save_dir is not None:  # every run and the workload, to compare with the simulator job by job
        record = {"jobs": [dict(job, id=job_id, submitted=submitted[job_id]) for job_id, job in zip(submitted, jobs)],
                  "runs": [dict(r, nodes=sorted(r["nodes"])) for r in runs], "unfinished": unfinished}
        (save_dir / f"{mechanism}.json").write_text(json.dumps(record, indent=1))
    return summarize(mechanism, jobs, submitted, runs, unfinished, started_within_s)


def summarize(mechanism, jobs, submitted, runs, unfinished, started_within_s) -> dict:
    final = {}
    for run in runs:
        if run["job"] not in final or run["end"] >= final[run["job"]]["end"]:
            final[run["job"]] = run
    jct = [final[j]["end"] - submitted[j] for j in submitted if j in final and final[j]["state"] == "COMPLETED"]
    preempted = [r for r in runs if r["state"] in ("REQUEUED", "PREEMPTED")]
    nobody = sum(1 for p in preempted
                 if not any(o["job"] != p["job"] and o["nodes"] & p["nodes"]
                            and p["end"] - 1 <= o["start"] <= p["end"] + started_within_s for o in runs))
    work = {j: w["work"] * w["gpus"] for j, w in zip(submitted, jobs)}
    run_gpu_s = sum((r["end"] - r["start"]) * r["gpus"] for r in runs)
    done_work = sum(work[j] for j in submitted if j in final and final[j]["state"] == "COMPLETED")
    not_completed = [j for j in submitted if j in final and final[j]["state"] not in ("COMPLETED", "CANCELLED")]
    return {"mechanism": mechanism, "jobs": len(submitted), "completed": len(jct), "unfinished": len(unfinished),
            "avg": statistics.mean(jct) if jct else float("nan"),
            "median": statistics.median(jct) if jct else float("nan"), "p95": p95(jct) if jct else float("nan"),
            "preemptions": len(preempted), "started_nobody": nobody,
            "extra_gpu_s": run_gpu_s - done_work, "not_completed": len(not_completed)}


def predict(jobs: list[dict], mechanism: str, settings: dict, release: str, launch_s: float = 0.25) -> dict:
    """What `tiresias simulate --like-controller CONFIG --slurm-starts --time-limit-min 60`
    says of this workload under ``mechanism`` (controller.cli.simulate.controller_costs:
    under slurm the QOS GraceTime plus slurmctld's requeue lag), on the site's node kinds
    (2 v100 nodes in batch, 2 a100 nodes in batch and urgent). Under slurm, slurmctld
    chooses the victims (controller.replay.slurm_preemption): the declared, requeue-able
    jobs are tpreempt's (``preemptable``), and the undeclared ones preempt them by
    priority when they run in tcrossprio (``--qos=tcrossprio`` in their options), else
    nobody (22.05: WITHIN only)."""
    from controller.cli.argtypes import slurm_release
    from controller.cli.simulate import controller_costs
    from controller.core.model import JobSpec
    from controller.replay.results import summarize
    from controller.replay.simulator import SimConfig, Simulation
    from controller.replay.slurmctld import SlurmQos
    from controller.service.ops.config import load

    with tempfile.TemporaryDirectory(prefix="tiresias-abp-predict-") as tmp:
        config = load(str(write_config(Path(tmp) / "t.yaml", "sqlite:///unused.db", "predict", preemption=mechanism,
                                       preempt_qos="tpreempt", **settings)))
    costs = controller_costs(config, slurm_release(release))
    specs = [JobSpec(str(k), j["gpus"], j["arrival"], float(j["work"]) + launch_s, min_nodes=-(-j["gpus"] // 4),
                     max_nodes=-(-j["gpus"] // 4), partitions=("urgent",) if "urgent" in j["extra"] else ("batch",),
                     gpu_type=j["type"], preemptable="no-requeue" not in j["extra"])
             for k, j in enumerate(jobs)]
    sim = SimConfig(nodes=4, gpus_per_node=4, node_kinds=((2, ("batch",), "v100"), (2, ("batch", "urgent"), "a100")),
                    round_interval_s=None, slurm_starts=True, time_limit_s=3600.0,
                    preempt_grace_s=costs["preempt_grace_s"], requeue_delay_s=costs["requeue_delay_s"],
                    grace_work_kept=True, requeue_ended_in_grace=costs["requeue_ended_in_grace"],
                    preempt_resume_s=0.5, engine=config.engine_config())
    qos = None
    if mechanism == "slurm":
        qos = SlurmQos(undeclared="priority" if any("--qos=tcrossprio" in j["extra"] for j in jobs) else "none")
    return summarize(Simulation(sim, slurm_preemption=qos).run(specs))


def table(results: list[dict], release: str) -> str:
    lines = [f"Slurm {release}: {results[0]['jobs']} jobs",
             f"{'mechanism':<11} {'done':>4} {'avg JCT':>8} {'median':>8} {'p95':>8} {'preempt':>7} "
             f"{'nobody':>6} {'extra GPU-s':>11} {'not COMPLETED':>13} {'predicted avg':>13}"]
    for r in results:
        predicted = r.get("predicted_avg", float("nan"))
        lines.append(f"{r['mechanism']:<11} {r['completed']:>4} {r['avg']:>8.1f} {r['median']:>8.1f} {r['p95']:>8.1f} "
                     f"{r['preemptions']:>7} {r['started_nobody']:>6} {r['extra_gpu_s']:>11.0f} {r['not_completed']:>13} "
                     f"{predicted:>8.1f} ({(predicted - r['avg']) / r['avg']:+.0%})")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--jobs", type=int, default=60)
    parser.add_argument("--scale", type=float, default=0.15, help="job duration multiplier")
    parser.add_argument("--arrival-scale", type=float, default=0.1, help="arrival time multiplier")
    parser.add_argument("--min-s", type=int, default=10)
    parser.add_argument("--max-s", type=int, default=300)
    parser.add_argument("--queues", default="150", help="queues_gpu_s, comma-separated GPU-s")
    parser.add_argument("--mechanisms", default="controller,slurm")
    parser.add_argument("--undeclared-qos", default="", help="QOS of the --no-requeue jobs (25.05+: tcrossprio)")
    parser.add_argument("--timeout-s", type=float, default=1200.0, help="per mechanism")
    parser.add_argument("--started-within-s", type=float, default=60.0)
    parser.add_argument("--save", type=Path, metavar="DIR", help="write each mechanism's workload and sacct runs "
                        "to DIR/MECHANISM.json")
    args = parser.parse_args()
    base = workload(args.trace, args.scale, args.arrival_scale, args.min_s, args.max_s, args.jobs)
    jobs = site_jobs(base, "")
    settings = {"queues_gpu_s": [float(q) for q in args.queues.split(",")], "preempt_grace_s": float(GRACE_S),
                "preempt_min_runtime_s": 2.0, "interval_s": 1.0, "poll_s": 0.5}
    release = subprocess.run(["sinfo", "--version"], capture_output=True, text=True).stdout.split()[-1]
    print(f"workload: {len(jobs)} jobs, work {min(j['work'] for j in jobs)}-{max(j['work'] for j in jobs)} s, "
          f"{sum(1 for j in jobs if 'urgent' in j['extra'])} in urgent, {sum(1 for j in jobs if j['type'])} v100, "
          f"{sum(1 for j in jobs if 'no-requeue' in j['extra'])} undeclared; Slurm {release}", flush=True)
    results = []
    for mechanism in args.mechanisms.split(","):
        name = f"ab{mechanism[:4]}{os.getpid() % 10000}"
        # the undeclared jobs' QOS only where slurmctld preempts (the controller's instance has none)
        jobs = site_jobs(base, args.undeclared_qos if mechanism == "slurm" else "")
        predicted = predict(jobs, mechanism, settings, release)
        print(f"{mechanism}: the simulator predicts avg JCT {predicted['avg_jct_s']:.1f} s", flush=True)
        if args.save:
            args.save.mkdir(parents=True, exist_ok=True)
        results.append(run_mechanism(mechanism, name, jobs, settings, args.timeout_s, args.started_within_s,
                                     args.save))
        results[-1]["predicted_avg"] = predicted["avg_jct_s"]
        print(f"{mechanism} done: avg JCT {results[-1]['avg']:.1f} s", flush=True)
    print(table(results, release))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A submit burst under Slurm's RPC rate limit: rounds and seconds until every new job
has its SiteFactor band, the RPCs per round, and whether any command outlives
command_timeout_s.

The real controller, Slurm backend and parser run against the scripted slurmctld
(bench/scripted_slurm.py) on a virtual clock: 80 GPUs (10 nodes x 8), then ``N`` new
pending GPU jobs at once, a round every interval_s (10 s), the light polls (squeue and
sinfo, one RPC each) every poll_s (2 s) between them. Every command is charged to a
simulated ``rl_enable`` bucket (30 tokens, refilled 2 a second, as slurmctld's defaults
for one user; the controller's Operator user is not exempt): one token per RPC, and
``scontrol update JobId=a,b,... X=`` is one RPC per id. A command that finds the bucket
short waits for the tokens it lacks (slurmctld answers a rate-limited RPC "back off",
the client sleeps and sends it again) plus RPC_S per RPC (slurmctld's time to update a
job, an estimate: 2 ms); it times out when that passes command_timeout_s (15 s).

Three ways: no budget (slurm_rpc_per_s 0: every band in the first round, the commands
chunked by SlurmBackend.ids_per_update), the default budget (slurm_rpc_per_s 1,
slurm_rpc_burst 20), and the budget with job_submit.lua setting the arrival band at
submit (ARRIVAL_SITE_FACTOR: the new jobs need no update at all).
Stops when every band is set; the AdminComment lines still to write then are printed
(they go at what the budget leaves after the bands, at most
admin_comment_max_per_round a round). Virtual seconds; the wall time is the
controller's rounds (minutes at 10,000 jobs).
Usage: python bench/bench_burst.py [--jobs 1000,10000]  (also: bench/bench_round.py --burst)
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.scripted_slurm import ScriptedSlurm, VirtualTime  # noqa: E402
from controller.service.ops.config import from_mapping  # noqa: E402
from controller.service.round.daemon import Controller  # noqa: E402
from controller.service.state.store import Store  # noqa: E402
from slurm_plugin.backend import SlurmBackend  # noqa: E402

BUCKET, REFILL_PER_S = 30, 2.0  # rl_enable's defaults: rl_bucket_size, rl_refill_rate per rl_refill_period 1 s
RPC_S = 0.002  # slurmctld's time for one job update RPC (estimate)
T0 = 1_000_000


class RateLimited:
    """The scripted slurmctld behind an rl_enable bucket, on the virtual clock."""

    def __init__(self, slurm: ScriptedSlurm, clock: VirtualTime):
        self.slurm, self.clock = slurm, clock
        self.tokens, self.at_s = float(BUCKET), float(T0)
        self.rpcs = 0  # charged since the last take()
        self.longest_s = 0.0  # the longest command
        self.waited_s = 0.0  # the time commands spent waiting for tokens, since the last take()

    def charge(self, rpcs: int) -> float:
        """Take ``rpcs`` tokens; returns how long the command took (its wait included)."""
        now = max(self.clock.now_s, self.at_s)
        self.tokens = min(float(BUCKET), self.tokens + (now - self.at_s) * REFILL_PER_S)
        wait = max(rpcs - self.tokens, 0.0) / REFILL_PER_S
        self.tokens = max(self.tokens - rpcs, 0.0)
        self.at_s = now + wait  # a command that waits holds the round up: the next one comes after
        took = wait + rpcs * RPC_S
        self.rpcs += rpcs
        self.waited_s += wait
        self.longest_s = max(self.longest_s, took)
        return took

    def __call__(self, argv, timeout_s, env):
        ids = 1
        if argv[:2] == ["scontrol", "update"] and argv[2].startswith("JobId="):
            ids = len(argv[2].split("=", 1)[1].split(","))
        self.charge(ids)
        return self.slurm(argv, timeout_s, env)

    def take(self) -> tuple[int, float]:
        out = (self.rpcs, self.waited_s)
        self.rpcs, self.waited_s = 0, 0.0
        return out


def burst(jobs: int, settings: dict, arrival: bool, tmp: str, max_rounds: int = 2000) -> dict:
    slurm = ScriptedSlurm(pending=0, running=0, nodes=10, gpus_per_node=8, now=T0)
    clock = VirtualTime(float(T0))
    limited = RateLimited(slurm, clock)
    config = from_mapping({"mode": "enforce", "policy": "dlas", "queues_gpu_s": [3600.0], "preempt_max_per_job": 0,
                           "usage_spool_dir": f"{tmp}/none", **settings})
    arrival_band = (len(config.queues_gpu_s) + 1) * config.site_factor_band  # job_submit.lua's ARRIVAL_SITE_FACTOR
    out = {"rounds": None, "seconds": None, "comments_waiting": None, "per_round": [], "timeouts": 0}
    with Store(f"sqlite:///{tmp}/burst-{jobs}-{len(settings)}-{arrival}.db") as store:
        controller = Controller(config, SlurmBackend(runner=limited, clock=clock,
                                                     command_timeout_s=config.command_timeout_s), store, clock=clock)
        for job_id in range(1, jobs + 1):
            slurm.submit(job_id, 8 if job_id <= 10 else 1)  # the first ten fill the GPUs: the rest wait
            if arrival:
                slurm.site_factors[job_id] = arrival_band
        for k in range(max_rounds):
            now = T0 + k * config.interval_s
            for poll in range(1, int(config.interval_s / config.poll_s)):  # the polls before this round
                clock.now_s = now - config.interval_s + poll * config.poll_s
                limited.charge(2)
            clock.now_s = float(now)
            slurm.advance(int(now))
            limited.longest_s = 0.0
            controller.run_round(controller.observe(controller.backend.poll()))
            slurm.schedule()
            rpcs, waited = limited.take()
            out["per_round"].append(rpcs)
            out["timeouts"] += limited.longest_s > config.command_timeout_s
            out.setdefault("longest_s", 0.0)
            out["longest_s"] = max(out["longest_s"], limited.longest_s)
            out.setdefault("round_wait_s", 0.0)
            out["round_wait_s"] = max(out["round_wait_s"], waited)
            if out["rounds"] is None and controller.levers.bands_waiting == 0 and all(
                    slurm.site_factors.get(j) == arrival_band for j, r in slurm.jobs.items()
                    if r["job_state"] == "PENDING"):
                out["rounds"], out["seconds"] = k + 1, now - T0
            if out["rounds"] is not None:  # (the comments then go at the budget's rate: counted, not run)
                out["comments_waiting"] = controller.admin_comments.waiting
                break
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="1000,10000")
    args = parser.parse_args()
    ways = [("no budget", {"slurm_rpc_per_s": 0.0}, False),
            ("budget 1/s, burst 20", {}, False),
            ("budget + job_submit.lua arrival band", {}, True)]
    verdicts = []
    with tempfile.TemporaryDirectory() as tmp:
        for jobs in (int(n) for n in args.jobs.split(",")):
            # the bucket's time: one token a job at what the polls (2 RPCs every poll_s) leave of the refill
            polls_per_s = 2 / from_mapping({}).poll_s
            bound = jobs / (REFILL_PER_S - polls_per_s) + from_mapping({}).interval_s
            print(f"burst of {jobs:,} new pending jobs (rl_enable bucket {BUCKET}, {REFILL_PER_S:g}/s, the polls "
                  f"{polls_per_s:g}/s: {bound:,.0f} s of tokens at one RPC a job)")
            for name, settings, arrival in ways:
                got = burst(jobs, settings, arrival, tmp)
                per = got["per_round"]
                banded = (f"every band after {got['rounds']} rounds, {got['seconds']:,.0f} s"
                          if got["rounds"] else "bands not all set")
                left = "-" if got["comments_waiting"] is None else f"{got['comments_waiting']:,}"
                print(f"  {name:38s} {banded}; AdminComments left then {left}; RPCs per round: "
                      f"first {per[0]:,}, max {max(per):,}, median {sorted(per)[len(per) // 2]:,}; longest command "
                      f"{got['longest_s']:.1f} s, longest wait in a round {got['round_wait_s']:,.0f} s; "
                      f"commands over command_timeout_s: {got['timeouts']}")
                if name != "no budget":
                    verdicts.append(got["timeouts"] == 0 and got["rounds"] is not None
                                    and got["seconds"] <= bound)
    print(f"burst done-when met (budgeted ways: no time-out, every band within the bucket's time): "
          f"{sum(verdicts)} of {len(verdicts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

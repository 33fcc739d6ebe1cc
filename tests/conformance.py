"""The site-conformance suite's table (issue 35, item 1): for each slurm.conf setting or
job option GPU sites commonly use, a pair of jobs on real Slurm, and what the controller
must do with them.

- ``yes``: a queue-1 job Slurm would start on what one victim frees: the controller
  preempts exactly one victim for it and it starts (expected ``modelled``); or, for a
  request the product deliberately does not model, it is reported unmodelled with the
  reason code (controller/service/ops/unmodelled.py) and nobody is preempted for it
  (``unmodelled:CODE``); or it is a shared-GPU job the plan never places (``not planned``:
  no preemption, no code).
- ``no``: a job Slurm would not start on what any one victim frees: no preemption.

Each case belongs to a configuration (``CONFIGS``: one isolated instance each, its
slurm.conf lines and the jobs that hold every node: a job outside the contract, kept,
and a checkpointable victim in queue 2). tests/test_conformance_<group>.py runs a
group's cases; docs/admin.md's "Site settings the controller models" is
``render_table()`` (tests/test_conformance_table.py keeps them equal). ``passed_on``
names the releases on which a case's pair passed when the table was last rendered:
only releases it was actually run on.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Config:
    """One isolated instance's configuration and the jobs that hold its nodes."""

    group: str
    prefix: str  # the instance's name prefix ("cf" and a letter)
    conf: str  # TIRESIAS_INSTANCE_CONF_EXTRA
    env: dict = field(default_factory=dict)  # further TIRESIAS_INSTANCE_* settings
    # node index (1-4) -> (sbatch options of bob's kept job or "", of his victim or "")
    stage: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Case:
    key: str
    group: str
    setting: str  # the table's name of the setting (slurm.conf line or job option)
    yes: str  # alice's job Slurm would start on what one victim frees
    no: str  # alice's job Slurm would not start
    nodes: tuple  # the node indexes the yes job may use: its victim is on one of them
    expected: str  # "modelled" | "unmodelled:CODE" | "not planned"
    does: str  # what the controller does, for the table
    pin: bool = True  # -w the (single) node of ``nodes`` on the yes job, and on the no job unless it has its own
    setup: str = ""  # "split": the yes/no job is an array whose task 0 is split off
    # release -> what is expected there instead of ``expected``: "waits:REASON" (Slurm keeps
    # the job at REASON, which the controller never preempts for)
    on: tuple = ()

    def expected_on(self, release: str) -> str:
        return dict(self.on).get(release, self.expected)

    @property
    def passed_on(self) -> tuple:
        """The releases on which both of its jobs passed, as last recorded (PASSED_FILE)."""
        return tuple(PASSED.get(self.key, ()))


ALL_RELEASES = ("22.05", "24.11", "26.05")
# Where the runner writes each passed side (tests/conformance_stage.py record_pass), and the
# committed record of the releases each case passed on, which docs/admin.md's table shows:
# `python -m tests.conformance --record` merges the first into the second and rewrites the table.
ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "build" / "conformance"
PASSED_FILE = ROOT / "tests" / "fixtures" / "conformance_passed.json"
ADMIN = ROOT / "docs" / "admin.md"
HEADING = "### Site settings the controller models"
PASSED: dict[str, list[str]] = json.loads(PASSED_FILE.read_text()) if PASSED_FILE.exists() else {}

# Per node of 8 CPUs and 16000 MB, after its victim leaves: 3 GPUs, 4 CPUs, 2500 MB free.
# (Under DefMemPerGPU, Slurm 22.05 fits a job with --mem by the larger of --mem and its
# GPUs times DefMemPerGPU: the stage's jobs say --mem-per-gpu.)
_GPU_DEFAULTS_STAGE = {k: ("--gres=gpu:1 -c 4 --mem-per-gpu=13500", "--gres=gpu:3 --cpus-per-gpu=1 --mem-per-gpu=833")
                       for k in (1, 2, 3, 4)}
# As above with 2000 MB free; node 3: 2 CPUs and 10000 MB free (MaxMemPerCPU raises CPUs).
_MEM_PER_CPU_STAGE = {1: ("--gres=gpu:1 -c 4 --mem=14000", "--gres=gpu:3 -c 3 --mem=1500"),
                      2: ("--gres=gpu:1 -c 4 --mem=14000", "--gres=gpu:3 -c 3 --mem=1500"),
                      3: ("--gres=gpu:1 -c 6 --mem=6000", "--gres=gpu:3 -c 1 --mem=1000"),
                      4: ("--gres=gpu:1 -c 4 --mem=14000", "--gres=gpu:3 -c 3 --mem=1500")}

CONFIGS = {
    "gpu_defaults": Config(
        "gpu_defaults", "cfa",
        "SelectTypeParameters=CR_Core_Memory; DefCpuPerGPU=2; DefMemPerGPU=1000", stage=_GPU_DEFAULTS_STAGE),
    "cpu_memory": Config(
        "cpu_memory", "cfb",
        "SelectTypeParameters=CR_CPU_Memory; DefCpuPerGPU=2; DefMemPerCPU=1000; MaxMemPerCPU=4000",
        stage=_MEM_PER_CPU_STAGE),
    "partitions": Config(
        "partitions", "cfc",
        "SelectTypeParameters=CR_Core_Memory; DefMemPerCPU=1000; MaxMemPerCPU=4000;"
        " PartitionName=excl Nodes={inst}g[1-4] OverSubscribe=EXCLUSIVE State=UP;"
        " PartitionName=force Nodes={inst}g[1-4] OverSubscribe=FORCE:2 State=UP;"
        " PartitionName=tier Nodes={inst}g[1-4] PriorityTier=2 State=UP;"
        " PartitionName=qlim Nodes={inst}g[1-4] QOS=gpu4user State=UP",
        env={"TIRESIAS_INSTANCE_ACCOUNTING": "1"},
        stage={**_MEM_PER_CPU_STAGE, 4: ("", "--gres=gpu:4 -c 2 --mem=2000")}),
    "site": Config(
        "site", "cfd",
        "SelectTypeParameters=CR_CPU_Memory; DefMemPerGPU=1000; NodeName={inst}g3 Features=nvl Weight=10",
        env={"TIRESIAS_INSTANCE_SITE": "1"},
        stage={1: ("--gres=gpu:v100:4", ""), 2: ("--gres=gpu:v100:1", "--gres=gpu:v100:3"),
               3: ("--gres=gpu:a100:1", "--gres=gpu:a100:3"), 4: ("--gres=gpu:a100:1", "--gres=gpu:a100:3")}),
}

CASES = [
    # -- CR_Core_Memory, DefCpuPerGPU=2, DefMemPerGPU=1000 (3 GPUs, 4 CPUs, 2500 MB free after a victim)
    Case("def_cpu_per_gpu_core", "gpu_defaults", "`DefCpuPerGPU=2` (CR_Core_Memory)",
         "--gres=gpu:2 --mem-per-gpu=500", "--gres=gpu:3 --mem-per-gpu=500", (1,), "modelled",
         "CPUs = 2 per GPU unless the job says its CPUs (Slurm's `cpus_per_tres gpu:2`)"),
    Case("def_mem_per_gpu_core", "gpu_defaults", "`DefMemPerGPU=1000` (CR_Core_Memory)",
         "--gres=gpu:2 --cpus-per-gpu=1", "--gres=gpu:3 --cpus-per-gpu=1", (2,), "modelled",
         "memory = 1000 MB per GPU unless the job says its memory"),
    Case("cpus_per_gpu", "gpu_defaults", "`--cpus-per-gpu=N`",
         "--gres=gpu:1 --cpus-per-gpu=4 --mem-per-gpu=500", "--gres=gpu:1 --cpus-per-gpu=5 --mem-per-gpu=500", (3,), "modelled",
         "CPUs = N per GPU on each node"),
    Case("mem_per_gpu", "gpu_defaults", "`--mem-per-gpu=N`",
         "--gres=gpu:2 --cpus-per-gpu=1 --mem-per-gpu=1200", "--gres=gpu:2 --cpus-per-gpu=1 --mem-per-gpu=1300",
         (4,), "modelled", "memory = N per GPU on each node"),
    Case("mem_with_def_mem_per_gpu", "gpu_defaults", "`--mem=N` under `DefMemPerGPU=1000`",
         "--gres=gpu:2 --cpus-per-gpu=1 --mem=500", "--gres=gpu:3 --cpus-per-gpu=1 --mem=500", (4,), "modelled",
         "memory = the larger of N and 1000 MB per GPU, as Slurm fits it"),
    Case("gpus_per_task", "gpu_defaults", "`--gpus-per-task=1 -n 3`",
         "-n 3 --gpus-per-task=1 -c 1 --mem-per-gpu=800", "-N 1 -n 4 --gpus-per-task=1 -c 1 --mem-per-gpu=500",
         (1,), "modelled", "GPUs = per task times tasks; without -N the tasks may spread over nodes, as Slurm"
         " spreads them (24.11 could start `-n 4` on one victim's node and another's)"),
    Case("ntasks_per_gpu", "gpu_defaults", "`--gpus=2 --ntasks-per-gpu=N`",
         "--gpus=2 --ntasks-per-gpu=2 --mem-per-gpu=1000", "--gpus=2 --ntasks-per-gpu=3 --mem-per-gpu=1000",
         (2,), "modelled", "CPUs = at least one per task (N per GPU); 24.11 and 26.05 say --ntasks-per-gpu in the"
         " record, and there it is not modelled: on 24.11 the plan preempted for the job one victim could not fit"
         " (2 of 3 runs, not yet explained)", on=(("24.11", "unmodelled:per_task"), ("26.05", "unmodelled:per_task"))),
    Case("gpus_per_socket", "gpu_defaults", "`--gpus-per-socket=1 --sockets-per-node=N`",
         "--gpus-per-socket=1 --sockets-per-node=2 --cpus-per-gpu=1 --mem-per-gpu=1000",
         "--gpus-per-socket=1 --sockets-per-node=4 --cpus-per-gpu=1 --mem-per-gpu=500", (3,), "unmodelled:per_socket",
         "reported unmodelled: how many GPUs Slurm gives differs by release (22.05 one socket's, 24.11 every"
         " socket's, 26.05 keeps it pending); never a reason to preempt"),
    # -- CR_CPU_Memory, DefCpuPerGPU=2, DefMemPerCPU=1000, MaxMemPerCPU=4000
    #    (nodes 1, 2, 4: 3 GPUs, 4 CPUs, 2000 MB free after a victim; node 3: 3 GPUs, 2 CPUs, 10000 MB)
    Case("def_cpu_per_gpu_cpu", "cpu_memory", "`DefCpuPerGPU=2` (CR_CPU_Memory)",
         "--gres=gpu:2 --mem=500", "--gres=gpu:3 --mem=500", (1,), "modelled",
         "CPUs = 2 per GPU unless the job says its CPUs"),
    Case("def_mem_per_cpu_cpu", "cpu_memory", "`DefMemPerCPU=1000` (CR_CPU_Memory)",
         "--gres=gpu:1 -c 2", "--gres=gpu:1 -c 3", (2,), "modelled",
         "memory = 1000 MB per CPU unless the job says its memory"),
    Case("max_mem_per_cpu_cpu", "cpu_memory", "`MaxMemPerCPU=4000` (CR_CPU_Memory)",
         "--gres=gpu:1 -c 1 --mem-per-cpu=7000", "--gres=gpu:1 -c 1 --mem-per-cpu=9000", (3,), "modelled",
         "CPUs as Slurm raised them (memory over the maximum per CPU takes more CPUs)"),
    # -- CR_Core_Memory, DefMemPerCPU=1000, MaxMemPerCPU=4000, partitions over every node
    #    (node 4: a 4-GPU victim alone, so a victim empties it)
    Case("def_mem_per_cpu_core", "partitions", "`DefMemPerCPU=1000` (CR_Core_Memory)",
         "--gres=gpu:1 -c 2", "--gres=gpu:1 -c 3", (1,), "modelled",
         "memory = 1000 MB per CPU unless the job says its memory"),
    Case("max_mem_per_cpu_core", "partitions", "`MaxMemPerCPU=4000` (CR_Core_Memory)",
         "--gres=gpu:1 -c 1 --mem-per-cpu=7000", "--gres=gpu:1 -c 1 --mem-per-cpu=9000", (3,), "modelled",
         "CPUs as Slurm raised them"),
    Case("oversubscribe_exclusive", "partitions", "partition `OverSubscribe=EXCLUSIVE`",
         "-p excl --gres=gpu:1 -c 1 --mem=1000", "-p excl --gres=gpu:1 -c 1 --mem=1000 -w {inst}g2", (4,),
         "modelled", "a job of the partition takes whole nodes: only a node a preemption empties"),
    Case("oversubscribe_force", "partitions", "partition `OverSubscribe=FORCE:2`",
         "-p force --gres=gpu:1 -c 2 --mem=1000", "-p force --gres=gpu:4 -c 1 --mem=1000", (2,),
         "unmodelled:oversubscribe", "reported unmodelled (Slurm shares the nodes it gives); never a reason to preempt"),
    Case("priority_tier", "partitions", "partitions of `PriorityTier=2` and 1 on the same nodes",
         "-p tier --gres=gpu:1 -c 2 --mem=1000", "-p tier --gres=gpu:4 -c 1 --mem=1000", (1,), "modelled",
         "planned as any partition (preflight warns that tiers order before SiteFactor)"),
    Case("partition_qos", "partitions", "partition `QOS=` with `MaxTRESPerUser=gres/gpu=4`",
         "-p qlim --gres=gpu:1 -c 2 --mem=1000", "-p qlim -N 2 --gres=gpu:3 -c 1 --mem=1000 -w {inst}g[1-2]", (2,),
         "modelled", "a job beyond its QOS's GPU limits (per job, node, user, account, QOS) waits, explain names"
         " the limit; no preemption for it"),
    # -- the site-shaped instance (v100 nodes 1-2, a100 nodes 3-4, shards on 4), CR_CPU_Memory,
    #    DefMemPerGPU=1000; node 1 (feature ib) full with a kept job; node 3 feature nvl, Weight=10
    Case("features", "site", "node `Features=` and `--constraint`",
         "--constraint=nvl --gres=gpu:3", "--constraint=ib --gres=gpu:1", (3,), "modelled",
         "only the nodes with the features", pin=False),
    Case("reservation", "site", "a reservation (`--reservation`)",
         "--reservation=cf_free --gres=gpu:3", "--reservation=cf_full --gres=gpu:1", (2,), "modelled",
         "only the reservation's nodes; its jobs alone use them", pin=False),
    Case("shards", "site", "`gres/shard` jobs (`--gres=shard:N`)",
         "--gres=shard:4", "--gres=shard:16", (4,), "not planned",
         "a shared-GPU job is never planned: no preemption for it (Slurm starts it)", pin=False),
    Case("het", "site", "het jobs whose components ask for different nodes",
         "--gres=gpu:1 --constraint=nvl : --gres=gpu:1", "--gres=gpu:4 --constraint=nvl : --gres=gpu:1",
         (3,), "unmodelled:het", "reported unmodelled; never a reason to preempt", pin=False),
    Case("split_array", "site", "array tasks split off their array's record",
         "--array=0-1%1 --gres=gpu:a100:3", "--array=0-1%1 --gres=gpu:a100:4", (4,), "modelled",
         "the split task planned under ARRAYID_TASKID; on 24.11 Slurm left the split task and its array at reason"
         " None (never judged) for the whole minute its nodes were full, and the controller preempts for no job"
         " Slurm has not judged", setup="split", on=(("24.11", "waits:None"),)),
    Case("node_weight", "site", "node `Weight=`",
         "--gres=gpu:a100:3", "--gres=gpu:a100:4", (3, 4), "modelled",
         "planned as any node (Slurm's choice among free nodes)", pin=False),
]

KEYS = {case.key for case in CASES}
if len(KEYS) != len(CASES):
    raise ImportError("tests/conformance.py: two cases share a key")


def cases_of(group: str) -> list[Case]:
    return [case for case in CASES if case.group == group]


def _what(expected: str) -> str:
    if expected.startswith("waits:"):
        return f"waits on Slurm (reason {expected.split(':', 1)[1]})"
    if expected == "modelled":
        return "modelled"
    if expected.startswith("unmodelled:"):
        return f"not modelled (`{expected.split(':', 1)[1]}`)"
    return "not planned"


def render_table() -> str:
    """The markdown table of docs/admin.md's "Site settings the controller models"."""
    lines = ["| Setting | Configuration | Modelled | What the controller does | Passed on |",
             "|---|---|---|---|---|"]
    for case in CASES:
        config = CONFIGS[case.group].conf.split(";")[0].split("=", 1)[-1]
        passed = ", ".join(r for r in ALL_RELEASES if r in case.passed_on) or "not yet"
        what = _what(case.expected) + "".join(f"; {release}: {_what(other)}" for release, other in case.on)
        lines.append(f"| {case.setting} | {config} | {what} | {case.does} | {passed} |")
    return "\n".join(lines) + "\n"


def record() -> dict[str, list[str]]:
    """Merge the runs' passed sides (RESULTS_DIR) into PASSED_FILE: a case passed on a
    release when both its sides did in the latest run there; releases not run keep their
    record. Then docs/admin.md's table is rewritten from it."""
    passed = {key: list(releases) for key, releases in PASSED.items()}
    for results in sorted(RESULTS_DIR.glob("passed-*-*.txt")):
        release, group = results.stem.removeprefix("passed-").split("-", 1)
        sides = {tuple(line.split()) for line in results.read_text().splitlines() if line.strip()}
        for case in cases_of(group):
            releases = set(passed.get(case.key, ())) - {release}
            if (case.key, "yes") in sides and (case.key, "no") in sides:
                releases.add(release)
            passed[case.key] = [r for r in ALL_RELEASES if r in releases]
    PASSED_FILE.write_text(json.dumps(passed, indent=1, sort_keys=True) + "\n")
    PASSED.clear()
    PASSED.update(passed)
    text = ADMIN.read_text().split("\n")
    start = text.index(HEADING)
    first = next(i for i in range(start, len(text)) if text[i].startswith("|"))
    last = next(i for i in range(first, len(text)) if not text[i].startswith("|"))
    text[first:last] = render_table().rstrip("\n").split("\n")
    ADMIN.write_text("\n".join(text))
    return passed


if __name__ == "__main__":
    # `python -m tests.conformance`: the table; `--record`: merge the last runs' results
    # (build/conformance/, cleared by the CI before the suite runs) and rewrite docs/admin.md
    if sys.argv[1:] == ["--record"]:
        for key, releases in record().items():
            print(key, ", ".join(releases) or "none")
    else:
        print(render_table(), end="")

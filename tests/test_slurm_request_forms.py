"""Every form in which Slurm writes a GPU request, as recorded on 22.05, 24.11 and 26.05
(issue 35, items 3 and 9): tests/record_request_forms.py submits one job per form
(``-J FORM``) on a site-shaped instance with CR_Core_Memory, DefCpuPerGPU=2 and
DefMemPerGPU=1000, all pending behind a job that holds every node, then lets the ones
that fit run. Each pending record must read as the GPUs, CPUs per node and memory
per node Slurm needs to start it (request_forms_memory.txt records what Slurm needs
free), or be unmodelled with its code; the ``scontrol show job -o`` line of the same
job must say the same GPUs and codes.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from slurm_plugin.job_request import asked_per_node, job_defaults
from slurm_plugin.parse_jobs import parse_scontrol_show_job, parse_squeue_json
from slurm_plugin.parse_nodes import parse_sinfo_json

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"
RELEASES = ("22.05", "24.11", "26.05")

# form -> (GPUs, GPU type, CPUs per node, MB per node, unmodelled codes), pending, on every
# release. Defaults: 2 CPUs and 1000 MB per GPU. ALL: all of a node's memory.
ALL = -1
EXPECTED = {
    "plain": (2, "", 4, 2000, ()),                 # --gres=gpu:2: cpus_per_tres "gpu:2" (the default)
    "typed": (1, "a100", 2, 1000, ()),             # --gres=gpu:a100:1
    "gpus": (3, "", 6, 3000, ()),                  # --gpus=3
    "gpus_typed": (2, "a100", 4, 2000, ()),        # --gpus=a100:2
    "per_node": (2, "", 4, 2000, ()),              # --gpus-per-node=2
    "per_task": (2, "", 4, 2000, ()),              # -n 2 --gpus-per-task=1 (24.11: gres/gpu=1)
    "per_task_typed": (2, "a100", 4, 2000, ()),    # -n 2 --gpus-per-task=a100:1
    "cpus_per_gpu": (2, "", 6, 2000, ()),          # --cpus-per-gpu=3 (gres/gpu:3, 22.05 gres:gpu:3)
    "mem_per_gpu": (2, "", 4, 4000, ()),           # --mem-per-gpu=2000
    "mem": (2, "", 4, 3000, ()),                   # --mem=3000: more than 2 x DefMemPerGPU
    "mem_small": (1, "", 2, 1000, ()),             # --mem=500: Slurm still needs DefMemPerGPU x 1 free
    # --ntasks-per-gpu=1 --gpus=2: not modelled where the record says --ntasks-per-gpu
    # (24.11+ JSON, every scontrol line; TASKS_PER_GPU_SAID), modelled where it cannot know
    "ntasks_per_gpu_count": (2, "", 4, 2000, ()),
    "held": (2, "", 4, 2000, ()),                  # held since submission: no defaults in its record
    # --gpus-per-socket=1 --sockets-per-node=2: one socket's GPUs per node at most
    "per_socket": (1, "", None, None, ("per_socket",)),
    # --ntasks-per-gpu=2 -n 4: how many GPUs is Slurm's choice
    "ntasks_per_gpu": (0, "", None, None, ("per_task",)),
}
# the forms whose --ntasks-per-gpu the record says: (release, source) -> forms
TASKS_PER_GPU_SAID = {("24.11", "squeue"): {"ntasks_per_gpu_count"}, ("26.05", "squeue"): {"ntasks_per_gpu_count"},
                      **{(r, "scontrol"): {"ntasks_per_gpu_count"} for r in RELEASES}}


def expected(form: str, release: str, source: str) -> tuple:
    gpus, gpu_type, cpus, mem, codes = EXPECTED[form]
    if form in TASKS_PER_GPU_SAID.get((release, source), ()):
        codes = ("per_task",)
    return gpus, gpu_type, cpus, mem, codes


# form -> GPUs Slurm allocated, per release, where it ran (request_forms_running.json)
ALLOCATED = {
    "22.05": {"per_socket": 2, "ntasks_per_gpu": 2, "per_task": 2, "plain": 2, "typed": 1},
    "24.11": {"per_socket": 4, "ntasks_per_gpu": 2, "per_task": 2, "plain": 2, "typed": 1},
    "26.05": {"ntasks_per_gpu": 2, "per_task": 2, "plain": 2, "typed": 1, "gpus": 3},
}


def _records(release: str, phase: str):
    errors: list = []
    jobs = parse_squeue_json((FIXTURES / release / f"request_forms_{phase}.json").read_text(), errors)
    assert errors == []
    return {job.name: job for job in jobs}


def _defaults(release: str) -> tuple[int, int]:
    config = (FIXTURES / release / "request_forms_config.txt").read_text()
    return job_defaults(re.search(r"^JobDefaults\s*=\s*(\S+)", config, re.M).group(1))


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("form", sorted(EXPECTED))
def test_a_pending_form_reads_as_what_slurm_needs(release, form):
    job = _records(release, "pending")[form]
    assert job.state == "PENDING"
    gpus, gpu_type, cpus, mem, codes = expected(form, release, "squeue")
    asked = asked_per_node(job, lambda: True, lambda partition: _defaults(release))
    assert (job.gpus, job.gpu_type, asked["unmodelled_reasons"]) == (gpus, gpu_type, codes)
    if not codes:
        assert (asked["cpus_per_node"], asked["mem_per_node_mb"]) == (cpus, mem)


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("form", sorted(EXPECTED))
def test_scontrol_says_the_same_gpus_and_codes(release, form):
    line = next(line for line in (FIXTURES / release / "request_forms_pending.txt").read_text().splitlines()
                if f" JobName={form} " in line)
    (job,) = parse_scontrol_show_job(line)
    gpus, _, _, _, codes = expected(form, release, "scontrol")
    assert (job.gpus, tuple(code for code, _ in job.request_unmodelled)) == (gpus, codes)


@pytest.mark.parametrize("release", RELEASES)
def test_a_running_job_counts_the_gpus_slurm_allocated(release):
    jobs = _records(release, "running")
    assert {form: jobs[form].gpus for form in ALLOCATED[release]} == ALLOCATED[release]
    assert all(jobs[form].state == "RUNNING" and not jobs[form].request_unmodelled for form in ALLOCATED[release])


@pytest.mark.parametrize("release", RELEASES)
def test_every_release_fills_the_defaults_into_a_tested_job_without_the_gres_prefix(release):
    """The recorded fact behind the headline bug: ``cpus_per_tres: "gpu:2"``."""
    records = {r["name"]: r for r in json.loads((FIXTURES / release / "request_forms_pending.json").read_text())["jobs"]}
    assert (records["plain"]["cpus_per_tres"], records["plain"]["memory_per_tres"]) == ("gpu:2", "gpu:1000")
    assert (records["held"]["cpus_per_tres"], records["held"]["memory_per_tres"]) == ("", "")
    job = _records(release, "pending")["plain"]
    assert (job.cpus_per_gpu, job.mem_per_gpu_mb) == (2, 1000)


@pytest.mark.parametrize("release", RELEASES)
def test_every_release_needs_both_mem_and_the_per_gpu_default_free(release):
    """What asked_per_node models, as each release did it (probe_memory)."""
    lines = (FIXTURES / release / "request_forms_memory.txt").read_text().splitlines()[1:]
    started = {re.search(r"sbatch (.*?)\s+\(", line).group(1): "RUNNING" in line for line in lines}
    assert started == {"--gres=gpu:3 --mem=1000": False, "--gres=gpu:2 --mem=1000": True,
                       "--gres=gpu:2 --mem=3000": False, "--gres=gpu:2": True, "--gres=gpu:3": False}


@pytest.mark.parametrize("text, per_gpu", [
    ("gpu:2", 2), ("gres:gpu:2", 2), ("gres/gpu:2", 2), ("gres/gpu:a100:2", 2), ("gpu:a100:3", 3),
    ("gres/gpu:a100:2,gres/gpu:v100:2", 2), ("", 0),
    ("gres/gpu:a100:2,gres/gpu:v100:3", None),  # a value per type: not one number
    ("gres/shard:2", None), ("gpu:x", None),
])
def test_every_spelling_of_a_per_gpu_field(text, per_gpu):
    record = {"job_id": 1, "job_state": "PENDING", "tres_per_node": "gres/gpu:2", "cpus_per_tres": text,
              "memory_per_tres": text}
    (job,) = parse_squeue_json({"jobs": [record]})
    assert (job.cpus_per_gpu, job.mem_per_gpu_mb) == (per_gpu, per_gpu)


def test_per_socket_gpus_are_never_more_than_slurm_allocates():
    """Records of 23.11-25.11: ``tres_per_socket gres/gpu:2`` with two sockets per node,
    2 GPUs allocated; pending it is one socket's GPUs and unmodelled."""
    record = {"job_id": 7, "job_state": ["PENDING"], "tres_per_socket": "gres/gpu:2",
              "sockets_per_node": {"set": True, "number": 2}, "node_count": {"set": True, "number": 1}}
    (job,) = parse_squeue_json({"jobs": [record]})
    assert (job.gpus, [code for code, _ in job.request_unmodelled]) == (2, ["per_socket"])
    running = {**record, "job_state": ["RUNNING"], "gres_detail": ["gpu:2(IDX:0-1)"]}
    (job,) = parse_squeue_json({"jobs": [running]})
    assert (job.gpus, job.request_unmodelled) == (2, ())


def test_job_defaults_of_config_and_partition():
    assert job_defaults("DefCpuPerGPU=2,DefMemPerGPU=1000") == (2, 1000)
    assert job_defaults("DefMemPerGPU=512") == (0, 512)
    assert job_defaults("(null)") == (0, 0)


def test_a_released_job_slurm_has_not_tested_takes_its_partitions_defaults():
    """A held job's record has no cpus_per_tres: the most of its partitions' defaults."""
    (job,) = parse_squeue_json({"jobs": [{"job_id": 3, "job_state": "PENDING", "partition": "batch,urgent",
                                          "tres_per_node": "gres:gpu:2", "cpus_per_tres": "",
                                          "memory_per_tres": "", "cpus": 1, "minimum_cpus_per_node": 1,
                                          "memory_per_node": None, "memory_per_cpu": None, "features": "",
                                          "shared": None}]})
    defaults = {"batch": (2, 1000), "urgent": (3, 500)}
    asked = asked_per_node(job, lambda: True, lambda partition: defaults.get(partition, (0, 0)))
    assert (asked["cpus_per_node"], asked["mem_per_node_mb"]) == (6, 2000)
    assert asked_per_node(job, lambda: True)["mem_per_node_mb"] == ALL  # no default known: all of it


def test_a_job_slurm_tested_with_cpus_per_task_keeps_its_own_cpus():
    """-c 1 beside DefCpuPerGPU=2: Slurm applies no CPU default (cpus_per_tres stays
    empty once it has tried the job, reason Resources) and starts it on 3 CPUs; the
    conformance suite saw the controller ask 6 and preempt nobody. An untested record
    of the same shape still takes the default (more CPUs: no useless preemption)."""
    record = {"job_id": 4, "job_state": "PENDING", "partition": "batch", "tres_per_task": "gres:gpu:1",
              "tasks": 3, "cpus_per_tres": "", "memory_per_tres": "gres:gpu:800", "cpus": 3,
              "minimum_cpus_per_node": 1, "memory_per_node": None, "memory_per_cpu": None, "features": "",
              "shared": None}
    defaults = lambda partition: (2, 1000)  # noqa: E731
    for reason, cpus in (("Resources", 3), ("Priority", 6), ("None", 6), ("JobHeldUser", 6)):
        (job,) = parse_squeue_json({"jobs": [{**record, "state_reason": reason}]})
        asked = asked_per_node(job, lambda: True, defaults)
        assert (asked["cpus_per_node"], asked["mem_per_node_mb"]) == (cpus, 2400), reason


@pytest.mark.parametrize("features, parsed", [
    (["gpu", "ib"], ("gpu", "ib")), ("ib,gpu", ("gpu", "ib")), ([], ()), ("", ()),
])
def test_node_features_as_a_list_or_a_string(features, parsed):
    """23.11+ ``scontrol show nodes --json`` / slurmrestd /nodes write features as a list."""
    node = {"name": "n1", "state": ["IDLE"], "gres": "gpu:4", "active_features": features, "features": features}
    errors: list = []
    (parsed_node,) = parse_sinfo_json({"nodes": [node]}, errors)
    assert (parsed_node.features, errors) == (parsed, [])


@pytest.mark.parametrize("release", RELEASES)
def test_the_backend_reads_the_defaults_from_config_and_partitions(release):
    """The cluster's JobDefaults from `scontrol show config`; a partition's own from
    `scontrol show partition -o` (JobDefaults=(null) there on the recording: the
    cluster's apply)."""
    from slurm_plugin.backend import SlurmBackend
    from slurm_plugin.commands import CommandResult

    recorded = (FIXTURES / release / "request_forms_config.txt").read_text()
    partitions = "\n".join(line for line in recorded.splitlines() if line.startswith("PartitionName="))
    partitions += "\nPartitionName=big Nodes=x TotalCPUs=8 JobDefaults=DefCpuPerGPU=4,DefMemPerGPU=8000 TRES=cpu=8"

    def runner(argv, timeout_s, env):
        text = {"config": recorded, "partition": partitions}[argv[2]]
        return CommandResult(0, text, "")

    backend = SlurmBackend(runner=runner)
    assert backend.gpu_defaults("batch") == (0, 0)  # nothing read yet
    backend.slurm_config()
    backend.partition_config()
    assert [backend.gpu_defaults(p) for p in ("batch", "urgent", "big")] == [(2, 1000), (2, 1000), (4, 8000)]


@pytest.mark.parametrize("field, bound", [("tres_per_node", 1), ("tres_per_job", 0)])
def test_a_per_node_gpu_request_is_planned_on_its_node_count(field, bound):
    """--gres=gpu:4 -w g1 (conformance, PriorityTier case): Slurm needs 4 GPUs on one node;
    the plan spread it as 3 on g1 and 1 on g2 and preempted two victims for a job that
    never started. --gpus=4 may span nodes: no bound."""
    from slurm_plugin.backend import SlurmBackend

    (job,) = parse_squeue_json({"jobs": [{"job_id": 5, "job_state": "PENDING", "partition": "tier",
                                          field: "gres:gpu:4", "node_count": 1, "required_nodes": "g1",
                                          "cpus": 1, "minimum_cpus_per_node": 1, "features": "", "shared": None}]})
    assert SlurmBackend()._observed_job(job, None).max_nodes == bound

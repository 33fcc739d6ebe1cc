"""``preemption: slurm`` made safe (issue 35, item 8): only whole-GPU jobs enter the
preempt QOS; the bands that must not cross keep the room preflight leaves Slurm's own
factors; the running jobs of the QOS are all banded; slurmctld's own requeues and young
runs protect a job as the controller's do; restore keeps running jobs above pending ones
while preempt/qos preempts; preflight names the default-QOS limits the swap would drop
and, before 25.05, what an undeclared job at the head of a partition does.

The cli_filter.lua cases run in a real Lua interpreter (tests/test_job_submit_lua.py's
fixture); the rest drives the real Controller against the scripted backend."""
from __future__ import annotations

from tests.test_checkpoint_grace import cli_filter_lines
from tests.test_job_submit_lua import lua  # noqa: F401  (fixture)

WHOLE_GPU_CASES = r"""
dofile(arg[1])
PREEMPTABLE_QOS = "ckpt"
PREEMPTABLE_QOS_GRACE_S = 600
local function qos(options)
  options.signal = options.signal or "B:USR1@60"
  options.requeue = options.requeue or "unset"
  return tostring(tiresias_preemptable_qos(options))
end
print(qos({}))                                   -- CPU-only
print(qos({ gres = "mps:50" }))                  -- MPS share
print(qos({ gres = "gres:mps:50" }))
print(qos({ gres = "gres/shard:2" }))            -- shards
print(qos({ gres = "gpu:0" }))
print(qos({ gpus = "0" }))
print(qos({ ["tres-per-task"] = "cpu=2" }))
print(qos({ gres = "gpu:2" }))
print(qos({ gres = "gres:gpu:a100:4" }))         -- 22.05's prefixed form
print(qos({ gres = "gres/gpu:a100:4" }))         -- 23.02+
print(qos({ gres = "gpu" }))                     -- one GPU
print(qos({ gres = "mps:50,gpu:1" }))
print(qos({ gpus = "a100:2" }))
print(qos({ ["gpus-per-node"] = "4" }))
print(qos({ ["gpus-per-task"] = "1" }))
print(qos({ ["gpus-per-socket"] = "v100:1" }))
print(qos({ ["tres-per-task"] = "cpu=2,gres/gpu=1" }))
"""


def test_cli_filter_puts_only_whole_gpu_jobs_in_the_preempt_qos(lua, tmp_path):
    """A CPU-only, MPS or shard job that declares --signal is not in the plan: in the QOS
    it could preempt a GPU job by a band that does not follow the plan (issue 35)."""
    assert cli_filter_lines(lua, tmp_path, WHOLE_GPU_CASES) == ["nil"] * 7 + ["ckpt"] * 10

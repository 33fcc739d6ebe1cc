--[[
job_submit/lua plugin for tiresias-slurm (install as /etc/slurm/job_submit.lua and
set JobSubmitPlugins=lua; see slurm.conf.fragment).

Two things happen at submission, nothing at modification:
  1. GPU jobs that did not say otherwise are made requeueable (Slurm only
     requeues jobs with Requeue=1; this works when JobRequeue=0 is the cluster
     default). An explicit "sbatch --no-requeue" is always kept: the controller
     never preempts such a job. Being requeueable is not enough to be preempted:
     the job must also declare its checkpoint signal (#SBATCH --signal=...) or
     opt in with --comment=tiresias:preemptable (see README, "Preemption contract").
  2. A skew hint in the job comment, "tiresias:skew=0.73" (share of the model in
     its largest tensor, 0..1, used for consolidated placement), is checked so
     that a typo is refused at sbatch time instead of being ignored later.
Everything else passes through unchanged.
--]]

-- Site policy -------------------------------------------------------------
-- Make every job that asks for GPUs requeueable unless it said --no-requeue.
REQUEUE_GPU_JOBS = true
-- Refuse submissions whose comment carries a malformed tiresias:skew= hint.
VALIDATE_SKEW_HINT = true
-----------------------------------------------------------------------------

local GPU_FIELDS = { "tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket", "gres" }

-- true when any GPU-bearing request field names a gpu ("gres:gpu:2", "gres/gpu:a100:1", "gpu:1")
local function requests_gpus(job_desc)
	for _, field in ipairs(GPU_FIELDS) do
		local value = job_desc[field]
		if type(value) == "string" and string.find(string.lower(value), "gpu", 1, true) then
			return true
		end
	end
	return false
end

-- nil when the comment has no hint or a valid one; otherwise the offending text.
local function bad_skew_hint(comment)
	if type(comment) ~= "string" then
		return nil
	end
	local found = nil
	-- the hint ends at whitespace, a comma or a semicolon
	for raw in string.gmatch(comment, "tiresias:skew=([^%s,;]*)") do
		found = raw
		if not string.match(raw, "^%d+%.?%d*$") and not string.match(raw, "^%.%d+$") then
			return raw
		end
		local value = tonumber(raw)
		if value == nil or value < 0 or value > 1 then
			return raw
		end
	end
	-- "tiresias:skew" with no "=value" at all is also a mistake
	if found == nil and string.find(comment, "tiresias:skew", 1, true) then
		return string.match(comment, "tiresias:skew[^%s,;]*")
	end
	return nil
end

function slurm_job_submit(job_desc, part_list, submit_uid)
	if VALIDATE_SKEW_HINT then
		local bad = bad_skew_hint(job_desc.comment)
		if bad ~= nil then
			slurm.log_user("tiresias: invalid skew hint in --comment: %q (expected tiresias:skew=<number between 0 and 1>, e.g. tiresias:skew=0.73)", bad)
			return slurm.ERROR
		end
	end
	-- requeue is 0 after an explicit --no-requeue: never overridden
	if REQUEUE_GPU_JOBS and requests_gpus(job_desc) and job_desc.requeue ~= 0 then
		job_desc.requeue = 1
	end
	return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	return slurm.SUCCESS
end

return slurm.SUCCESS

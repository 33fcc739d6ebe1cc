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
  2. Hints in the job comment, "tiresias:skew=0.73" (share of the model in
     its largest tensor, 0..1, used for consolidated placement) and
     "tiresias:class=latency|batch" (MPS tier), are checked so that a typo is
     refused at sbatch time instead of being ignored later.
Everything else passes through unchanged.
--]]

-- Site policy -------------------------------------------------------------
-- Make every job that asks for GPUs requeueable unless it said --no-requeue.
REQUEUE_GPU_JOBS = true
-- Refuse submissions whose comment carries a malformed tiresias:skew= or
-- tiresias:class= hint (the controller would ignore it).
VALIDATE_HINTS = true
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

-- The hint grammar of controller/core/hints.py, kept identical by the shared table
-- tests/fixtures/hint_cases.tsv (tests/test_hints.py runs both implementations):
-- tokens are separated by space, \t, \n, \v, \f, \r, "," or ";"; a token starting
-- with "tiresias:skew" must be "tiresias:skew=V" (V: [0-9]+, [0-9]+.[0-9]*, .[0-9]+;
-- at most 16 characters; 0 <= V <= 1); one starting with "tiresias:class" must be
-- "tiresias:class=latency" or "=batch"; each at most once.
-- Returns skew (number or nil), class (string or nil), bad (the first bad hint
-- token, or nil). When a token is bad, skew and class are nil.
local SKEW_PREFIX = "tiresias:skew"
local CLASS_PREFIX = "tiresias:class"
local CLASSES = { latency = true, batch = true }

local function starts_with(text, prefix)
	return string.sub(text, 1, #prefix) == prefix
end

local function valid_skew_text(value)
	if #value == 0 or #value > 16 then
		return false
	end
	return string.match(value, "^[0-9]+$") ~= nil or string.match(value, "^[0-9]+%.[0-9]*$") ~= nil
		or string.match(value, "^%.[0-9]+$") ~= nil
end

function tiresias_parse_hints(comment)
	if type(comment) ~= "string" then
		return nil, nil, nil
	end
	local skew, class, seen_skew, seen_class = nil, nil, false, false
	for token in string.gmatch(string.sub(comment, 1, 65536), "[^ \t\n\v\f\r,;]+") do
		if starts_with(token, SKEW_PREFIX) then
			if not starts_with(token, SKEW_PREFIX .. "=") or seen_skew then
				return nil, nil, token
			end
			local value = string.sub(token, #SKEW_PREFIX + 2)
			if not valid_skew_text(value) then
				return nil, nil, token
			end
			local number = tonumber(value)
			if number == nil or number < 0 or number > 1 then
				return nil, nil, token
			end
			skew, seen_skew = number, true
		elseif starts_with(token, CLASS_PREFIX) then
			local value = nil
			if starts_with(token, CLASS_PREFIX .. "=") then
				value = string.sub(token, #CLASS_PREFIX + 2)
			end
			if seen_class or value == nil or not CLASSES[value] then
				return nil, nil, token
			end
			class, seen_class = value, true
		end
	end
	return skew, class, nil
end

function slurm_job_submit(job_desc, part_list, submit_uid)
	if VALIDATE_HINTS then
		local _, _, bad = tiresias_parse_hints(job_desc.comment)
		if bad ~= nil then
			slurm.log_user("tiresias: invalid hint in --comment: %q (expected at most one tiresias:skew=<number between 0 and 1>, e.g. tiresias:skew=0.73, and at most one tiresias:class=latency|batch)", bad)
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

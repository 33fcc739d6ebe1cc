--[[
job_submit/lua plugin for tiresias-slurm (install as /etc/slurm/job_submit.lua and
set JobSubmitPlugins=lua; see slurm.conf.fragment).

Two things happen at submission, nothing at modification:
  1. GPU jobs that did not say otherwise are made requeueable (Slurm only
     requeues jobs with Requeue=1; this works when JobRequeue=0 is the cluster
     default). An explicit "sbatch --no-requeue" is always kept: the controller
     never preempts such a job. Being requeueable is not enough to be preempted:
     the job must also declare its checkpoint signal (#SBATCH --signal=...) or
     opt in with --comment=tiresias:preemptable (see docs/user.md, "Preemption contract").
  2. Hints in the job comment, "tiresias:skew=0.73" (share of the model in
     its largest tensor, 0..1, used for consolidated placement),
     "tiresias:class=latency|batch" (MPS tier) and "tiresias:preemptable" or
     "tiresias:preemptable=[B:]SIG" (preemption opt-in with its checkpoint
     signal), are checked so that a typo is refused at sbatch time instead of
     being ignored later.
Everything else passes through unchanged.
--]]

-- Site policy -------------------------------------------------------------
-- Make every job that asks for GPUs requeueable unless it said --no-requeue.
REQUEUE_GPU_JOBS = true
-- Refuse submissions whose comment carries a malformed tiresias:skew=,
-- tiresias:class= or tiresias:preemptable hint (the controller would ignore it).
VALIDATE_HINTS = true
-- preemption: slurm (docs/slurm-preemption.md): the same PREEMPTABLE_QOS as in
-- cli_filter.lua, read from the same tiresias-policy.conf next to this file (key
-- preemptable_qos; the site's values live there, never here). slurmctld cancels a job
-- it preempts that may not be requeued, so a --no-requeue job asking for this QOS
-- itself is refused. nil: no check.
PREEMPTABLE_QOS = nil
-- The SiteFactor a new job starts with: the band the controller gives a job that
-- arrives (queue 1, never started), so that a submit burst costs the controller no
-- `scontrol update` (one RPC per job id, under Slurm's rl_enable rate limit). It is
-- (len(queues_gpu_s) + 1) x site_factor_band of tiresias.yaml: 200000 with the
-- defaults ([3600], 100000); see docs/admin.md ("Slurm's RPC budget"). Only a job
-- submit plugin may set
-- SiteFactor at submit. With PREEMPTABLE_QOS set (preemption: slurm) only GPU jobs get
-- it: a CPU or MPS job that may preempt starts low, where the controller puts it.
-- nil: none (the controller sets every new job's band, within its RPC budget).
ARRIVAL_SITE_FACTOR = nil
-----------------------------------------------------------------------------

-- tiresias-policy.conf next to this script (slurmctld loads it from a file: its chunk
-- name is "@/etc/slurm/job_submit.lua"); else next to SLURM_CONF, else in /etc/slurm.
-- Read when slurmctld loads the script (at start, or when this file's time changes).
function tiresias_policy_path()
	local source = debug.getinfo(1, "S").source or ""
	local dir = string.match(source, "^@(.*)/[^/]*$")
	if dir == nil then
		dir = string.match(os.getenv("SLURM_CONF") or "", "^(.*)/[^/]*$") or "/etc/slurm"
	end
	return dir .. "/tiresias-policy.conf"
end

-- The preemptable_qos of that file (cli_filter.lua reads the same grammar: "key =
-- value", "#" comments, a line it cannot read skipped), or nil.
function tiresias_policy_qos(path)
	local file = io.open(path, "r")
	if file == nil then
		return nil
	end
	local qos = nil
	for line in file:lines() do
		local key, value = string.match(string.gsub(line, "#.*$", ""), "^%s*([a-z_]+)%s*=%s*(.-)%s*$")
		if key == "preemptable_qos" and string.match(value, "^[A-Za-z0-9_.-]+$") then
			qos = value
		end
	end
	file:close()
	return qos
end

PREEMPTABLE_QOS = tiresias_policy_qos(tiresias_policy_path()) or PREEMPTABLE_QOS

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
-- "tiresias:class=latency" or "=batch"; one starting with "tiresias:preemptable"
-- must be exactly that or "tiresias:preemptable=SPEC" (SPEC: the checkpoint signal
-- grammar of controller/core/checkpoint_signal.py, see checkpoint_signal_spec below);
-- each at most once.
-- Returns skew (number or nil), class (string or nil), bad (the first bad hint
-- token, or nil), preemptable (nil; "yes" for the bare opt-in; else the canonical
-- signal, "B:USR1" or "USR2"). When a token is bad, the others are all nil.
local SKEW_PREFIX = "tiresias:skew"
local CLASS_PREFIX = "tiresias:class"
local PREEMPTABLE_PREFIX = "tiresias:preemptable"
local CLASSES = { latency = true, batch = true }
-- signals a job can trap for a checkpoint (not KILL or STOP), and the numbers allowed
local SIGNAL_NAMES = { HUP = true, INT = true, QUIT = true, ABRT = true, USR1 = true, USR2 = true, TERM = true,
	ALRM = true, CONT = true, TSTP = true, URG = true, XCPU = true, XFSZ = true, VTALRM = true, PROF = true,
	WINCH = true, IO = true, PWR = true, SYS = true, TRAP = true, BUS = true, PIPE = true }
local SIGNAL_NUMBERS = { [1] = "HUP", [2] = "INT", [3] = "QUIT", [10] = "USR1", [12] = "USR2", [14] = "ALRM",
	[15] = "TERM" }

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

local function signal_name(text)
	return string.match(text, "^[A-Z][A-Z0-9]*$") ~= nil or string.match(text, "^[0-9][0-9]?$") ~= nil
end

-- "[R|B|RB|BR|..:][SIG]NAME[@1-9 digits]", ASCII, any case -> canonical "B:USR1" / "USR2", or nil
local function checkpoint_signal_spec(spec)
	if string.find(spec, "[\128-\255]") then
		return nil
	end
	local text = string.upper(spec)
	local flags, rest = string.match(text, "^([RB][RB]?):(.*)$")
	if flags == nil then
		flags, rest = "", text
	end
	local body, at = string.match(rest, "^([^@]*)(@.*)$")
	if body == nil then
		body = rest
	elseif string.match(at, "^@[0-9]+$") == nil or #at > 10 then
		return nil
	end
	local name = string.match(body, "^SIG(.*)$")
	if name == nil or not signal_name(name) then
		name = body
		if not signal_name(name) then
			return nil
		end
	end
	if string.match(name, "^[0-9]+$") then
		name = SIGNAL_NUMBERS[tonumber(name)]
	elseif not SIGNAL_NAMES[name] then
		name = nil
	end
	if name == nil then
		return nil
	end
	return (string.find(flags, "B", 1, true) and "B:" or "") .. name
end

function tiresias_parse_hints(comment)
	if type(comment) ~= "string" then
		return nil, nil, nil, nil
	end
	local skew, class, seen_skew, seen_class = nil, nil, false, false
	local preemptable = nil
	for token in string.gmatch(string.sub(comment, 1, 65536), "[^ \t\n\v\f\r,;]+") do
		if starts_with(token, SKEW_PREFIX) then
			if not starts_with(token, SKEW_PREFIX .. "=") or seen_skew then
				return nil, nil, token, nil
			end
			local value = string.sub(token, #SKEW_PREFIX + 2)
			if not valid_skew_text(value) then
				return nil, nil, token, nil
			end
			local number = tonumber(value)
			if number == nil or number < 0 or number > 1 then
				return nil, nil, token, nil
			end
			skew, seen_skew = number, true
		elseif starts_with(token, CLASS_PREFIX) then
			local value = nil
			if starts_with(token, CLASS_PREFIX .. "=") then
				value = string.sub(token, #CLASS_PREFIX + 2)
			end
			if seen_class or value == nil or not CLASSES[value] then
				return nil, nil, token, nil
			end
			class, seen_class = value, true
		elseif starts_with(token, PREEMPTABLE_PREFIX) then
			if preemptable ~= nil then
				return nil, nil, token, nil
			end
			if token == PREEMPTABLE_PREFIX then
				preemptable = "yes"
			elseif starts_with(token, PREEMPTABLE_PREFIX .. "=") then
				preemptable = checkpoint_signal_spec(string.sub(token, #PREEMPTABLE_PREFIX + 2))
				if preemptable == nil then
					return nil, nil, token, nil
				end
			else
				return nil, nil, token, nil
			end
		end
	end
	return skew, class, nil, preemptable
end

function slurm_job_submit(job_desc, part_list, submit_uid)
	if VALIDATE_HINTS then
		local _, _, bad = tiresias_parse_hints(job_desc.comment)
		if bad ~= nil then
			slurm.log_user("tiresias: invalid hint in --comment: %q (expected at most one tiresias:skew=<number between 0 and 1>, e.g. tiresias:skew=0.73, at most one tiresias:class=latency|batch, and at most one tiresias:preemptable or tiresias:preemptable=[B:]SIG[@seconds] with a signal a job can trap, e.g. tiresias:preemptable=B:USR1)", bad)
			return slurm.ERROR
		end
	end
	if PREEMPTABLE_QOS ~= nil and job_desc.qos == PREEMPTABLE_QOS and job_desc.requeue == 0 then
		slurm.log_user("tiresias: QOS %s is preempted by requeueing, which --no-requeue forbids (slurmctld would cancel the job): drop --qos or --no-requeue", PREEMPTABLE_QOS)
		return slurm.ERROR
	end
	-- requeue is 0 after an explicit --no-requeue: never overridden
	local gpus = requests_gpus(job_desc)
	if REQUEUE_GPU_JOBS and gpus and job_desc.requeue ~= 0 then
		job_desc.requeue = 1
	end
	if ARRIVAL_SITE_FACTOR ~= nil and (gpus or PREEMPTABLE_QOS == nil) then
		job_desc.site_factor = ARRIVAL_SITE_FACTOR
	end
	return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	return slurm.SUCCESS
end

return slurm.SUCCESS

--[[
cli_filter/lua plugin for tiresias-slurm (install as cli_filter.lua next to
slurm.conf on every submit host and set CliFilterPlugins=cli_filter/lua; see
slurm.conf.fragment). It runs inside sbatch, after sbatch has read its options.

Why: Slurm 22.05 shows a job's own --signal in neither `squeue --json` nor
`scontrol show job`, and the job_submit plugin's job descriptor has no warn_signal
or warn_time either (tried: nil). sbatch's options do carry it, whichever way it
was given: `sbatch --signal=B:USR1@30`, `#SBATCH --signal=...` or SBATCH_SIGNAL in
the environment. This filter records it in the job's comment as
"tiresias:preemptable=[B:]SIG[@T]" (the hint grammar of controller/core/hints.py),
which the controller reads from squeue: the job is preemptable with its own signal
and lead time. This is sbatch's final value (the command line over SBATCH_SIGNAL over
#SBATCH lines), so the controller prefers it to the #SBATCH line it can read from the
batch script. sbatch reports its default lead time, 60 s, without "@60": "B:USR1"
here means 60 s, as it does to the controller. A bare "tiresias:preemptable" in the
comment names no signal (it opts in with the job's own --signal, else the
controller's preempt_signal): it becomes "tiresias:preemptable=SPEC". A comment whose
tiresias:preemptable hint names a signal (or is malformed, which job_submit.lua
refuses) is kept as it is; a job without --signal, and every other option, passes
through unchanged.
--]]

local PREEMPTABLE_PREFIX = "tiresias:preemptable"

-- Site policy -------------------------------------------------------------
-- The site's values live in tiresias-policy.conf next to this file (shipped as
-- slurm_plugin/tiresias-policy.conf, which says each key), not here: install-files
-- lays that file out only where none is, so a reinstall keeps them and this file is
-- never edited. Without it, or for a key it does not set, the defaults below hold.
--
-- preemption: slurm (docs/slurm-preemption.md): the QOS whose jobs slurmctld preempts
-- by priority (PreemptMode requeue,within). A job that declared its checkpoint signal
-- (--signal, any of sbatch's three ways: slurmctld sends it at preemption), asks for a
-- whole GPU, may be requeued and asked for no QOS of its own is put in it; every other
-- job (CPU-only and MPS jobs too) keeps its QOS and is never preempted.
-- nil (preemption: controller; key preemptable_qos) changes no job's QOS.
PREEMPTABLE_QOS = nil
-- That QOS's GraceTime in seconds (key preemptable_qos_grace_s). slurmctld sends the
-- job's signal when it preempts and requeues the job one GraceTime later, whatever lead
-- time the job asked for (--signal's @T; sbatch's default is 60 s), so only a job whose
-- lead time fits in the grace is put in the QOS: a longer one could lose its checkpoint,
-- and keeps its QOS (never preempted by slurmctld). tiresias preflight compares it with
-- the QOS's GraceTime.
PREEMPTABLE_QOS_GRACE_S = 60
-----------------------------------------------------------------------------

-- tiresias-policy.conf next to this script: Slurm loads it from a file, so its chunk
-- name is "@/etc/slurm/cli_filter.lua"; else next to SLURM_CONF, else in /etc/slurm.
function tiresias_policy_path()
	local source = debug.getinfo(1, "S").source or ""
	local dir = string.match(source, "^@(.*)/[^/]*$")
	if dir == nil then
		dir = string.match(os.getenv("SLURM_CONF") or "", "^(.*)/[^/]*$") or "/etc/slurm"
	end
	return dir .. "/tiresias-policy.conf"
end

-- The file's settings as a table (controller/service/preflight.py policy_settings reads
-- the same grammar and names what it refuses): "key = value" lines, "#" to the end of
-- a line is a comment; a line that is not a known key with a valid value is skipped,
-- so that a typo never stops a submission. A missing file is an empty table.
function tiresias_read_policy(path)
	local policy = {}
	local file = io.open(path, "r")
	if file == nil then
		return policy
	end
	for line in file:lines() do
		local key, value = string.match(string.gsub(line, "#.*$", ""), "^%s*([a-z_]+)%s*=%s*(.-)%s*$")
		if key == "preemptable_qos" and string.match(value, "^[A-Za-z0-9_.-]+$") then
			policy.preemptable_qos = value
		elseif key == "preemptable_qos_grace_s" and string.match(value, "^[0-9]+$") then
			policy.preemptable_qos_grace_s = tonumber(value)
		end
	end
	file:close()
	return policy
end

do
	local policy = tiresias_read_policy(tiresias_policy_path())
	if policy.preemptable_qos ~= nil then
		PREEMPTABLE_QOS = policy.preemptable_qos
	end
	if policy.preemptable_qos_grace_s ~= nil then
		PREEMPTABLE_QOS_GRACE_S = policy.preemptable_qos_grace_s
	end
end

-- The signals the hint grammar takes (controller/core/checkpoint_signal.py: those a job
-- can trap for a checkpoint, and the numbers it knows): a hint with another one, e.g.
-- from --signal=KILL@30, would make job_submit.lua refuse the job, so none is written
-- and the job is just not preemptable by its --signal.
local CHECKPOINT_SIGNALS = { HUP = true, INT = true, QUIT = true, ABRT = true, USR1 = true, USR2 = true,
	TERM = true, ALRM = true, CONT = true, TSTP = true, URG = true, XCPU = true, XFSZ = true, VTALRM = true,
	PROF = true, WINCH = true, IO = true, PWR = true, SYS = true, TRAP = true, BUS = true, PIPE = true,
	["1"] = true, ["2"] = true, ["3"] = true, ["10"] = true, ["12"] = true, ["14"] = true, ["15"] = true }

-- sbatch's --signal as it reports it ("B:USR1@600", "USR2" for a 60 s lead; "0@0" when
-- none was given): the same spec the hint takes, or nil
function tiresias_signal_hint(signal)
	if type(signal) ~= "string" then
		return nil
	end
	local name = string.match(signal, "^[RB][RB]?:([A-Z0-9]+)@?[0-9]*$")
		or string.match(signal, "^([A-Z0-9]+)@?[0-9]*$")
	if name == nil or not CHECKPOINT_SIGNALS[name] then
		return nil
	end
	return PREEMPTABLE_PREFIX .. "=" .. signal
end

-- The comment with the hint added, or nil when nothing changes. Tokens are split as
-- the hint grammar splits them (space, \t, \n, \v, \f, \r, "," and ";").
function tiresias_comment_with_signal(comment, signal)
	local hint = tiresias_signal_hint(signal)
	if hint == nil then
		return nil
	end
	if type(comment) ~= "string" or comment == "" then
		return hint
	end
	local hints, bare_at = 0, nil
	for first, token in string.gmatch(comment, "()([^ \t\n\v\f\r,;]+)") do
		if string.sub(token, 1, #PREEMPTABLE_PREFIX) == PREEMPTABLE_PREFIX then
			hints = hints + 1
			if token == PREEMPTABLE_PREFIX then
				bare_at = first
			end
		end
	end
	if hints == 0 then
		return comment .. " " .. hint
	end
	if hints > 1 or bare_at == nil then
		return nil
	end
	return string.sub(comment, 1, bare_at - 1) .. hint .. string.sub(comment, bare_at + #PREEMPTABLE_PREFIX)
end

-- The lead time, in seconds, of sbatch's --signal as it reports it: "@T", else its
-- default of 60 s
function tiresias_signal_lead_s(signal)
	return tonumber(string.match(signal, "@([0-9]+)$")) or 60
end

-- The whole GPUs one item of a GRES or TRES list asks for ("gpu:2", "gres:gpu:a100:4",
-- "gres/gpu=1", "gpu" for one), 0 for any other resource ("mps:50", "shard:2", "cpu=4")
local function gpus_in_item(item)
	item = string.gsub(item, "^gres[:/]", "")
	local name = string.match(item, "^([^:=]+)")
	if name ~= "gpu" then
		return 0
	end
	local count = string.match(item, "[:=]([0-9]+)$")
	return count ~= nil and tonumber(count) or 1
end

-- Whether the options ask for at least one whole GPU, in any of sbatch's ways: --gres,
-- --gpus, --gpus-per-node, --gpus-per-task, --gpus-per-socket, --tres-per-task (23.02+).
-- Why: slurmctld preempts by priority every job of PREEMPTABLE_QOS, and only a GPU job
-- has a band that follows its attained service (a CPU-only or MPS job is not in the
-- controller's plan): such a job in the QOS could preempt a GPU job the plan keeps
-- running, or be preempted for nothing the plan wanted.
function tiresias_asks_whole_gpus(options)
	for _, key in ipairs({ "gres", "tres-per-task" }) do
		local value = options[key]
		if type(value) == "string" then
			for item in string.gmatch(value, "[^,]+") do
				if gpus_in_item(item) > 0 then
					return true
				end
			end
		end
	end
	for _, key in ipairs({ "gpus", "gpus-per-node", "gpus-per-task", "gpus-per-socket" }) do
		local value = options[key]
		-- "[type:]N" as given (unset: nil, or "0" on some releases)
		local count = type(value) == "string" and tonumber(string.match(value, "([0-9]+)$")) or nil
		if count ~= nil and count > 0 then
			return true
		end
	end
	return false
end

-- The QOS to give a job with these options, or nil (see PREEMPTABLE_QOS): sbatch reports
-- --requeue/--no-requeue as "requeue", "no-requeue" or "unset", and --qos as given. A
-- job that asks for no whole GPU (CPU-only, MPS shares, shards) keeps its QOS.
function tiresias_preemptable_qos(options)
	if PREEMPTABLE_QOS == nil or tiresias_signal_hint(options["signal"]) == nil then
		return nil
	end
	if not tiresias_asks_whole_gpus(options) then
		return nil
	end
	if tiresias_signal_lead_s(options["signal"]) > PREEMPTABLE_QOS_GRACE_S then
		return nil
	end
	if options["requeue"] == "no-requeue" then
		return nil
	end
	local qos = options["qos"]
	if type(qos) == "string" and qos ~= "" then
		return nil
	end
	return PREEMPTABLE_QOS
end

function slurm_cli_setup_defaults(options, early_pass)
	return slurm.SUCCESS
end

function slurm_cli_pre_submit(options, pack_offset)
	local comment = tiresias_comment_with_signal(options["comment"], options["signal"])
	if comment ~= nil then
		options["comment"] = comment
	end
	local qos = tiresias_preemptable_qos(options)
	if qos ~= nil then
		options["qos"] = qos
	end
	return slurm.SUCCESS
end

function slurm_cli_post_submit(offset, job_id, step_id)
	return slurm.SUCCESS
end

return slurm.SUCCESS

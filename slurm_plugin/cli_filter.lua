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
and lead time. A comment that already has a tiresias:preemptable hint is kept as it
is; a job without --signal, and every other option, passes through unchanged.
--]]

local PREEMPTABLE_PREFIX = "tiresias:preemptable"

-- sbatch's --signal as it reports it ("B:USR1@600", "USR2"; "0@0" when none was given):
-- the same spec the hint takes
function tiresias_signal_hint(signal)
	if type(signal) ~= "string" or not string.match(signal, "^[RB:]*[A-Z0-9]+@?[0-9]*$")
		or string.match(signal, "^[RB:]*0@") or string.match(signal, "^[RB:]*0$") then
		return nil
	end
	return PREEMPTABLE_PREFIX .. "=" .. signal
end

-- The comment with the hint added, or nil when nothing changes
function tiresias_comment_with_signal(comment, signal)
	local hint = tiresias_signal_hint(signal)
	if hint == nil then
		return nil
	end
	if type(comment) ~= "string" or comment == "" then
		return hint
	end
	if string.find(comment, PREEMPTABLE_PREFIX, 1, true) then
		return nil
	end
	return comment .. " " .. hint
end

function slurm_cli_setup_defaults(options, early_pass)
	return slurm.SUCCESS
end

function slurm_cli_pre_submit(options, pack_offset)
	local comment = tiresias_comment_with_signal(options["comment"], options["signal"])
	if comment ~= nil then
		options["comment"] = comment
	end
	return slurm.SUCCESS
end

function slurm_cli_post_submit(offset, job_id, step_id)
	return slurm.SUCCESS
end

return slurm.SUCCESS

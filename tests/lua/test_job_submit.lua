-- Harness for slurm_plugin/job_submit.lua: stubs the `slurm` table that
-- slurmctld provides and calls slurm_job_submit with job_desc tables.
-- Usage: lua5.3 tests/lua/test_job_submit.lua slurm_plugin/job_submit.lua
-- Prints "ok N - name" / "not ok N - name: why"; exits 1 when any case fails.

local plugin_path = arg[1] or "slurm_plugin/job_submit.lua"
local user_messages = {}

slurm = {
	SUCCESS = 0,
	ERROR = -1,
	log_user = function(fmt, ...) table.insert(user_messages, string.format(fmt, ...)) end,
	log_info = function(fmt, ...) end,
	log_debug = function(fmt, ...) end,
	log_error = function(fmt, ...) end,
}

local NO_VAL16 = 65534 -- what slurmctld passes for an unset requeue
dofile(plugin_path)

local failures, count = 0, 0
local function check(name, condition, why)
	count = count + 1
	if condition then
		print(string.format("ok %d - %s", count, name))
	else
		failures = failures + 1
		print(string.format("not ok %d - %s: %s", count, name, why or "condition false"))
	end
end

local function submit(desc)
	user_messages = {}
	return slurm_job_submit(desc, {}, 1001), user_messages
end

local function copy(t)
	local out = {}
	for k, v in pairs(t) do out[k] = v end
	return out
end

local function same(a, b)
	for k, v in pairs(a) do if b[k] ~= v then return false end end
	for k, v in pairs(b) do if a[k] ~= v then return false end end
	return true
end

-- GPU jobs become requeueable, whichever field carries the request.
for _, case in ipairs({
	{ field = "tres_per_node", value = "gres:gpu:2" },
	{ field = "tres_per_job", value = "gres:gpu:4" },
	{ field = "tres_per_task", value = "gres/gpu:a100:1" },
	{ field = "gres", value = "gpu:1" },
}) do
	local desc = { requeue = NO_VAL16, comment = nil }
	desc[case.field] = case.value
	local rc = submit(desc)
	check("GPU job via " .. case.field .. " is accepted", rc == slurm.SUCCESS, "rc=" .. tostring(rc))
	check("GPU job via " .. case.field .. " gets requeue=1", desc.requeue == 1, "requeue=" .. tostring(desc.requeue))
end

-- An explicit --no-requeue is always kept: such a job is never preempted.
do
	local desc = { tres_per_node = "gres:gpu:1", requeue = 0 }
	submit(desc)
	check("--no-requeue GPU job keeps requeue=0", desc.requeue == 0, "requeue=" .. tostring(desc.requeue))
	REQUEUE_GPU_JOBS = false
	desc = { tres_per_node = "gres:gpu:1", requeue = NO_VAL16 }
	submit(desc)
	check("REQUEUE_GPU_JOBS=false leaves requeue alone", desc.requeue == NO_VAL16, "requeue=" .. tostring(desc.requeue))
	REQUEUE_GPU_JOBS = true
end

-- preemption: slurm: a --no-requeue job in the preemptable QOS would be cancelled when
-- slurmctld preempts it: refused; a requeueable one, and any job without the policy, pass.
do
	PREEMPTABLE_QOS = "ckpt"
	local rc = submit({ tres_per_node = "gres:gpu:1", requeue = 0, qos = "ckpt" })
	check("--no-requeue job in the preemptable QOS is refused", rc == slurm.ERROR, "rc=" .. tostring(rc))
	rc = submit({ tres_per_node = "gres:gpu:1", requeue = NO_VAL16, qos = "ckpt" })
	check("requeueable job in the preemptable QOS passes", rc == slurm.SUCCESS, "rc=" .. tostring(rc))
	rc = submit({ tres_per_node = "gres:gpu:1", requeue = 0, qos = "long" })
	check("--no-requeue job in another QOS passes", rc == slurm.SUCCESS, "rc=" .. tostring(rc))
	PREEMPTABLE_QOS = nil
	rc = submit({ tres_per_node = "gres:gpu:1", requeue = 0, qos = "ckpt" })
	check("no PREEMPTABLE_QOS: no QOS check", rc == slurm.SUCCESS, "rc=" .. tostring(rc))
end

-- A non-GPU job passes through unchanged (MPS alone is not a GPU request here).
do
	local desc = { tres_per_node = "gres:mps:50", requeue = NO_VAL16, comment = "hello", partition = "batch" }
	local before = copy(desc)
	local rc, msgs = submit(desc)
	check("non-GPU job accepted", rc == slurm.SUCCESS, "rc=" .. tostring(rc))
	check("non-GPU job unchanged", same(before, desc), "job_desc was modified")
	check("non-GPU job: no user message", #msgs == 0, msgs[1])
end

-- Skew hints.
for _, good in ipairs({ "tiresias:skew=0.73", "tiresias:skew=0", "tiresias:skew=1", "tiresias:skew=.5",
		"run 7 tiresias:skew=0.10 resnet", "tiresias:skew=0.7;other" }) do
	local desc = { tres_per_node = "gres:gpu:1", requeue = NO_VAL16, comment = good }
	local rc = submit(desc)
	check("valid skew accepted: " .. good, rc == slurm.SUCCESS, "rc=" .. tostring(rc))
	check("valid skew still sets requeue: " .. good, desc.requeue == 1)
end
for _, case in ipairs({
	{ comment = "tiresias:skew=1.5", bad = "tiresias:skew=1.5" },
	{ comment = "tiresias:skew=abc", bad = "tiresias:skew=abc" },
	{ comment = "tiresias:skew=-0.2", bad = "tiresias:skew=-0.2" },
	{ comment = "tiresias:skew=", bad = "tiresias:skew=" },
	{ comment = "tiresias:skew=0.5e1", bad = "tiresias:skew=0.5e1" },
	{ comment = "tiresias:skew 0.5", bad = "tiresias:skew" },
	{ comment = "tiresias:skew=0.1 tiresias:skew=0.2", bad = "tiresias:skew=0.2" },
	{ comment = "tiresias:class=fast", bad = "tiresias:class=fast" },
}) do
	local desc = { tres_per_node = "gres:gpu:1", requeue = NO_VAL16, comment = case.comment }
	local rc, msgs = submit(desc)
	check("bad skew rejected: " .. case.comment, rc == slurm.ERROR, "rc=" .. tostring(rc))
	local msg = msgs[1] or ""
	check("bad skew message names the value: " .. case.comment,
		#msgs == 1 and string.find(msg, '"' .. case.bad .. '"', 1, true) ~= nil and string.find(msg, "0 and 1", 1, true) ~= nil,
		"message=" .. msg)
end

-- The preemption opt-in: accepted when it names a signal a job can trap, refused otherwise,
-- with the same message as the other hints (it names the bad token and the grammar).
for _, good in ipairs({ "tiresias:preemptable", "x tiresias:preemptable=USR2 y", "tiresias:preemptable=B:USR1@90",
		"tiresias:preemptable,tiresias:skew=0.5" }) do
	local desc = { tres_per_node = "gres:gpu:1", requeue = NO_VAL16, comment = good }
	local rc, msgs = submit(desc)
	check("valid preemptable accepted: " .. good, rc == slurm.SUCCESS and #msgs == 0, "rc=" .. tostring(rc))
	check("valid preemptable still sets requeue: " .. good, desc.requeue == 1)
end
for _, case in ipairs({
	{ comment = "tiresias:preemptable=KILL", bad = "tiresias:preemptable=KILL" },
	{ comment = "tiresias:preemptable=", bad = "tiresias:preemptable=" },
	{ comment = "tiresias:preemptables", bad = "tiresias:preemptables" },
	{ comment = "tiresias:preemptable=USR1@", bad = "tiresias:preemptable=USR1@" },
	{ comment = "tiresias:preemptable tiresias:preemptable", bad = "tiresias:preemptable" },
}) do
	local desc = { tres_per_node = "gres:gpu:1", requeue = 0, comment = case.comment }
	local rc, msgs = submit(desc)
	check("bad preemptable rejected: " .. case.comment, rc == slurm.ERROR, "rc=" .. tostring(rc))
	local msg = msgs[1] or ""
	check("bad preemptable message names the value: " .. case.comment,
		#msgs == 1 and string.find(msg, '"' .. case.bad .. '"', 1, true) ~= nil
			and string.find(msg, "tiresias:preemptable=[B:]SIG", 1, true) ~= nil, "message=" .. msg)
	check("rejected job keeps --no-requeue: " .. case.comment, desc.requeue == 0)
end

-- ARRIVAL_SITE_FACTOR: a new job starts in the band the controller gives an arrival
-- (no update for a burst); under PREEMPTABLE_QOS only GPU jobs (a CPU job that may
-- preempt starts low, where the controller puts it).
do
	local desc = { tres_per_node = "gres:gpu:1", requeue = NO_VAL16 }
	submit(desc)
	check("no ARRIVAL_SITE_FACTOR: site_factor left alone", desc.site_factor == nil)
	ARRIVAL_SITE_FACTOR = 200000
	desc = { tres_per_node = "gres:gpu:1", requeue = NO_VAL16 }
	submit(desc)
	check("ARRIVAL_SITE_FACTOR set on a GPU job", desc.site_factor == 200000, tostring(desc.site_factor))
	desc = { min_cpus = 4 }
	submit(desc)
	check("ARRIVAL_SITE_FACTOR set on a CPU job", desc.site_factor == 200000, tostring(desc.site_factor))
	PREEMPTABLE_QOS = "ckpt"
	desc = { min_cpus = 4 }
	submit(desc)
	check("PREEMPTABLE_QOS: no ARRIVAL_SITE_FACTOR on a CPU job", desc.site_factor == nil)
	desc = { tres_per_node = "gres:gpu:1", requeue = NO_VAL16 }
	submit(desc)
	check("PREEMPTABLE_QOS: ARRIVAL_SITE_FACTOR on a GPU job", desc.site_factor == 200000)
	PREEMPTABLE_QOS = nil
	ARRIVAL_SITE_FACTOR = nil
end

-- slurm_job_modify never blocks an update.
check("slurm_job_modify returns SUCCESS", slurm_job_modify({ comment = "tiresias:skew=9" }, {}, {}, 0) == slurm.SUCCESS)

print(string.format("%d/%d passed", count - failures, count))
os.exit(failures == 0 and 0 or 1)

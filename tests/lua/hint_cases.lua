-- Prints what job_submit.lua's hint parser answers for each case of the shared table.
-- Usage: lua5.3 tests/lua/hint_cases.lua slurm_plugin/job_submit.lua tests/fixtures/hint_cases.tsv
-- One output line per case, in table order:
-- "<line number>\t<skew or ->\t<class or ->\t<bad or ->\t<preemptable: -, yes or the signal>"
-- (values escaped like the table); tests/test_hints.py compares it with the table and Python.
slurm = { SUCCESS = 0, ERROR = -1, log_user = function() end, log_info = function() end,
	log_debug = function() end, log_error = function() end }
dofile(arg[1])

local ESC = { t = "\t", n = "\n", r = "\r", v = "\v", f = "\f", ["\\"] = "\\" }
local function unescape(text)
	return (string.gsub(text, "\\(.)", function(c) return ESC[c] or ("\\" .. c) end))
end
local function escape(text)
	return (string.gsub(text, "[\\\t\n\r\v\f]", function(c)
		for k, v in pairs(ESC) do if v == c then return "\\" .. k end end
	end))
end

local number = 0
for line in io.lines(arg[2]) do
	number = number + 1
	if string.sub(line, 1, 1) ~= "#" and line ~= "" then
		local comment = string.match(line, "^([^\t]*)\t")
		local skew, class, bad, preemptable = tiresias_parse_hints(unescape(comment))
		print(string.format("%d\t%s\t%s\t%s\t%s", number, skew == nil and "-" or string.format("%.17g", skew),
			class or "-", bad == nil and "-" or escape(bad), preemptable or "-"))
	end
end

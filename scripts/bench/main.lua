-- The benchmark suite of the host, run as a script directory:
--   host run scripts/bench -- [NAME...] [--suite] [--quick]
-- Each benchmark prints one line: name, parameters, seconds, per-op figure,
-- peak RSS; each checks its result so a wrong run cannot look fast. Lines
-- for scripts follow it: RESULT NAME SECONDS, PER_OP NAME FIGURE, and
-- FIGURE NAME KEY VALUE for a benchmark's other figures.
local benches = require("benches")

-- A "VmRSS"-style field of /proc/self/status, in KB (0 where there is none).
local function status_kb(field)
  local f = io.open("/proc/self/status")
  if not f then return 0 end
  local s = f:read("*a"); f:close()
  return tonumber(s:match(field .. ":%s*(%d+)")) or 0
end

local function rss_kb() return status_kb("VmRSS") end
local function peak_kb() return status_kb("VmHWM") end

local function main(...)
  local quick, names = false, {}
  for _, a in ipairs({ ... }) do
    if a == "--quick" then quick = true
    elseif a == "--suite" then for _, s in ipairs(benches.suite) do names[#names + 1] = s end
    else names[#names + 1] = a end
  end
  if #names == 0 then names = benches.order end
  for _, name in ipairs(names) do
    local b = benches[name]
    if not b then error("unknown benchmark '" .. name .. "' (have: " .. table.concat(benches.order, ", ") .. ")") end
    local r = b(quick, { rss_kb = rss_kb })
    print(string.format("%-14s %-28s %8.3f s  %10.3f %-12s peak RSS %d MB",
      name, r.params, r.seconds, r.per_op, r.unit, math.floor(peak_kb() / 1024)))
    print(string.format("RESULT %s %.6f", name, r.seconds))  -- for tests/bench/compare
    print(string.format("PER_OP %s %.6f", name, r.per_op))     -- for tests/bench/shared.sh
    for _, f in ipairs(r.figures or {}) do print(string.format("FIGURE %s %s %.6f", name, f[1], f[2])) end
  end
  return true
end

return { main = main }

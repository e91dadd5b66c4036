-- The benchmark suite of the host, run as a script directory:
--   host run scripts/bench -- [NAME...] [--suite] [--quick]
-- Each benchmark prints one line: name, parameters, seconds, per-op figure,
-- peak RSS; each checks its result so a wrong run cannot look fast.
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
  end
  return true
end

return { main = main }

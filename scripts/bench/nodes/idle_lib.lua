-- idle_memory_lib: has used the base library (tostring, ipairs) and keeps
-- a small table, then waits as nodes.idle does.
local idle = require("nodes.idle")
local M = {}

function M.main()
  local names = {}
  for i = 1, 10 do names[i] = tostring(i) end
  local count = 0
  for _ in ipairs(names) do count = count + 1 end
  assert(count == 10)
  return idle.main()
end

return M

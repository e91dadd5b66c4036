-- idle_memory_lib: has used the base library (tostring, ipairs) and keeps
-- a small table, then waits in receive until stopped; answers "heap" with
-- its memory.
local M = {}

function M.main()
  local names = {}
  for i = 1, 10 do names[i] = tostring(i) end
  local count = 0
  for _ in ipairs(names) do count = count + 1 end
  assert(count == 10)
  while true do
    local m = process.receive()
    if m.topic == "stop" then return end
    if m.topic == "heap" then process.send(m.from, "heap", process.memory()) end
  end
end

return M

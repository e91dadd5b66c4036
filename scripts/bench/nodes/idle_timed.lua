-- idle_memory_timed: waits in process.receive with a timeout (an hour),
-- as a process with a deadline does, until stopped; answers "heap" as
-- nodes.idle does.
local M = {}

function M.main()
  while true do
    local m = process.receive(3600)
    if not m or m.topic == "stop" then return end
    if m.topic == "heap" then process.send(m.from, "heap", process.memory()) end
  end
end

return M

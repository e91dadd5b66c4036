-- idle_memory: waits in receive until stopped; answers "heap" with its memory.
local M = {}

function M.main()
  while true do
    local m = process.receive()
    if m.topic == "stop" then return end
    if m.topic == "heap" then process.send(m.from, "heap", process.memory()) end
  end
end

return M

-- threadring's node, written the way much Lua code is: process.receive and
-- process.send copied into locals at the start. That copy is the C function
-- process.receive is before a process's 16th message (bindings/inbox.lua's
-- form replaces it in the process table later), so this ring measures that
-- form's hand-over (BENCHMARKS.md, change 134).
local M = {}

function M.main(report_to)
  local receive, send = process.receive, process.send
  local next_pid
  while true do
    local m = receive()
    if m.topic == "next" then next_pid = m.payload
    elseif m.topic == "token" then
      if m.payload == 0 then send(report_to, "done", 0)
      else send(next_pid, "token", m.payload - 1) end
    elseif m.topic == "stop" then return end
  end
end

return M

-- threadring: a node that passes the token to the next one.
local M = {}

function M.main(report_to)
  local next_pid
  while true do
    local m = process.receive()
    if m.topic == "next" then next_pid = m.payload
    elseif m.topic == "token" then
      if m.payload == 0 then process.send(report_to, "done", 0)
      else process.send(next_pid, "token", m.payload - 1) end
    elseif m.topic == "stop" then return end
  end
end

return M

-- threadring's node with the token's topic given at spawn (ring_long_topic
-- passes one of 17 bytes, longer than the strings a process keeps for
-- table keys and values: BENCHMARKS.md, change 135).
local M = {}

function M.main(report_to, topic)
  local next_pid
  while true do
    local m = process.receive()
    if m.topic == "next" then next_pid = m.payload
    elseif m.topic == topic then
      if m.payload == 0 then process.send(report_to, "done", 0)
      else process.send(next_pid, topic, m.payload - 1) end
    elseif m.topic == "stop" then return end
  end
end

return M

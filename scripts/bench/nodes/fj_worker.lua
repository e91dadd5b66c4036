-- fj_throughput: an actor that does a little arithmetic per message.
local M = {}

function M.main(report_to, n)
  local x = 0
  for _ = 1, n do
    process.receive()
    for k = 1, 10 do x = x + math.sqrt(k) * math.sin(k) end  -- the "small compute"
  end
  process.send(report_to, "done", n)
  return x
end

return M

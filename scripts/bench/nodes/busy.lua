-- queue_memory: tells its parent it is busy, stays in one long step for
-- `seconds` (so what arrives meanwhile waits in its queue), then counts the
-- messages and answers "end" with the count.
local M = {}

function M.main(parent, seconds)
  process.send(parent, "busy", nil)
  local t0 = time.now()
  while time.now() - t0 < seconds do end
  local n = 0
  while true do
    local m = process.receive()
    if m.topic == "end" then
      process.send(m.from, "count", n)
      return
    end
    n = n + 1
  end
end

return M

-- pingpong: answers each message with a "pong" carrying its payload.
local M = {}

function M.main()
  local inbox = process.inbox()
  while true do
    local m = inbox:receive()
    if m.topic == "stop" then return end
    process.send(m.from, "pong", m.payload)
  end
end

return M

-- big: pings random peers and answers their pings. Pings from faster peers
-- may come before the peer list: they are answered all the same (the pong
-- goes to the sender), and this one starts pinging once the list comes.
local M = {}

function M.main(report_to, n, index)
  local me = process.pid()
  local peers
  local sent, rng = 0, index * 7919
  local function ping()
    rng = (rng * 1103515245 + 12345) % 2147483648
    local j = rng % #peers + 1
    if peers[j] == me then j = j % #peers + 1 end
    process.send(peers[j], "ping", nil)
    sent = sent + 1
  end
  while true do
    local m = process.receive()
    if m.topic == "ping" then process.send(m.from, "pong", nil)
    elseif m.topic == "pong" then
      if sent < n then ping() else process.send(report_to, "done", sent) end
    elseif m.topic == "peers" then peers = m.payload; ping()
    elseif m.topic == "stop" then return end
  end
end

return M

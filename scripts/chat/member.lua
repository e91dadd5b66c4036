-- One connection's process: asks the name, joins the room, then relays
-- the client's lines to the room and the room's lines to the client. It
-- ends when the client goes (its socket closes with it).
local function main(conn)
  conn:send("name? ")
  local name = conn:receive()
  if not name or name == "" then return end
  name = name:sub(1, 32)
  process.send("room", "join", name)
  -- The room's lines to the client, while this task reads the client's.
  coroutine.spawn(function()
    while true do
      local m = process.receive()
      if m.topic == "line" then conn:send(m.payload .. "\n") end
    end
  end)
  while true do
    local line = conn:receive()
    if not line then break end
    if line ~= "" then process.send("room", "say", line:sub(1, 1000)) end
  end
end

return main

-- A TCP chat server: one process per connection, and a room process,
-- registered as "room", that relays each line to everyone in it.
--   host run scripts/chat [-- PORT]     then, in other terminals: nc 127.0.0.1 PORT
local function main(port)
  local socket = require("socket")
  port = tonumber(port) or 7000
  local room = assert(process.spawn_linked("room"))
  assert(process.registry.register("room", room))
  local server = assert(socket.bind("127.0.0.1", port))
  log.info("chat: listening on 127.0.0.1:%d (try: nc 127.0.0.1 %d)", port, port)
  while true do
    local conn, err = server:accept()
    if conn then
      -- The connection moves to its own process: a client that misbehaves
      -- costs that process, never the server.
      local member, serr = process.spawn("member", conn)
      if not member then
        log.warn("chat: cannot serve a connection: %s", serr)
      end
    else
      log.warn("chat: accept failed: %s", err)
    end
  end
end

return main

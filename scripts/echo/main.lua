-- A TCP echo server, one process per connection (the benchmark's host
-- side: tests/bench/echo.sh).  host run scripts/echo [-- PORT]
-- Each connection's process runs connection.lua, a module of its own, so
-- that it loads none of this one (socket is required here only).

local function main(port)
  local socket = require("socket")
  port = tonumber(port) or 7007
  local server = assert(socket.bind("127.0.0.1", port, 1024))
  log.info("echo: listening on 127.0.0.1:%d", port)
  while true do
    local conn = server:accept()
    if conn then process.spawn("connection", conn) end
  end
end

return { main = main }

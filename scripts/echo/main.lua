-- A TCP echo server, one process per connection (the benchmark's host
-- side: tests/bench/echo.sh).  host run scripts/echo [-- PORT]
-- (socket is required in main only: a connection's process, which runs
-- serve from this module, then does not load the module's functions.)

local function serve(conn)
  conn:setoption("tcp-nodelay", true)
  while true do
    -- Whatever has come, up to 64 KB (receiveany, OpenResty's call): an
    -- echo waits for no line or count.
    local data = conn:receiveany(65536)
    if not data or not conn:send(data) then break end
  end
  conn:close()
end

local function main(port)
  local socket = require("socket")
  port = tonumber(port) or 7007
  local server = assert(socket.bind("127.0.0.1", port, 1024))
  log.info("echo: listening on 127.0.0.1:%d", port)
  while true do
    local conn = server:accept()
    if conn then process.spawn("main:serve", conn) end
  end
end

return { main = main, serve = serve }

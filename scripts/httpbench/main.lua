-- The HTTP benchmark's host side (tests/bench/http.sh): hello world and a
-- small JSON endpoint, a process a connection.
--   host run scripts/httpbench [-- PORT]
local function main(port)
  local http = require("http")
  local srv = assert(http.serve("127.0.0.1:" .. (tonumber(port) or 8080), "api:handle"))
  log.info("httpbench: listening on %s", srv.address)
  while true do process.receive() end
end

return { main = main }

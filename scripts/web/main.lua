-- A small JSON API over HTTP: a store process (registered as "store")
-- under a supervisor, and an HTTP server whose connections' processes
-- (api.lua) call it.   host run scripts/web [-- PORT]
--   curl 127.0.0.1:8080/items
--   curl -X POST -d '{"name":"tea","qty":3}' 127.0.0.1:8080/items
--   curl 127.0.0.1:8080/items/1
--   curl -X DELETE 127.0.0.1:8080/items/1
local supervisor = require("supervisor")
local http = require("http")

local function main(port)
  supervisor.start {
    strategy = "one_for_one", intensity = 5, period = 10, name = "web.sup",
    children = { { id = "store", entry = "store", restart = "permanent", name = "store" } },
  }
  local srv = assert(http.serve("127.0.0.1:" .. (tonumber(port) or 8080), "api:handle",
    { max_body_bytes = 64 * 1024, request_timeout = 10 }))
  log.info("web: serving the items API on http://%s/items", srv.address)
  while true do process.receive() end  -- the server lives as long as this process
end

return { main = main }

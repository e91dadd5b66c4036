-- A small JSON API over HTTP: a store server (store.lua, registered as
-- "store") under a supervisor, a shared table caching its items, and an
-- HTTP server whose connections' processes (api.lua) use both.
--   host run scripts/web [-- PORT]
--   curl 127.0.0.1:8080/items
--   curl -X POST -d '{"name":"tea","qty":3}' 127.0.0.1:8080/items
--   curl -i 127.0.0.1:8080/items/1      (twice: x-cache: miss, then hit)
--   curl -X DELETE 127.0.0.1:8080/items/1
local supervisor = require("supervisor")
local shared = require("shared")
local http = require("http")

local function main(port)
  -- The cache, made here with its size; the store and the handlers open it
  -- by name. Past 1 MiB the least recently used items leave it.
  assert(shared.table("web.items", { max_bytes = "1M" }))
  supervisor.start {
    strategy = "one_for_one", intensity = 5, period = 10, name = "web.sup",
    children = { { id = "store", entry = "server:serve", args = { "store" }, restart = "permanent", name = "store" } },
  }
  local srv = assert(http.serve("127.0.0.1:" .. (tonumber(port) or 8080), "api:handle",
    { max_body_bytes = 64 * 1024, request_timeout = 10 }))
  log.info("web: serving the items API on http://%s/items", srv.address)
  while true do process.receive() end  -- the server lives as long as this process
end

return { main = main }

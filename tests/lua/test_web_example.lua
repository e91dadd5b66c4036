-- scripts/web (the JSON API example) run as a user runs it, driven with
-- http.request: the store (a server) behind a supervisor, the handlers
-- calling it, and the shared table that caches its items in front of it.
local T = require("t")
local http = require("http")
local json = require("json")

return { main = function(host)
  local tests_dir = debug.getinfo(1, "S").source:match("^@(.*)/[^/]+$")
  local port = T.free_port()
  local p = assert(exec.start { host, "run", tests_dir .. "/../../scripts/web", "--", tostring(port) })
  local base = "http://127.0.0.1:" .. port
  local deadline = time.now() + 30
  while time.now() < deadline and not http.request("GET", base .. "/items") do time.sleep(0.05) end
  local ok, err = pcall(T.run, {
    { "create, list, get and delete items as JSON", function()
      local r = assert(http.request("GET", base .. "/items"))
      T.eq(r.status, 200); T.eq(r.headers["content-type"], "application/json"); T.eq(r.body, "[]")
      local c = assert(http.request("POST", base .. "/items", { body = json.encode({ name = "tea", qty = 3 }) }))
      T.eq(c.status, 201)
      local item = json.decode(c.body)
      T.eq(item.name, "tea"); T.eq(item.qty, 3)
      local g = assert(http.request("GET", base .. "/items/" .. item.id))
      T.eq(json.decode(g.body).name, "tea")
      T.eq(#json.decode(assert(http.request("GET", base .. "/items")).body), 1)
      T.eq(assert(http.request("DELETE", base .. "/items/" .. item.id)).status, 204)
      T.eq(assert(http.request("GET", base .. "/items/" .. item.id)).status, 404)
    end },
    { "a second GET of an item is served from the shared table; a delete takes it out", function()
      local c = assert(http.request("POST", base .. "/items", { body = json.encode({ name = "jam", qty = 2 }) }))
      local url = base .. "/items/" .. json.decode(c.body).id
      local first = assert(http.request("GET", url))
      T.eq(first.status, 200); T.eq(first.headers["x-cache"], "miss")
      local second = assert(http.request("GET", url))
      T.eq(second.status, 200); T.eq(second.headers["x-cache"], "hit")
      T.eq(json.decode(second.body).name, "jam"); T.eq(json.decode(second.body).qty, 2)
      T.eq(assert(http.request("DELETE", url)).status, 204)
      local gone = assert(http.request("GET", url))
      T.eq(gone.status, 404); T.eq(gone.headers["x-cache"], nil)
    end },
    { "bad input: 400 for a body that is not JSON, 404 and 405 where they belong", function()
      local r = assert(http.request("POST", base .. "/items", { body = "not json" }))
      T.eq(r.status, 400)
      T.match(json.decode(r.body).error, "^invalid")
      T.eq(assert(http.request("GET", base .. "/nothing")).status, 404)
      local m = assert(http.request("PUT", base .. "/items", { body = "" }))
      T.eq(m.status, 405); T.eq(m.headers.allow, "GET, POST")
    end },
  })
  p:kill("TERM")
  p:wait(20)
  if not ok then error(err, 0) end
  return true
end }

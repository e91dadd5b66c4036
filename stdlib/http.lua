-- http (docs/LUA_API.md, stdlib: http): a server whose connections are each a process of
-- their own (http.server), and a client (http.client). Each half loads on
-- first use, so a process that only serves never compiles the client.
--
--   local http = require("http")
--   local srv = http.serve("127.0.0.1:8080", "api:handle")
--   local res, err = http.request("GET", "http://127.0.0.1:8080/")
local http = {}

function http.serve(...) return require("http.server").serve(...) end
function http.request(...) return require("http.client").request(...) end

return http

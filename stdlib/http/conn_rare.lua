-- The part of a connection's process (stdlib/http/conn.lua) that a
-- request needs only now and then: a failure and its 500, a body sent as
-- a function (chunked) or read in pieces, the handler loaded again after
-- a change (--watch). conn.lua loads it at its first use: each new
-- connection loads conn.lua's bytecode, and this code, which most
-- connections never run, was 4% of a new connection's instructions
-- there (BENCHMARKS.md, "A new connection's cost, continued").
local type, tostring, xpcall, pairs = type, tostring, xpcall, pairs

local M = {}

local internal_error = { ["content-type"] = "text/plain; charset=utf-8" }

-- The request's method and path are the client's: they go in as values,
-- never as part of the format (a path may hold "%d").
local function failed(req, what, detail, tb)
  log.error("http: %s for %s %s: %s", what, tostring(req.method), tostring(req.path), tostring(detail),
    tb and { traceback = tb } or nil)
end
M.failed = failed

-- The 500 after a failure (logged with its traceback, if any).
function M.fail(req, what, detail, tb)
  failed(req, what, detail, tb)
  return 500, internal_error, "internal server error\n"
end

-- A response that could not be written as given: logged, and a 500 sent
-- in its place.
function M.bad_response(conn, req, err)
  failed(req, "bad response", err)
  return conn:respond(500, internal_error, "internal server error\n")
end

-- load_handler's error when the module lacks the method (the entry as
-- the server was given it, from its configuration).
function M.no_method(conf_id, module, method)
  local entry = require("host.http").server_conf(conf_id, "entry") or (module .. ":" .. method)
  return { err = "entry '" .. entry .. "': no function '" .. method .. "' in module '" .. module .. "'" }
end

-- The changed modules (fresh: their names, the host fills it) and the
-- handler's own (which may hold a changed one it required) forgotten,
-- so that the handler loads again at their newest versions.
function M.forget_changed(fresh, module)
  local loaded = package.loaded
  for name in pairs(fresh) do
    fresh[name] = nil
    loaded[name] = nil
  end
  loaded[module] = nil
end

-- req:read_body() (conn.lua's Request): a body up to the server's
-- buffer_body_bytes is in req.body already and comes as one chunk; a
-- larger one (req.body is nil) comes as it arrives.
local read_whole = setmetatable({}, { __mode = "k" })
function M.read_body(req, conn)
  if req.body ~= nil then
    if read_whole[req] then return nil end
    read_whole[req] = true
    return req.body
  end
  return conn:body()
end

-- A body given as a function: each call returns the next chunk, nil at
-- the end; sent chunked. A chunk function that raises ends the response
-- where it stands (its head is out): the connection closes.
function M.stream(conn, req, status, headers, body, with_traceback)
  local ok, err = conn:respond(status, headers, nil, true)
  if not ok then
    if err and err ~= "closed" then return M.bad_response(conn, req, err) end
    return nil
  end
  while true do
    local done, chunk = xpcall(body, with_traceback)
    if not done then
      failed(req, "body function failed", chunk.err, chunk.tb)
      conn:close()  -- the connection closes mid-response
      return nil
    end
    if chunk == nil then break end
    if type(chunk) ~= "string" then chunk = tostring(chunk) end
    if not conn:chunk(chunk) then return nil end  -- the client went away
  end
  return conn:finish()
end

return M

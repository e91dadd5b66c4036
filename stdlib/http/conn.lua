-- One HTTP connection's process (stdlib/http/server.lua): the acceptor
-- spawns it when the connection's first request comes, with the socket,
-- and it calls the entry's method with each request in turn; the requests
-- are parsed, and the responses written, in C on this process's worker
-- (bindings/http_conn.cpp). A handler that raises, or returns what cannot
-- be sent, gets the client a 500 and its error logged with the traceback;
-- a process that fails outright (a limit) gets the same 500 from the
-- acceptor. An idle keep-alive connection gives its socket back to the
-- acceptor (hibernate_after) and the process ends.
local type, tostring, xpcall, next, pairs = type, tostring, xpcall, next, pairs

local M = {}

-- The connection this process serves (one a process).
local current_conn

-- req:read_body(): the body's next chunk, nil at its end (then nil, err
-- when it ended early: "too_large: ...", "closed", "timeout"). A body up
-- to the server's buffer_body_bytes is in req.body already and comes as
-- one chunk; a larger one (req.body is nil) comes as it arrives.
local read_whole = setmetatable({}, { __mode = "k" })
local Request = { __index = {} }
function Request.__index.read_body(req)
  if req.body ~= nil then
    if read_whole[req] then return nil end
    read_whole[req] = true
    return req.body
  end
  return current_conn:body()
end

-- req:closed(): true once the client has left (closed or reset its
-- connection) while its request is served; the process is then cancelled
-- too (bindings/http_conn.cpp watches the connection while a handler runs).
function Request.__index.closed(req)
  return current_conn:gone()
end

local internal_error = { ["content-type"] = "text/plain; charset=utf-8" }

-- The handler's error with its traceback, as one value. The debug
-- library is taken only here (by require: a handler's module may have
-- its own global `debug`): a connection whose handler never fails does
-- not open it.
local function with_traceback(err)
  return { err = err, tb = require("debug").traceback(tostring(err), 2) }
end

-- The request's method and path are the client's: they go in as values,
-- never as part of the format (a path may hold "%d").
local function failed(req, what, detail, tb)
  log.error("http: %s for %s %s: %s", what, tostring(req.method), tostring(req.path), tostring(detail),
    tb and { traceback = tb } or nil)
end

-- The handler of entry, or nil and why it cannot be had.
local function load_handler(entry, module, method)
  local ok, mod = xpcall(require, with_traceback, module)
  local handler = ok and type(mod) == "table" and mod[method]
  if not ok then return nil, mod end
  if type(handler) ~= "function" then
    return nil, { err = "entry '" .. entry .. "': no function '" .. method .. "' in module '" .. module .. "'" }
  end
  return handler
end

function M.serve(sock, id, entry, conf)
  local conn = require("host.http").conn(sock, conf, id, conf.tls_cert, conf.tls_key)
  if not conn then return end
  current_conn = conn
  -- The entry, split once by the server (http/server.lua's conn_config).
  local module, method = conf.module, conf.method
  assert(module and method, "http.conn.serve: conf.module and conf.method must be set (http/server.lua conn_config)")
  -- With --watch, the names of the modules this process loaded that were
  -- changed on disk since (the host fills it). A keep-alive connection
  -- lives as long as its client keeps it busy: between two requests it
  -- loads the handler afresh once something changed, so that it never
  -- serves an old version for ever. One table look a request otherwise.
  local fresh = require("host.reloaded")
  local handler, load_error = load_handler(entry, module, method)

  -- The client's address, the same for each request on the connection.
  local remote = conn:remote()
  -- A request comes as values (bindings/http_conn.cpp, push_request), its
  -- table made here: a constructor costs far less than setting each field
  -- from C. At the connection's end verb is nil, and path says why where
  -- it is "idle".
  local verb, path, query, headers, body, http10 = conn:next()
  while verb do
    if next(fresh) ~= nil then
      -- The changed modules and the handler's own (which may hold a
      -- changed one it required), loaded again at their newest versions.
      local loaded = package.loaded
      for name in pairs(fresh) do
        fresh[name] = nil
        loaded[name] = nil
      end
      loaded[module] = nil
      handler, load_error = load_handler(entry, module, method)
    end
    local req = setmetatable({
      method = verb, path = path, query = query or {}, headers = headers, body = body, remote = remote,
      version = http10 and "1.0" or "1.1",
    }, Request)
    local status, rheaders, rbody
    if load_error then
      failed(req, "cannot load the handler", load_error.err, load_error.tb)
      status, rheaders, rbody = 500, internal_error, "internal server error\n"
    else
      local done, s, h, b = xpcall(handler, with_traceback, req)
      if done then
        status, rheaders, rbody = s, h, b
      else
        failed(req, "handler failed", s.err, s.tb)
        status, rheaders, rbody = 500, internal_error, "internal server error\n"
      end
    end
    if type(rbody) == "function" then
      M.stream(conn, req, status, rheaders, rbody)
    else
      if type(rbody) == "number" then rbody = tostring(rbody) end
      local ok, err = conn:respond(status, rheaders, rbody)
      if not ok and err and err ~= "closed" then  -- the response could not be written as given
        failed(req, "bad response", err)
        conn:respond(500, internal_error, "internal server error\n")
      end
    end
    verb, path, query, headers, body, http10 = conn:next()
  end
  if path == "idle" and conf.acceptor then
    -- Idle: the socket goes back to the acceptor, which starts another
    -- process when the next request comes.
    local parked = conn:park()
    if parked and process.send(conf.acceptor, "park", { id = id, sock = parked }) then return "parked" end
  end
  conn:close()
end

-- A body given as a function: each call returns the next chunk, nil at
-- the end; sent chunked. A chunk function that raises ends the response
-- where it stands (its head is out): the connection closes.
function M.stream(conn, req, status, headers, body)
  local ok, err = conn:respond(status, headers, nil, true)
  if not ok then
    if err and err ~= "closed" then
      failed(req, "bad response", err)
      return conn:respond(500, internal_error, "internal server error\n")
    end
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

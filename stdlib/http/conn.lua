-- One HTTP connection's process (stdlib/http/server.lua): the acceptor
-- spawns it when the connection's first request comes, with the socket,
-- and it calls the entry's method with each request in turn; the requests
-- are parsed, and the responses written, in C on this process's worker
-- (bindings/http_conn.cpp). A handler that raises, or returns what cannot
-- be sent, gets the client a 500 and its error logged with the traceback;
-- a process that fails outright (a limit) gets the same 500 from its
-- connection's finalizer, at the process's end. An idle keep-alive connection gives its socket back to the
-- acceptor (hibernate_after) and the process ends.
--
-- Every new connection loads this file's bytecode: what only a failure,
-- a streamed body, a body read in pieces or a reload needs is in
-- stdlib/http/conn_rare.lua, loaded at its first use (rare, below).
local type, tostring, xpcall, next = type, tostring, xpcall, next

local M = {}

-- The connection this process serves (one a process).
local current_conn

local rare_module
local function rare()
  rare_module = rare_module or require("http.conn_rare")
  return rare_module
end

-- req:read_body(): the body's next chunk, nil at its end (then nil, err
-- when it ended early: "too_large: ...", "closed", "timeout").
-- req:closed(): true once the client has left (closed or reset its
-- connection) while its request is served; the process is then cancelled
-- too (bindings/http_conn.cpp watches the connection while a handler runs).
local Request = { __index = {
  read_body = function(req) return rare().read_body(req, current_conn) end,
  closed = function() return current_conn:gone() end,
} }

-- The handler's error with its traceback, as one value. The debug
-- library is taken only here (by require: a handler's module may have
-- its own global `debug`): a connection whose handler never fails does
-- not open it.
local function with_traceback(err)
  return { err = err, tb = require("debug").traceback(tostring(err), 2) }
end

-- The handler of module's method, or nil and why it cannot be had.
local function load_handler(conf_id, module, method)
  local ok, mod = xpcall(require, with_traceback, module)
  if not ok then return nil, mod end
  local handler = type(mod) == "table" and mod[method]
  if type(handler) ~= "function" then return nil, rare().no_method(conf_id, module, method) end
  return handler
end

-- conf_id: the server's configuration (bindings/http_conn.cpp, config),
-- made once by the acceptor: the limits, TLS, the handler's module and
-- method, which hc.conn takes from the socket (so that it is there though
-- the acceptor ended since the spawn); what else it holds is asked for by
-- the id only where needed (server_conf: nothing once the acceptor is gone).
function M.serve(sock, id, conf_id)
  local hc = require("host.http")
  -- remote: the client's address, the same for each request on the connection.
  local conn, module, method, remote = hc.conn(sock, id, conf_id)
  if not conn then return end
  current_conn = conn
  -- With --watch, the names of the modules this process loaded that were
  -- changed on disk since (the host fills it). A keep-alive connection
  -- lives as long as its client keeps it busy: between two requests it
  -- loads the handler afresh once something changed, so that it never
  -- serves an old version for ever. One table look a request otherwise.
  local fresh = require("host.reloaded")
  local handler, load_error = load_handler(conf_id, module, method)

  -- A request comes as values (bindings/http_conn.cpp, push_request), its
  -- table made here: a constructor costs far less than setting each field
  -- from C. At the connection's end verb is nil, and path says why where
  -- it is "idle".
  local verb, path, query, headers, body, http10 = conn:next()
  while verb do
    if next(fresh) ~= nil then
      rare().forget_changed(fresh, module)
      handler, load_error = load_handler(conf_id, module, method)
    end
    local req = setmetatable({
      method = verb, path = path, query = query or {}, headers = headers, body = body, remote = remote,
      version = http10 and "1.0" or "1.1",
    }, Request)
    local status, rheaders, rbody
    if load_error then
      status, rheaders, rbody = rare().fail(req, "cannot load the handler", load_error.err, load_error.tb)
    else
      local done, s, h, b = xpcall(handler, with_traceback, req)
      if done then
        status, rheaders, rbody = s, h, b
      else
        status, rheaders, rbody = rare().fail(req, "handler failed", s.err, s.tb)
      end
    end
    if type(rbody) == "function" then
      rare().stream(conn, req, status, rheaders, rbody, with_traceback)
    else
      if type(rbody) == "number" then rbody = tostring(rbody) end
      local ok, err = conn:respond(status, rheaders, rbody)
      if not ok and err and err ~= "closed" then  -- the response could not be written as given
        rare().bad_response(conn, req, err)
      end
    end
    verb, path, query, headers, body, http10 = conn:next()
  end
  local acceptor = path == "idle" and hc.server_conf(conf_id, "acceptor")
  if acceptor then
    -- Idle: the socket goes back to the acceptor, which starts another
    -- process when the next request comes.
    local parked = conn:park()
    if parked and process.send(acceptor, "park", { id = id, sock = parked }) then return "parked" end
  end
  conn:close()
end

return M

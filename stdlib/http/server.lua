-- http.serve (docs/LUA_API.md, stdlib: http): the server. Everything runs on the
-- workers (docs/ARCHITECTURE.md, "HTTP on the workers"): serve makes the
-- listening socket in the calling process, and an acceptor process
-- (accept, below) accepts connections. It waits for a connection's first
-- bytes, then spawns the connection's process (stdlib/http/conn.lua), the
-- socket moved to it; that process parses its requests in C
-- (bindings/http_conn.cpp) and calls the entry's method with each.
--
-- The acceptor has a handle on each connection (the host.http module's
-- track), with no descriptor of its own: when the server closes, each
-- connection is told through it (drain: a flag the connection reads, its
-- read wait woken) to answer what it serves with Connection: close and
-- end. A connection whose process fails in the middle of a request (a
-- limit, a terminate) gets its 500 from that process's end, which runs
-- the connection's finalizer (bindings/http_conn.cpp); untrack sends it
-- only for a process whose thread was given up (stuck past the time
-- limit), which never runs its finalizers. An idle keep-alive
-- connection's process gives its socket back (park) and ends; the
-- acceptor hibernates the socket in its track handle until its next
-- request and starts another.
local type, error, tonumber, tostring, setmetatable, pairs = type, error, tonumber, tostring, setmetatable, pairs
local options = require("host.options")
-- Loaded here, by the process that calls serve, rather than first by the
-- acceptor: the acceptor then starts without reading a file while serve's
-- caller goes on (test_http_stress counts the descriptors open).
local request = require("request")

local M = {}

local Server = {}
Server.__index = Server

-- Stops accepting; each connection finishes the request it is serving,
-- then closes; returns once they have (or after 10 s). Idempotent. Only the process that made the server may close
-- it (another gets nil, "denied: ...").
function Server:close()
  local ok, err = request.call(self.id, "close", true, 30)
  if ok == nil and type(err) == "string" and err:match("^not_found") then return true end  -- closed already
  if ok == nil then return nil, err end
  return true
end

function Server:__tostring() return "http.server{" .. self.address .. "}" end

-- "IP:PORT", "[IPv6]:PORT", ":PORT" (every address) or a bare port.
local function split_address(address)
  if type(address) == "number" then return "0.0.0.0", address end
  if type(address) ~= "string" then
    error("bad argument #1 to 'serve' (address expected as \"IP:PORT\", got " .. type(address) .. ")", 3)
  end
  local host, port = address:match("^%[([^%]]+)%]:(%d+)$")
  if not host then host, port = address:match("^([^:]*):(%d+)$") end
  if not host then
    error("bad argument #1 to 'serve' (address expected as \"IP:PORT\", got \"" .. address .. "\")", 3)
  end
  if host == "" or host == "*" then host = "0.0.0.0" end
  if host == "localhost" then host = "127.0.0.1" end
  return host, tonumber(port)
end

local known = {
  max_header_bytes = "number", max_body_bytes = "number", buffer_body_bytes = "number", request_timeout = "number",
  keepalive_timeout = "number", max_connections = "number", hibernate_after = "number", tls = "table",
}
local sizes = { max_header_bytes = true, max_body_bytes = true, buffer_body_bytes = true, max_connections = true }

local TLS_OPTIONS = { cert = true, key = true }

-- Whether require could find the module (without loading it).
local function module_exists(name)
  if package.loaded[name] ~= nil or package.preload[name] ~= nil then return true end
  for _, search in ipairs(package.loaders) do
    local found = search(name)
    if type(found) == "function" then return true end
  end
  return false
end

-- The listening socket, bound: it, and the address bound; or nil, err.
local function listen(host, port)
  local socket = require("socket")
  local lst, err = socket.tcp()
  if not lst then return nil, err end
  lst:setoption("reuseaddr", true)
  local ok, berr = lst:bind(host, port)
  if ok then ok, berr = lst:listen(1024) end
  if not ok then
    lst:close()
    if berr == "host not found" then
      return nil, "invalid: address '" .. host .. "' (a numeric IPv4 or IPv6 address, or localhost)"
    end
    return nil, tostring(berr) .. " (" .. host .. ":" .. port .. ")"
  end
  local ip, bound, family = lst:getsockname()
  return lst, family == "inet6" and ("[" .. ip .. "]:" .. bound) or (ip .. ":" .. bound)
end

-- What each connection's process is given: the limits, the TLS
-- certificate and key, who serves it.
local function conn_config(opts, entry, conn_entry)
  local conf = {
    max_header_bytes = opts.max_header_bytes, max_body_bytes = opts.max_body_bytes,
    buffer_body_bytes = opts.buffer_body_bytes, request_timeout = opts.request_timeout or 30,
    keepalive_timeout = opts.keepalive_timeout or 60, max_connections = opts.max_connections or 10000,
    hibernate_after = opts.hibernate_after, entry = entry, conn_entry = conn_entry or "http.conn:serve",
  }
  if conf.hibernate_after == nil then conf.hibernate_after = 0.1 end
  -- The handler's module and method, split here once rather than by each
  -- connection's process (which then needs no string library for it).
  conf.module, conf.method = entry:match("^([^:]+):?(.*)$")
  if conf.method == "" then conf.method = "main" end
  if opts.tls then conf.tls_cert, conf.tls_key = opts.tls.cert_pem, opts.tls.key_pem end
  return conf
end

function M.serve(address, entry, opts)
  local host, port = split_address(address)
  if type(entry) ~= "string" or not entry:match("^[%w_%.%-/]+:?[%w_]*$") then
    error("bad argument #2 to 'serve' (entry expected as \"module:method\", got " ..
      (type(entry) == "string" and ("\"" .. entry .. "\"") or type(entry)) .. ")", 2)
  end
  if opts ~= nil and type(opts) ~= "table" then
    error("bad argument #3 to 'serve' (table expected, got " .. type(opts) .. ")", 2)
  end
  opts = opts or {}
  options.check(opts, known, 2)
  for k, v in pairs(opts) do
    if type(v) ~= known[k] and not (k == "hibernate_after" and v == false) then
      return nil, "invalid: opts." .. k .. " must be a " .. known[k] .. ", got " .. type(v)
    end
    if sizes[k] and not (v >= 1 and v < 1e15) then return nil, "invalid: opts." .. k .. " must be a positive number" end
    if not sizes[k] and type(v) == "number" and not (v > 0 and v < 1e9) then
      return nil, "invalid: opts." .. k .. " must be a positive number of seconds"
    end
  end
  if not port or port > 65535 then return nil, "invalid: port must be from 0 to 65535" end
  local module = entry:match("^([^:]+)")
  if not module_exists(module) then
    return nil, "not_found: no module '" .. module .. "' in the script directory or stdlib (entry '" .. entry .. "')"
  end
  if opts.tls then
    options.check(opts.tls, TLS_OPTIONS, 2)
    local cert, key = opts.tls.cert, opts.tls.key
    if type(cert) ~= "string" or type(key) ~= "string" then
      return nil, "invalid: opts.tls needs cert and key, the PEM files of the server's certificate chain and key"
    end
    local files = require("host.tls_files")
    local cert_pem, err = files.read(cert, "cert", "certificate file")
    if not cert_pem then return nil, err end
    local key_pem, kerr = files.read(key, "key", "key file")
    if not key_pem then return nil, kerr end
    -- The certificate and key must make a context before any client comes.
    local ok, cerr = require("host.http").check_tls(cert_pem, key_pem, cert, key)
    if not ok then return nil, cerr end
    local given = opts
    opts = {}
    for k, v in pairs(given) do opts[k] = v end
    opts.tls = { cert = cert, key = key, cert_pem = cert_pem, key_pem = key_pem }
  end
  local lst, addr = listen(host, port)
  if not lst then return nil, addr end
  local pid, err = process.spawn("http.server:accept", process.pid(), lst, conn_config(opts, entry))
  if not pid then return nil, err end
  return setmetatable({ id = pid, address = addr }, Server)
end

-- A server of the host's own (the inspector, HttpServer's serve_internal):
-- its listening socket comes from the host (moved to this process), and it has no
-- owner; it ends with the host.
function M.serve_internal(lst, address, conn_entry, entry)
  local conf = conn_config({}, entry, conn_entry)
  conf.bound = address
  return M.accept(nil, lst, conf)
end

local CLOSE_WAIT = 10

-- Connections with no process, each held by its track handle (hibernate:
-- its socket and a readiness watch, with no task and no timer of its
-- own), in one of two queues by the wait they were given: new ones
-- (request_timeout, then 408) and idle keep-alive ones (what is left of
-- keepalive_timeout, then closed). Every entry of a queue waits the same
-- time, so a queue is in deadline order and only its head is ever due:
-- one sweep of the heads serves every deadline. due_at[id] is the deadline
-- of the connection's present wait; an entry whose deadline is no longer
-- its connection's (woken since, or gone) is passed over.
local function new_queue(wait, fresh)
  return { ids = {}, at = {}, head = 1, tail = 0, wait = wait, fresh = fresh, due_at = {} }
end

local function push(q, id, at)
  local tail = q.tail + 1
  q.ids[tail], q.at[tail], q.tail = id, at, tail
  q.due_at[id] = at
end

-- The head entry taken off: its id and deadline. The arrays are moved down
-- once the taken part outgrows the rest, so a queue never empty holds no
-- more than twice its entries.
local function pop(q)
  local head, ids, at = q.head, q.ids, q.at
  local id, due = ids[head], at[head]
  ids[head], at[head] = nil, nil
  head = head + 1
  if head > q.tail then
    q.head, q.tail = 1, 0
  elseif head > 64 and head > q.tail - head then
    local n = q.tail - head + 1
    for i = 1, n do
      ids[i], at[i] = ids[head + i - 1], at[head + i - 1]
      ids[head + i - 1], at[head + i - 1] = nil, nil
    end
    q.head, q.tail = 1, n
  else
    q.head = head
  end
  return id, due
end

-- The acceptor's process: accepts on lst until the server closes (its
-- owner closes it or ends), then waits for its connections to end.
function M.accept(owner, lst, conf)
  local hc = require("host.http")
  local tls = conf.tls_cert ~= nil
  if owner then process.monitor(owner) end
  local events, inbox = process.events(), process.inbox()
  local self = process.pid()
  local self_name = tostring(self)
  conf.acceptor = self
  -- What each connection's process is served with, made once (host.http's
  -- config, held while the acceptor runs): a process is given its id.
  local conf_handle, conf_id = hc.config(conf)
  if not conf_handle then error("http: cannot serve: " .. tostring(conf_id)) end
  conf.handle = conf_handle  -- held (conf lives as long as the acceptor)
  -- by_pid: each connection process's id; serving: each id's process
  -- now (none while it is hibernated), so that a process's end is
  -- heard only for a connection still its own.
  local conns, by_pid, serving, count, closed = {}, {}, {}, 0, false
  local idle_wait = conf.keepalive_timeout
  if type(conf.hibernate_after) == "number" then idle_wait = math.max(idle_wait - conf.hibernate_after, 0.001) end
  local fresh, idle = new_queue(conf.request_timeout, true), new_queue(idle_wait, false)
  -- While the main loop waits in its select: the deadline it wakes for
  -- (math.huge: none). The accept task hibernates new connections then,
  -- and one due sooner must wake it (a message to itself), or a client
  -- that sends nothing would never get its 408.
  local asleep_until = nil

  local function done(id, failed)
    if not conns[id] then return end
    local handle = conns[id]
    conns[id], serving[id] = nil, nil
    fresh.due_at[id], idle.due_at[id] = nil, nil
    count = count - 1
    handle:untrack(failed)
  end

  local serve

  -- The connection waits, with no process, for its (next) request; one
  -- whose bytes are there already is served at once.
  local function hibernate(id, sock, q)
    local held = conns[id]:hibernate(sock)
    if not held then
      sock:close()
      return done(id, false)
    end
    if held ~= true then return serve(id, held) end
    local at = time.now() + q.wait
    push(q, id, at)
    if asleep_until and at < asleep_until then
      asleep_until = nil  -- one wake is enough
      process.send(self, "deadline", true)
    end
  end

  -- Its bytes came: a process serves them (sock: the connection's socket
  -- where it is not hibernated).
  function serve(id, sock)
    sock = sock or conns[id]:wake()
    if not sock then return done(id, false) end
    local pid, serr = process.spawn_monitored(conf.conn_entry, sock, id, conf_id)
    if not pid then
      log.warn("http: cannot start a process for a connection: %s", tostring(serr))
      sock:close()
      return done(id, true)
    end
    by_pid[tostring(pid)] = id
    serving[id] = tostring(pid)
  end

  -- Ends the waits past their deadline: a new connection that sent
  -- nothing gets 408 (plain HTTP: a TLS client would not read it), an
  -- idle one just closes. Returns the next deadline, or nil.
  local function sweep(q, now)
    local at, due_at = q.at, q.due_at
    while q.head <= q.tail and at[q.head] <= now do
      local id, due = pop(q)
      if due_at[id] == due then
        due_at[id] = nil
        local sock = conns[id]:wake()
        if sock then
          if q.fresh and not tls then sock:send(hc.error_response(408)) end
          sock:close()
        end
        done(id, false)
      end
    end
    return at[q.head]
  end

  local function close_all()
    if closed then return end
    closed = true
    lst:close()
    -- A hibernated connection closes now; one with a process answers
    -- what it serves with Connection: close, then ends.
    for _, q in ipairs { fresh, idle } do
      for id in pairs(q.due_at) do done(id, false) end
      q.ids, q.at, q.head, q.tail = {}, {}, 1, 0
    end
    for _, handle in pairs(conns) do handle:drain() end
  end

  coroutine.spawn(function()
    while not closed do
      local sock, err = lst:accept()
      if not sock then
        if closed or err == "closed" then return end
        time.sleep(0.01)  -- out of descriptors, say: the next try a moment later
      elseif closed or count >= conf.max_connections then
        -- (closed: accepted in the turn the server closed, after
        -- close_all's drain: nobody would end it before its timeout.)
        if not tls then sock:send(hc.error_response(503)) end
        sock:close()
      else
        -- The socket carries the configuration to its process (hc.conn
        -- takes it there), so that one spawned just before the acceptor
        -- ends is still served.
        local handle, id = hc.track(sock, tls, conf_id)
        if handle then
          count = count + 1
          conns[id] = handle
          hibernate(id, sock, fresh)
        else
          sock:close()
        end
      end
    end
  end)

  -- Close calls answered once every connection has ended (or after
  -- CLOSE_WAIT seconds, for one that streams on and on).
  local waiting, waiting_since = {}, nil
  local function answer_closes()
    for i = 1, #waiting do request.reply(waiting[i], true) end
    waiting = {}
  end
  while not (closed and count == 0) do
    -- The select wakes for the nearest deadline, a queue's head or the
    -- close calls' wait.
    local now = time.now()
    local due = sweep(fresh, now)
    local idle_due = sweep(idle, now)
    if idle_due and (not due or idle_due < due) then due = idle_due end
    if #waiting > 0 and (not due or due > now + 0.5) then due = now + 0.5 end
    asleep_until = due or math.huge
    local r = channel.select {
      events:case_receive(), inbox:case_receive(), timeout = due and math.max(due - now, 0.001) or nil,
    }
    asleep_until = nil
    local m = r.value
    if r.timeout then
      if #waiting > 0 and time.now() - waiting_since >= CLOSE_WAIT then answer_closes() end
    elseif r.channel == events then
      if m.kind == "exit" then
        local from = tostring(m.from)
        local id = by_pid[from]
        if id then
          by_pid[from] = nil
          -- A process that failed after it sent its park may find its
          -- connection served by the next one already: not its to end.
          if serving[id] == from then
            serving[id] = nil
            if m.result ~= "parked" then done(id, m.error ~= nil) end
          end
        elseif owner and from == tostring(owner) then
          close_all()
        end
      elseif m.kind == "cancel" then
        close_all()
      end
    elseif (m.topic == "readable" or m.topic == "hangup") and tostring(m.from) == self_name then
      -- A hibernated connection's watch (hibernate): once a wait.
      local id = m.payload
      local q = fresh.due_at[id] and fresh or idle.due_at[id] and idle
      if q then
        q.due_at[id] = nil
        if m.topic == "readable" then serve(id) else done(id, false) end
      end
    elseif m.topic == "close" and request.is_call(m) then
      if owner == nil or tostring(m.from) ~= tostring(owner) then
        request.fail(m, "denied: server " .. tostring(self) .. " belongs to another process")
      else
        close_all()
        if #waiting == 0 then waiting_since = time.now() end
        waiting[#waiting + 1] = m
      end
    elseif m.topic == "park" and type(m.payload) == "table" then
      local id, sock = m.payload.id, m.payload.sock
      if serving[id] == tostring(m.from) then serving[id] = nil end  -- given back: its end no longer ends it
      if fresh.due_at[id] or idle.due_at[id] then
        if sock then sock:close() end  -- hibernated already: not this message's to give
      elseif conns[id] and sock and not closed then
        hibernate(id, sock, idle)
      else
        if sock then sock:close() end
        done(id, false)
      end
    end
    if closed and count == 0 then answer_closes() end
  end
  answer_closes()
end

return M

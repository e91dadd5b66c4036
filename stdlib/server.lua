-- server: gen_server's shape. A server is a process that keeps a state and
-- answers calls, casts and other messages through a module's callbacks.
--
--   local server = require("server")
--   local pid = server.start("counter", { start = 0 }, { name = "counter" })
--   server.call("counter", { op = "add", n = 2 })   -- the reply, or nil, err
--   server.cast(pid, "reset")
--   server.stop(pid)
--   -- or as a supervisor's child, init run in it and restarted from args:
--   { id = "counter", entry = "server:serve", args = { "counter", { start = 0 } }, name = "counter" }
--
-- The callback module returns:
--   init(args) -> state               (or nil, err: start answers nil, err)
--   handle_call(request, from, state) -> reply, state
--                                     (or server.noreply(state), and later
--                                      server.reply(from, value))
--   handle_cast(msg, state) -> state
--   handle_info(msg, state) -> state  (any other message, or an event)
--   terminate(reason, state)          (optional)
--   code_change(state) -> state       (optional, on a hot reload)
--
-- Calls travel on request.lua's machinery: the caller sends `{ call = REF,
-- value = REQUEST }` on the topic "$call" and waits for the reply on
-- "$reply", watching the server meanwhile, so a server that ends first
-- answers its callers "exit: REASON" at once, and a reply after its call
-- gave up is dropped. `from` is `{ pid =, ref = }`: a plain table, so any
-- process it is sent to may answer it.
local request = require("request")
local options = require("host.options")

local M = {}

local CALL, CAST, STOP, INIT = "$call", "$cast", "$stop", "$init"

local function check_options(opts, allowed, fname)
  if opts == nil then return {} end
  if type(opts) ~= "table" then
    options.fail("bad argument to '" .. fname .. "' (options table expected, got " .. type(opts) .. ")", 3)
  end
  options.check(opts, allowed, 3)  -- not a tail call: the level counts this frame
  return opts
end

-- A PID, a registered name, or (call and cast) { name, node }: a name
-- registered on that node of the cluster.
local function check_dest(dest, fname, named_ok)
  if named_ok and type(dest) == "table" then
    if type(dest[1]) ~= "string" or type(dest[2]) ~= "string" then
      error("bad argument #1 to '" .. fname .. "' ({ name, node } of two strings expected)", 3)
    end
    return
  end
  if type(dest) ~= "string" then
    error("bad argument #1 to '" .. fname .. "' (PID or registered name expected, got " .. type(dest) .. ")", 3)
  end
end

-- The value handle_call returns to answer later (server.reply).
local NOREPLY = {}
function M.noreply(state)
  return NOREPLY, state
end

-- Answers the call `from` (handle_call's second argument, which may be sent
-- to another process to answer). Returns true, or nil, err when the caller
-- is gone.
function M.reply(from, value)
  if type(from) ~= "table" or type(from.pid) ~= "string" or type(from.ref) ~= "number" then
    error("bad argument #1 to 'reply' (a call's from expected)", 2)
  end
  return request.reply({ from = from.pid, payload = { call = from.ref } }, value)
end

local function first_line(s)
  return (tostring(s):match("^[^\n]*"))
end

-- Loads the callback module: mod, or nil, err and whether the process
-- must fail with err (a load error) rather than end quietly.
local function load_module(module)
  local ok, mod = pcall(require, module)
  if not ok then return nil, mod, true end
  if type(mod) ~= "table" then
    return nil, "invalid: server module '" .. module .. "' returns " .. type(mod) .. ", not a table of callbacks"
  end
  return mod
end

-- Runs init(args): the state, or nil, err and whether the process must
-- fail with err (init raised) rather than end quietly (init refused).
local function init(mod, args)
  local ok, state, refused = xpcall(mod.init or function(a) return a end, debug.traceback, args)
  if not ok then return nil, state, true end
  if state == nil then return nil, refused ~= nil and tostring(refused) or "invalid: init returned nil" end
  return state
end

-- The server's loop, in this process, from init's state until it stops.
local function loop(module, mod, state, events)
  local function terminate(reason)
    if mod.terminate then mod.terminate(reason, state) end
  end
  -- A callback's error fails the server: terminate runs with it first.
  local function fail(err)
    pcall(terminate, err)
    error(err, 0)
  end
  local function checked(ok, ...)
    if not ok then fail((...)) end
    return ...
  end
  local function call_back(fn, ...)
    return checked(xpcall(fn, debug.traceback, ...))
  end

  local inbox = process.inbox()
  local cases = { inbox:case_receive(), events:case_receive() }
  while true do
    local r = channel.select(cases)
    local msg = r.value
    if r.channel == inbox then
      local topic = msg.topic
      if topic == CALL and request.is_call(msg) then
        local from = { pid = msg.from, ref = msg.payload.call }
        if not mod.handle_call then fail("server " .. module .. ": no handle_call for a call") end
        local reply, new_state = call_back(mod.handle_call, msg.payload.value, from, state)
        if reply == NOREPLY then
          state = new_state
        else
          state = new_state
          M.reply(from, reply)
        end
      elseif topic == CAST then
        if mod.handle_cast then state = call_back(mod.handle_cast, msg.payload, state) end
      elseif topic == STOP and request.is_call(msg) then
        local reason = msg.payload.value
        call_back(terminate, reason)
        request.reply(msg, true)
        return reason
      elseif mod.handle_info then
        state = call_back(mod.handle_info, msg, state)
      end
    else  -- an event
      if msg.kind == "cancel" then
        call_back(terminate, "canceled")
        return "canceled"
      elseif msg.kind == "reload" then
        -- The callback module (or one it uses) changed: load the newest
        -- and pass the state through code_change, between two messages;
        -- the PID, the mailbox and the names stay as they are.
        for _, changed in ipairs(msg.modules or {}) do package.loaded[changed] = nil end
        package.loaded[module] = nil
        local loaded, new = pcall(require, module)
        if loaded and type(new) == "table" then
          mod = new
          if mod.code_change then state = call_back(mod.code_change, state) end
        else
          log.error("server %s: the new version does not load, the old one goes on: %s", module, tostring(new))
          package.loaded[module] = mod
        end
      elseif mod.handle_info then
        state = call_back(mod.handle_info, msg, state)
      end
    end
  end
end

-- The server process: server.start spawns it and calls it on "$init"
-- with the callback module's name, init's argument and the name to
-- register; it answers once init returned, then serves.
function M.run()
  local events = process.events()  -- opened: a cancel runs terminate (loop)
  local start = process.listen(INIT):receive()
  start.topic = nil
  local module, args, name = start.payload.value.module, start.payload.value.args, start.payload.value.name
  local function refused(err, raise)
    request.fail(start, first_line(err))
    if raise then error(err, 0) end
  end
  local mod, err, raise = load_module(module)
  if not mod then return refused(err, raise) end
  if name then
    local registered, rerr = process.registry.register(name)
    if not registered then return refused(rerr) end
  end
  local state
  state, err, raise = init(mod, args)
  if state == nil then return refused(err, raise) end
  request.reply(start, true)
  return loop(module, mod, state, events)
end

-- A server as a supervisor's child: the child's entry is "server:serve"
-- and its args { module, args }; the supervisor registers the child's
-- name. init runs in the child itself: one that refuses or raises fails
-- the child, which the supervisor sees as any child's failure.
function M.serve(module, args)
  if type(module) ~= "string" then
    error("bad argument #1 to 'serve' (module name expected, got " .. type(module) .. ")", 2)
  end
  local events = process.events()
  local mod, err = load_module(module)
  if not mod then error(err, 0) end
  local state
  state, err = init(mod, args)
  if state == nil then error(err, 0) end
  return loop(module, mod, state, events)
end

-- Starts a server of `module` with init's argument `args`. opts: name (to
-- register), link (link to the caller, default false), timeout (seconds
-- for init, default 5). Returns its PID once init returned, or nil, err.
function M.start(module, args, opts)
  if type(module) ~= "string" then
    error("bad argument #1 to 'start' (module name expected, got " .. type(module) .. ")", 2)
  end
  opts = check_options(opts, { name = true, link = true, timeout = true }, "start")
  if opts.name ~= nil and type(opts.name) ~= "string" then options.fail("option 'name' must be a string", 2) end
  local timeout = opts.timeout or 5
  if type(timeout) ~= "number" or timeout ~= timeout or timeout < 0 then
    options.fail("option 'timeout' must be a number of seconds", 2)
  end
  local pid, err = process.spawn("server:run")
  if not pid then return nil, err end
  local ok, value, exit = request.call_raw(pid, INIT, { module = module, args = args, name = opts.name }, timeout, 2)
  if not ok then
    if value == "timeout" then
      process.terminate(pid)
      return nil, "timeout"
    end
    if value ~= nil then return nil, value end
    return nil, "exit: " .. first_line(exit.error or exit.result or "normal")
  end
  if opts.link then
    local linked, lerr = process.link(pid)
    if not linked then return nil, lerr end
  end
  return pid
end

-- The outcome of a call_raw that did not get its reply, as server.call
-- and server.stop answer it.
local function call_failed(dest, err, exit)
  if err ~= nil then return nil, err end
  if exit.error == "noproc" then return nil, "not_found: " .. request.describe(dest) end
  return nil, "exit: " .. first_line(exit.error or exit.result or "normal")
end

-- Calls the server and waits up to `timeout` (default 5 s) for its reply.
-- Returns the reply, or nil and "timeout", "not_found: ..." (no such
-- server) or "exit: REASON" (it ended before answering; "exit:
-- noconnection" when its node went away). dest: a PID, a name, or {
-- name, node }.
function M.call(dest, req, timeout)
  check_dest(dest, "call", true)
  local ok, value, exit = request.call_raw(dest, CALL, req, timeout, 2)
  if ok then return value end
  return call_failed(dest, value, exit)
end

-- Sends `msg` to the server's handle_cast; returns true, or nil, err.
function M.cast(dest, msg)
  check_dest(dest, "cast", true)
  return process.send(dest, CAST, msg)
end

-- Stops the server: terminate(reason) runs (default "normal") and it ends.
-- Returns true once it ended, or nil, err. dest as call's.
function M.stop(dest, reason, timeout)
  check_dest(dest, "stop", true)
  local pid = dest
  if type(dest) == "table" and dest[2] == process.node() then pid = dest[1] end  -- this node: a local name
  -- Another node's name is watched and called as it is (its node finds
  -- the process); a local name is looked up here.
  if type(pid) == "string" and pid:sub(1, 1) ~= "<" then
    local found, err = process.registry.lookup(pid)
    if not found then return nil, err end
    pid = found
  end
  local watch, werr = process.watch(pid)
  if not watch then return nil, werr end
  local started = time.now()
  local ok, err, exit = request.call_raw(pid, STOP, reason == nil and "normal" or reason, timeout, 2)
  if not ok then
    process.unwatch(pid, watch)
    return call_failed(dest, err, exit)
  end
  -- It answered just before it returns: wait for its end.
  local left = math.max(0, (timeout or 5) - (time.now() - started))
  local r = channel.select { watch:case_receive(), time.after(left):case_receive() }
  if r.channel ~= watch then
    process.unwatch(pid, watch)
    return nil, "timeout"
  end
  return true
end

return M

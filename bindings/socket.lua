-- The socket module (docs/LUA_API.md, socket): LuaSocket 3's API. TCP
-- sockets run on the workers (bindings/socket_tcp.cpp); UDP sockets and
-- name lookups are waiting calls carried out on the host's I/O thread
-- (host/io/socket_service.cpp). Either way a call that waits (connect,
-- accept, receive, send, the name lookups) suspends only the calling
-- task. require("socket") and require("socket.core") return this table,
-- shadowing LuaSocket's C module; LuaSocket's own Lua modules from the
-- distribution (socket.http, socket.url, ltn12) and clients such as
-- redis-lua run on it unmodified.
-- The chunk is called with the waiting call, the socket command and a
-- wall-clock function, and returns the module table.
local call, CMD, wall_time, new_tcp = ...
local type, error, select, setmetatable, getmetatable, tostring, pcall =
  type, error, select, setmetatable, getmetatable, tostring, pcall
local format = string.format

local socket = { _VERSION = "LuaSocket 3.0.0", _SETSIZE = 1024, BLOCKSIZE = 2048 }

local function unsupported(name)
  return function() error("not supported: " .. name, 2) end
end

---------------------------------------------------------------------------
-- Socket objects and their methods are C (bindings/socket_object.cpp):
-- a process that only holds sockets it was given never loads this file.
-- socket.tcp() makes its object on the worker; socket.udp() returns it
-- straight from the I/O thread's answer.
local function check_address(addr, n, fname)
  if type(addr) ~= "string" then
    error(format("bad argument #%d to '%s' (string expected, got %s)", n, fname, type(addr)), 3)
  end
  return addr
end

function socket.tcp() return new_tcp("unspec") end
function socket.tcp4() return new_tcp("inet") end
function socket.tcp6() return new_tcp("inet6") end
function socket.udp() return call(CMD, 0, "udp", "unspec") end
function socket.udp4() return call(CMD, 0, "udp", "inet") end
function socket.udp6() return call(CMD, 0, "udp", "inet6") end

---------------------------------------------------------------------------
-- Module functions.
function socket.connect(address, port, locaddr, locport, family)
  local make = family == "inet6" and socket.tcp6 or family == "inet" and socket.tcp4 or socket.tcp
  local s, err = make()
  if not s then return nil, err end
  if locaddr then
    local ok, berr = s:bind(locaddr, locport or 0)
    if not ok then
      s:close()
      return nil, berr
    end
  end
  local ok, cerr = s:connect(address, port)
  if not ok then
    s:close()
    return nil, cerr
  end
  return s
end
socket.connect4 = function(address, port, locaddr, locport) return socket.connect(address, port, locaddr, locport, "inet") end
socket.connect6 = function(address, port, locaddr, locport) return socket.connect(address, port, locaddr, locport, "inet6") end

function socket.bind(host, port, backlog)
  if host == "*" then host = "0.0.0.0" end
  local s, err = socket.tcp()
  if not s then return nil, err end
  s:setoption("reuseaddr", true)
  local ok, berr = s:bind(host, port)
  if not ok then
    s:close()
    return nil, berr
  end
  ok, berr = s:listen(backlog or 32)
  if not ok then
    s:close()
    return nil, berr
  end
  return s
end

socket.gettime = wall_time
function socket.sleep(secs)
  if type(secs) ~= "number" then error("bad argument #1 to 'sleep' (number expected)", 2) end
  if secs > 0 then time.sleep(secs) end
end
socket.select = unsupported("select")
socket.skip = function(d, ...) return select(d + 1, ...) end
socket.__unload = function() end

socket.dns = {
  toip = function(name)
    return call(CMD, 0, "toip", check_address(name, 1, "toip"))
  end,
  tohostname = function(addr)
    return call(CMD, 0, "tohostname", check_address(addr, 1, "tohostname"))
  end,
  getaddrinfo = function(name)
    return call(CMD, 0, "getaddrinfo", check_address(name, 1, "getaddrinfo"))
  end,
  gethostname = function()
    return call(CMD, 0, "gethostname")
  end,
  getnameinfo = unsupported("dns.getnameinfo"),
}

---------------------------------------------------------------------------
-- Error handling: try raises an error a protect'ed function returns as
-- nil, err; other errors pass through protect.
local TryError = {}

function socket.newtry(finalizer)
  return function(...)
    local ok = ...
    if ok then return ... end
    if finalizer then pcall(finalizer) end
    error(setmetatable({ (select(2, ...)) }, TryError), 0)
  end
end
socket.try = socket.newtry()

local function protected(ok, ...)
  if ok then return ... end
  local err = ...
  if getmetatable(err) == TryError then return nil, err[1] end
  error(err, 0)
end

function socket.protect(f)
  return function(...) return protected(pcall(f, ...)) end
end

---------------------------------------------------------------------------
-- ltn12 sources and sinks over sockets, by mode (socket.http adds its own
-- to these tables).
function socket.choose(table)
  return function(name, opt1, opt2)
    if type(name) ~= "string" then name, opt1, opt2 = "default", name, opt1 end
    local f = table[name or "nil"]
    if not f then error("unknown key (" .. tostring(name) .. ")", 3) end
    return f(opt1, opt2)
  end
end

local sinkt, sourcet = {}, {}
socket.sinkt, socket.sourcet = sinkt, sourcet

sinkt["close-when-done"] = function(sock)
  return function(chunk)
    if not chunk then
      sock:close()
      return 1
    end
    return sock:send(chunk)
  end
end

sinkt["keep-open"] = function(sock)
  return function(chunk)
    if chunk then return sock:send(chunk) end
    return 1
  end
end

sinkt["default"] = sinkt["keep-open"]
socket.sink = socket.choose(sinkt)

sourcet["by-length"] = function(sock, length)
  return function()
    if length <= 0 then return nil end
    local size = length < socket.BLOCKSIZE and length or socket.BLOCKSIZE
    local chunk, err = sock:receive(size)
    if err then return nil, err end
    length = length - #chunk
    return chunk
  end
end

sourcet["until-closed"] = function(sock)
  local done = false
  return function()
    if done then return nil end
    local chunk, err, partial = sock:receive(socket.BLOCKSIZE)
    if not err then return chunk end
    if err == "closed" then
      sock:close()
      done = true
      return partial
    end
    return nil, err
  end
end

sourcet["default"] = sourcet["until-closed"]
socket.source = socket.choose(sourcet)

return socket

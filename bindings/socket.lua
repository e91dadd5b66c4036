-- The socket module (SPEC section 7): LuaSocket 3's API over waiting calls
-- carried out on the host's I/O thread (bindings/socket_service.cpp), so
-- that a call that waits (connect, accept, receive, send, the name
-- lookups) suspends only the calling task. require("socket") and
-- require("socket.core") return this table, shadowing LuaSocket's C
-- module; LuaSocket's own Lua modules from the distribution (socket.http,
-- socket.url, ltn12) and clients such as redis-lua run on it unmodified.
-- The chunk is called with the waiting call, the socket command and a
-- wall-clock function and the claim of a socket that moved here, and
-- returns the module table.
local call, CMD, wall_time, claim = ...
local type, error, select, setmetatable, getmetatable, tostring, tonumber, pcall, pairs =
  type, error, select, setmetatable, getmetatable, tostring, tonumber, pcall, pairs
local format, sub, floor = string.format, string.sub, math.floor

local socket = { _VERSION = "LuaSocket 3.0.0", _SETSIZE = 1024, BLOCKSIZE = 2048 }

local function unsupported(name)
  return function() error("not supported: " .. name, 2) end
end

---------------------------------------------------------------------------
-- Socket objects are userdata (newproxy), so that the value codec knows
-- one when a message or spawn arguments carry it: the object moves (its
-- __host_socket gives the codec its id and class, and marks it given
-- away; the receiver's __adopt makes the new object and claims the socket
-- on the I/O thread). What a socket knows lives in states[s]: { id =,
-- class =, block =, total =, closed =, moved = }; its class (tcp{master},
-- tcp{client}, tcp{server}, udp{unconnected}, udp{connected}) changes as
-- LuaSocket's do, and names its methods.
local newproxy = newproxy
local states = setmetatable({}, { __mode = "k" })
local classes = {}

local proto = newproxy(true)
local SOCKET = getmetatable(proto)
SOCKET.__index = function(s, k)
  local st = states[s]
  return st and classes[st.class][k]
end
SOCKET.__tostring = function(s)
  local st = states[s]
  return format("%s: %d", st.class, st.id)
end
SOCKET.__metatable = "socket"
-- For the codec: this socket goes into a message; from now on this
-- object answers closed.
SOCKET.__host_socket = function(s)
  local st = states[s]
  st.moved = true
  return st.id, st.class
end

local function class(name, methods)
  classes[name] = methods
end

local function new(id, name)
  local s = newproxy(proto)
  states[s] = { id = id, class = name }
  return s
end

-- A socket another process gave this one (the codec's moved value).
function socket.__adopt(id, name)
  claim(id)
  return new(id, name)
end

-- The socket's state; raises where s is not a socket.
local function state(s, fname)
  local st = states[s]
  if not st then
    error(format("bad argument #1 to '%s' (socket expected, got %s)", fname, type(s)), 3)
  end
  return st
end

-- The socket's id for a call, or nil where it was given away or closed
-- here (the call then answers closed without asking).
local function check_self(s, fname)
  local st = state(s, fname)
  if st.moved or st.closed then return nil end
  return st.id
end

-- The seconds a call may wait: the block timeout, bounded by the total
-- one (both per call, from its start); nil waits for ever.
local function timeout(s)
  local st = states[s]
  local b, t = st.block, st.total
  if b == nil then return t end
  if t == nil or b < t then return b end
  return t
end

local function check_port(port, n, fname)
  local p = tonumber(port)
  if p == nil or p < 0 or p > 65535 or p % 1 ~= 0 then
    error(format("bad argument #%d to '%s' (port must be a number from 0 to 65535)", n, fname), 3)
  end
  return p
end

local function check_address(addr, n, fname)
  if type(addr) ~= "string" then
    error(format("bad argument #%d to '%s' (string expected, got %s)", n, fname, type(addr)), 3)
  end
  return addr
end

-- The methods every socket has.
local common = {}

function common:settimeout(value, mode)
  local st = state(self, "settimeout")
  if value ~= nil and type(value) ~= "number" then
    error("bad argument #1 to 'settimeout' (number expected, got " .. type(value) .. ")", 2)
  end
  if value ~= nil and value < 0 then value = nil end  -- LuaSocket: a negative value waits for ever
  mode = mode or "b"
  if mode == "b" or mode == "r" then
    st.block = value
  elseif mode == "t" then
    st.total = value
  else
    error("bad argument #2 to 'settimeout' (invalid timeout mode)", 2)
  end
  return 1
end

function common:close()
  local st = state(self, "close")
  local id = check_self(self, "close")
  st.closed = true
  if id then call(CMD, 0, "close", id) end
  return 1
end

function common:getsockname()
  return call(CMD, 0, "sockname", check_self(self, "getsockname"))
end

function common:setoption(name, value)
  local id = check_self(self, "setoption")
  if type(name) ~= "string" then error("bad argument #1 to 'setoption' (string expected)", 2) end
  return call(CMD, 0, "setoption", id, name, value)
end

function common:getoption(name)
  local id = check_self(self, "getoption")
  if type(name) ~= "string" then error("bad argument #1 to 'getoption' (string expected)", 2) end
  return call(CMD, 0, "getoption", id, name)
end

function common:dirty() return (call(CMD, 0, "dirty", check_self(self, "dirty"))) == true end
function common:getstats() return call(CMD, 0, "getstats", check_self(self, "getstats")) end
function common:setstats(received, sent, age)
  return call(CMD, 0, "setstats", check_self(self, "setstats"), received, sent, age)
end
function common:getfd() return (call(CMD, 0, "getfd", check_self(self, "getfd"))) or -1 end
common.setfd = unsupported("setfd")
function common:getfamily()
  local _, _, family = self:getsockname()
  return family
end

local function methods(...)
  local m = {}
  for k, v in pairs(common) do m[k] = v end
  for i = 1, select("#", ...) do
    for k, v in pairs((select(i, ...))) do m[k] = v end
  end
  return m
end

---------------------------------------------------------------------------
-- TCP.
local tcp_master, tcp_client, tcp_server = {}, {}, {}

function tcp_master:bind(address, port)
  local id = check_self(self, "bind")
  return call(CMD, 0, "bind", id, check_address(address, 1, "bind"), check_port(port, 2, "bind"))
end

function tcp_master:listen(backlog)
  local id = check_self(self, "listen")
  local ok, err = call(CMD, 0, "listen", id, backlog or 32)
  if ok then states[self].class = "tcp{server}" end
  return ok, err
end

function tcp_master:connect(address, port)
  local id = check_self(self, "connect")
  local ok, err = call(CMD, 0, "connect", id, check_address(address, 1, "connect"),
    check_port(port, 2, "connect"), timeout(self))
  if ok then states[self].class = "tcp{client}" end
  return ok, err
end

function tcp_server:accept()
  local id = check_self(self, "accept")
  local cid, err = call(CMD, 0, "accept", id, timeout(self))
  if not cid then return nil, err end
  local c = new(cid, "tcp{client}")
  return c
end

-- send(data[, i[, j]]): the index of the last byte of data[i..j] sent, or
-- nil, err and the last index sent before the error.
function tcp_client:send(data, i, j)
  local id = check_self(self, "send")
  if type(data) == "number" then data = tostring(data) end
  if type(data) ~= "string" then error("bad argument #1 to 'send' (string expected, got " .. type(data) .. ")", 2) end
  local len = #data
  i, j = tonumber(i) or 1, tonumber(j) or -1
  if i < 0 then i = len + i + 1 end
  if i < 1 then i = 1 end
  if j < 0 then j = len + j + 1 end
  if j > len then j = len end
  if j < i then return i - 1 end
  local piece = (i == 1 and j == len) and data or sub(data, i, j)
  local sent, err, last = call(CMD, 0, "send", id, piece, timeout(self))
  if sent then return i - 1 + sent end
  return nil, err, i - 1 + (last or 0)
end

-- receive([pattern[, prefix]]): "*l" (a line without its end, the
-- default), "*a" (until the peer closes) or a byte count; on failure
-- nil, err and what came (after prefix).
function tcp_client:receive(pattern, prefix)
  local id = check_self(self, "receive")
  local p = pattern or "*l"
  if type(p) == "number" then
    p = floor(p)
    if p < 0 then error("bad argument #1 to 'receive' (invalid receive pattern)", 2) end
    if p == 0 then return prefix or "" end
  elseif p == "*l" or p == "l" then
    p = "l"
  elseif p == "*a" or p == "a" then
    p = "a"
  else
    error("bad argument #1 to 'receive' (invalid receive pattern)", 2)
  end
  if prefix ~= nil and type(prefix) ~= "string" then prefix = tostring(prefix) end
  local data, err, partial = call(CMD, 0, "receive", id, p, timeout(self))
  if prefix then
    if data then return prefix .. data end
    return nil, err, prefix .. (partial or "")
  end
  if data then return data end
  return nil, err, partial or ""
end

-- receiveany(max): what has come, at least a byte and at most max,
-- waiting only while nothing has (OpenResty's cosocket call of that name;
-- LuaSocket has none): nil, err as receive's.
function tcp_client:receiveany(max)
  local id = check_self(self, "receiveany")
  max = tonumber(max)
  if not max or max < 1 then error("bad argument #1 to 'receiveany' (positive number expected)", 2) end
  local data, err, partial = call(CMD, 0, "receive", id, "any", timeout(self), floor(max))
  if data then return data end
  return nil, err, partial or ""
end

function tcp_client:getpeername()
  return call(CMD, 0, "peername", check_self(self, "getpeername"))
end

function tcp_client:shutdown(how)
  how = how or "both"
  if how ~= "both" and how ~= "send" and how ~= "receive" then
    error("bad argument #1 to 'shutdown' (invalid shutdown method)", 2)
  end
  return call(CMD, 0, "shutdown", check_self(self, "shutdown"), how)
end

class("tcp{master}", methods(tcp_master))
class("tcp{client}", methods(tcp_client))
class("tcp{server}", methods(tcp_server))

local function make_tcp(family)
  local id, err = call(CMD, 0, "tcp", family)
  if not id then return nil, err end
  return new(id, "tcp{master}")
end

function socket.tcp() return make_tcp("unspec") end
function socket.tcp4() return make_tcp("inet") end
function socket.tcp6() return make_tcp("inet6") end

---------------------------------------------------------------------------
-- UDP.
local udp_any, udp_unconnected, udp_connected = {}, {}, {}

function udp_any:setsockname(address, port)
  local id = check_self(self, "setsockname")
  return call(CMD, 0, "bind", id, check_address(address, 1, "setsockname"), check_port(port, 2, "setsockname"))
end

function udp_any:setpeername(address, port)
  local id = check_self(self, "setpeername")
  check_address(address, 1, "setpeername")
  if address == "*" then
    local ok, err = call(CMD, 0, "connect", id, "*", 0)
    if ok then states[self].class = "udp{unconnected}" end
    return ok, err
  end
  local ok, err = call(CMD, 0, "connect", id, address, check_port(port, 2, "setpeername"))
  if ok then states[self].class = "udp{connected}" end
  return ok, err
end

local function check_size(size)
  if size == nil then return 8192 end
  size = tonumber(size)
  if not size or size < 0 then error("bad argument #1 to 'receive' (invalid size)", 3) end
  return floor(size)
end

function udp_any:receive(size)
  local id = check_self(self, "receive")
  return call(CMD, 0, "receive", id, check_size(size), timeout(self))
end

function udp_unconnected:receivefrom(size)
  local id = check_self(self, "receivefrom")
  return call(CMD, 0, "receivefrom", id, check_size(size), timeout(self))
end

function udp_unconnected:sendto(data, address, port)
  local id = check_self(self, "sendto")
  if type(data) ~= "string" then error("bad argument #1 to 'sendto' (string expected, got " .. type(data) .. ")", 2) end
  return call(CMD, 0, "sendto", id, data, check_address(address, 2, "sendto"), check_port(port, 3, "sendto"))
end

function udp_connected:send(data)
  local id = check_self(self, "send")
  if type(data) ~= "string" then error("bad argument #1 to 'send' (string expected, got " .. type(data) .. ")", 2) end
  return call(CMD, 0, "send", id, data)
end

function udp_connected:getpeername()
  return call(CMD, 0, "peername", check_self(self, "getpeername"))
end

class("udp{unconnected}", methods(udp_any, udp_unconnected))
class("udp{connected}", methods(udp_any, udp_connected))

local function make_udp(family)
  local id, err = call(CMD, 0, "udp", family)
  if not id then return nil, err end
  return new(id, "udp{unconnected}")
end

function socket.udp() return make_udp("unspec") end
function socket.udp4() return make_udp("inet") end
function socket.udp6() return make_udp("inet6") end

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

-- ssl (docs/LUA_API.md, ssl): LuaSec's API over the host's sockets. A wrapped
-- socket stays the same socket object, of class tls{connection}: its
-- bytes are encrypted and decrypted by its task, on its worker
-- (host/io/tls_session.cpp, host/io/byte_stream.cpp), so its
-- receive completes once the plaintext it asked for is there, with the
-- socket's deadlines, owner and moves. This file only checks the
-- parameters; the methods are the socket's (bindings/socket_object.cpp).
--
--   local ssl = require("ssl")
--   local conn = assert(ssl.wrap(sock, { mode = "client", verify = "peer" }))
--   conn:sni("example.com")
--   assert(conn:dohandshake())
local type, error, pairs, ipairs, tostring, setmetatable, getmetatable, format =
  type, error, pairs, ipairs, tostring, setmetatable, getmetatable, string.format

local ssl = { _VERSION = "1.2.0 (host)" }

local Context = { __name = "SSL context" }
Context.__index = Context
Context.__tostring = function() return "SSL context" end

local protocols = { any = true, sslv23 = true, tlsv1_2 = true, tlsv1_3 = true }
local verify_words = { none = true, peer = true, client_once = true, fail_if_no_peer_cert = true }

-- Raises for the user's call of fname (depth: bad's callers above make_context).
local function bad(fname, what, msg, depth)
  error(format("bad argument #%d to '%s' (%s: %s)", fname == "wrap" and 2 or 1, fname, what, msg), 4 + (depth or 0))
end

local function optstring(params, key, fname)
  local v = params[key]
  if v ~= nil and type(v) ~= "string" then bad(fname, key, "string expected, got " .. type(v), 1) end
  return v
end

-- LuaSec's verify: a word or a list of words; whether the peer is checked.
local function check_verify(v, mode, fname)
  if v == nil then return mode == "client" end  -- the host's default: a client checks, a server does not
  local list = type(v) == "table" and v or { v }
  if type(v) ~= "string" and type(v) ~= "table" then bad(fname, "verify", "string or table expected, got " .. type(v), 1) end
  local peer = false
  for _, w in ipairs(list) do
    if type(w) ~= "string" or not verify_words[w] then
      bad(fname, "verify", "unknown verify option '" .. tostring(w) .. "' (none, peer, client_once, fail_if_no_peer_cert)", 1)
    end
    if w ~= "none" then peer = true end
  end
  return peer
end

-- The checked parameters (LuaSec's names): a context.
local function make_context(params, fname)
  if type(params) ~= "table" then error(format("bad argument #%d to '%s' (table expected, got %s)", fname == "wrap" and 2 or 1, fname, type(params)), 3) end
  if getmetatable(params) == Context then return params end
  local mode = params.mode
  if mode ~= "client" and mode ~= "server" then bad(fname, "mode", "'client' or 'server' expected, got " .. tostring(mode)) end
  local protocol = params.protocol or "any"
  if type(protocol) ~= "string" or not protocols[protocol] then
    bad(fname, "protocol", "unknown protocol '" .. tostring(protocol) .. "' (any, tlsv1_2 or tlsv1_3)")
  end
  local ctx = {
    mode = mode,
    protocol = protocol,
    verify = check_verify(params.verify, mode, fname),
    cafile = optstring(params, "cafile", fname),
    certificate = optstring(params, "certificate", fname),
    key = optstring(params, "key", fname),
  }
  if params.capath ~= nil then bad(fname, "capath", "not supported (give a cafile)") end
  if params.password ~= nil then bad(fname, "password", "not supported (give an unencrypted key)") end
  if mode == "server" and (not ctx.certificate or not ctx.key) then bad(fname, "certificate", "a server needs a certificate and a key") end
  if (ctx.certificate == nil) ~= (ctx.key == nil) then bad(fname, "key", "a certificate and its key go together") end
  -- options, ciphers, curve, depth, alpn, dhparam: OpenSSL's defaults (ignored).
  return setmetatable(ctx, Context)
end

-- ssl.newcontext(params): the parameters, checked; its files are read at
-- each wrap (where a missing one is wrap's nil, err), by the wrapping task.
function ssl.newcontext(params) return make_context(params, "newcontext") end

-- ssl.wrap(sock, params or context): the connected TCP socket as a TLS
-- connection (the same object), or nil, err.
function ssl.wrap(sock, params)
  local ctx = make_context(params, "wrap")
  if type(sock) ~= "userdata" or not tostring(sock):find("^tcp{client}") then
    if type(sock) == "userdata" and tostring(sock):find("^tls{") then return nil, "already wrapped" end
    error(format("bad argument #1 to 'wrap' (a connected tcp socket expected, got %s)", type(sock) == "userdata" and tostring(sock):match("^[^:]*") or type(sock)), 2)
  end
  -- The files are read here, in the caller's task, and their bytes handed
  -- over (host.tls_files).
  local files = require("host.tls_files")
  local ca_pem, cert_pem, key_pem, err
  if ctx.cafile and ctx.verify then
    ca_pem, err = files.read(ctx.cafile, "cafile", "CA file")
    if not ca_pem then return nil, err end
  end
  if ctx.certificate then
    cert_pem, err = files.read(ctx.certificate, "certificate", "certificate file")
    if not cert_pem then return nil, err end
    key_pem, err = files.read(ctx.key, "key", "key file")
    if not key_pem then return nil, err end
  end
  local ok
  ok, err = sock:__tlswrap(ctx.mode, ctx.protocol, ctx.verify, ctx.cafile, ctx.certificate, ctx.key,
    ca_pem, cert_pem, key_pem)
  if not ok then return nil, err end
  return sock
end

local function unsupported(name)
  return function() error("not supported: ssl." .. name, 2) end
end
ssl.loadcertificate = unsupported("loadcertificate")
ssl.checkhost = unsupported("checkhost")
ssl.config = { protocols = { tlsv1_2 = true, tlsv1_3 = true }, capabilities = {}, options = {}, algorithms = {} }

return ssl

-- http.serve (docs/LUA_API.md, stdlib: http): the server's Lua half. The listening, the
-- parsing and the limits are C++ on the I/O thread (host/io/http_server.cpp);
-- each connection is served by a process of its own, running
-- stdlib/http/conn.lua, which calls the entry's method with each request.
local call = require("host.call")
local CMD = require("host.commands").http
local type, error, tonumber, setmetatable, pairs = type, error, tonumber, setmetatable, pairs
local options = require("host.options")

local M = {}

local Server = {}
Server.__index = Server

-- Stops accepting; each connection finishes the request it is serving,
-- then closes. Idempotent. Only the process that made the server may close
-- it: the id is small and guessable, so the I/O thread checks the caller
-- (another gets nil, "denied: ...").
function Server:close()
  return call(CMD, 0, "close", self.id)
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
  if host == "" then host = "0.0.0.0" end
  return host, tonumber(port)
end

local known = {
  max_header_bytes = "number", max_body_bytes = "number", buffer_body_bytes = "number", request_timeout = "number",
  keepalive_timeout = "number", max_connections = "number", hibernate_after = "number", tls = "table",
}

local TLS_OPTIONS = { cert = true, key = true }

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
  end
  if opts.tls then
    options.check(opts.tls, TLS_OPTIONS, 2)
    local cert, key = opts.tls.cert, opts.tls.key
    if type(cert) ~= "string" or type(key) ~= "string" then
      return nil, "invalid: opts.tls needs cert and key, the PEM files of the server's certificate chain and key"
    end
    -- Read here, by the calling task: the I/O thread that makes the
    -- context never opens a file (host.tls_files).
    local files = require("host.tls_files")
    local cert_pem, err = files.read(cert, "cert", "certificate file")
    if not cert_pem then return nil, err end
    local key_pem, kerr = files.read(key, "key", "key file")
    if not key_pem then return nil, kerr end
    local given = opts
    opts = {}
    for k, v in pairs(given) do opts[k] = v end
    opts.tls = { cert = cert, key = key, cert_pem = cert_pem, key_pem = key_pem }
  end
  local id, addr = call(CMD, 0, "serve", host, port, entry, opts)
  if not id then return nil, addr end
  return setmetatable({ id = id, address = addr }, Server)
end

return M

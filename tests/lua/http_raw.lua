-- The HTTP server's tests as a client sees them: a server on a free port
-- and requests and responses written and read on raw sockets, so that a
-- test controls every byte and every close.
--   local H = require("http_raw")
--   local srv, port = H.serve { hibernate_after = 0.05 }
--   local status, headers, body = H.get(H.connect(port), "/who")
local http = require("http")
local socket = require("socket")

local M = {}

-- The test application (tests/lua/fixtures/http_app.lua).
M.APP = "fixtures.http_app:handle"

-- A server of the test application on a free port: the server and its port.
function M.serve(opts)
  local srv = assert(http.serve("127.0.0.1:0", M.APP, opts))
  return srv, tonumber(srv.address:match(":(%d+)$"))
end

function M.connect(port)
  local c = assert(socket.connect("127.0.0.1", port))
  c:settimeout(10)
  return c
end

-- One response read off a raw connection: status, headers (lower-case
-- names, repeats joined by "|"), body (content-length or chunked); nil and
-- the error where the connection ends first.
function M.read_response(c, head_only)
  local line, err = c:receive("*l")
  if not line then return nil, err end
  local status = tonumber(line:match("^HTTP/1%.%d (%d%d%d)"))
  assert(status, "status line: " .. line)
  local headers = {}
  while true do
    local h, herr = c:receive("*l")
    if not h then return nil, herr end
    if h == "" then break end
    local k, v = h:match("^([^:]+):%s*(.*)$")
    k = k:lower()
    headers[k] = headers[k] and (headers[k] .. "|" .. v) or v
  end
  if head_only or status == 204 or status == 304 or status == 100 then
    return status, headers, ""
  end
  if headers["transfer-encoding"] == "chunked" then
    local parts = {}
    while true do
      local size = tonumber(assert(c:receive("*l")), 16)
      if size == 0 then assert(c:receive("*l")) break end
      parts[#parts + 1] = assert(c:receive(size))
      assert(c:receive("*l"))
    end
    return status, headers, table.concat(parts)
  end
  local body, berr = "", nil
  if headers["content-length"] then body, berr = c:receive(tonumber(headers["content-length"])) end
  if not body then return nil, berr end
  return status, headers, body
end

-- A GET with these extra header lines, and its response as read_response.
function M.get(c, path, extra)
  assert(c:send("GET " .. path .. " HTTP/1.1\r\nHost: t\r\n" .. (extra or "") .. "\r\n"))
  return M.read_response(c)
end

-- The server closed the connection: a read returns "closed". Second, what
-- came before the close.
function M.closed(c)
  local data, err, partial = c:receive("*a")
  return (data ~= nil or err == "closed"), (data or partial)
end

-- This host's open descriptors.
function M.fds()
  local n = 0
  for _ in pairs(assert(fs.list("/proc/self/fd"))) do n = n + 1 end
  return n
end

return M

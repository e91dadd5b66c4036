-- http.client (docs/LUA_API.md, stdlib: http): HTTP/1.1 requests over the host's socket
-- module, so that a request waits without blocking a worker: only the
-- calling task is suspended while it connects, sends and receives.
--
--   local http = require("http")
--   local res, err = http.request("GET", "http://127.0.0.1:8080/items?id=1",
--     { headers = { accept = "application/json" }, timeout = 5 })
--   -- res = { status = 200, headers = { ["content-type"] = "..." }, body = "..." }
--   -- or nil, "timeout" / "connection refused" / "closed" / "invalid: ..."
--
-- request(method, url[, opts]) returns { status =, headers =, body = } or
-- nil, err. Header names are in lower case; a header the response repeats
-- is joined with ", " (RFC 9110's list form), except set-cookie, whose
-- values may hold commas: it is always a list of strings.
--
-- The request: opts.headers (names to strings, or to lists of strings for
-- a header sent more than once), opts.body (a string, sent with its
-- Content-Length). Host, User-Agent and Content-Length are set unless
-- opts.headers sets them (Content-Length must then match the body);
-- Transfer-Encoding is the client's own and refused.
--
-- The response body is read by its Content-Length, chunked (trailers are
-- read and dropped), or until the server closes; a HEAD request and 1xx,
-- 204 and 304 responses have none. Interim 1xx responses are skipped.
--
-- Time: opts.timeout (seconds, default 30) bounds the whole call, redirects
-- included; opts.connect_timeout (default: the same) bounds each connect
-- and TLS handshake within it. Past either: nil, "timeout".
--
-- Redirects are not followed unless opts.redirects = n: then 301, 302,
-- 303, 307 and 308 with a Location are followed up to n times (303, and
-- 301/302 after a POST, become a GET without the body, as browsers do;
-- Authorization and Cookie stay behind when the redirect leaves the
-- origin). More than n: nil, "limit: too many redirects (n)".
--
-- https goes through require("ssl") (LuaSec's API): the server's
-- certificate is verified (opts.ca_file, else the ssl module's default
-- store) and its name checked, unless opts.verify = false. Without an ssl
-- module, an https request returns nil, "not supported: https ...".
--
-- Connections are kept alive and reused within the process: a small pool
-- per (scheme, host, port, TLS options), at most MAX_IDLE idle connections
-- a key, each dropped after IDLE_SECONDS unused. The pool is this
-- process's own (each process loads its own copy of this module), and a
-- connection in use is out of it, so coroutines never share one. A pooled
-- connection the server has closed is found as it is taken, or, when the
-- request then fails before any byte of the response, the request is sent
-- once more on a fresh connection if its method is idempotent.
--
-- Errors: argument types that are wrong raise (a programming error);
-- values that are wrong are nil, "invalid: ..." ("invalid: bad url ...",
-- a method that is not a token, a header name or value with CR/LF). From
-- the network: the socket's words ("timeout", "connection refused", "host
-- not found", "closed" when the server closes before the response is
-- whole), "bad response: ..." for what is not HTTP/1.x, and "tls: ..."
-- for a handshake that failed (a certificate not trusted, another name).
--
-- M.close_idle() closes the process's idle pooled connections now.
local socket = require("socket")

local type, tostring, tonumber, pairs, ipairs, error, pcall, setmetatable =
  type, tostring, tonumber, pairs, ipairs, error, pcall, setmetatable
local find, sub, lower, format, byte, char, gsub, match, gmatch =
  string.find, string.sub, string.lower, string.format, string.byte, string.char,
  string.gsub, string.match, string.gmatch
local concat, remove = table.concat, table.remove
local floor = math.floor
local now = time.now

local M = {}

-- Tunables.
local DEFAULT_TIMEOUT = 30          -- seconds, the whole call
local MAX_IDLE = 4                  -- idle connections kept per pool key
local IDLE_SECONDS = 30             -- an idle connection older than this is closed, not reused
local MAX_HEADER_BYTES = 64 * 1024  -- a response's status line and headers together
local MAX_HEADER_LINES = 256
local PIECE = 1024 * 1024           -- the most one receive asks for (bounds the host's buffers)
local SEND_APART = 64 * 1024        -- a body larger than this is sent after the head, not joined to it
M.user_agent = "host-http/1.0"

local DEFAULT_PORT = { http = 80, https = 443 }
local IDEMPOTENT = { GET = true, HEAD = true, PUT = true, DELETE = true, OPTIONS = true, TRACE = true }
local REDIRECT = { [301] = true, [302] = true, [303] = true, [307] = true, [308] = true }

---------------------------------------------------------------------------
-- URLs: scheme://[user[:password]@]host[:port][/path][?query][#fragment],
-- host a name, an IPv4 address or a bracketed IPv6 one. The fragment is
-- dropped; user and password become Basic authorization.

local function bad_url(url, why)
  return nil, format("invalid: bad url %q (%s)", url, why)
end

local function unescape(s)
  return (gsub(s, "%%(%x%x)", function(h) return char(tonumber(h, 16)) end))
end

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local function base64(s)
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = byte(s, i, i + 2)
    local n = a * 65536 + (b or 0) * 256 + (c or 0)
    local d1, d2, d3, d4 = floor(n / 262144), floor(n / 4096) % 64, floor(n / 64) % 64, n % 64
    out[#out + 1] = sub(B64, d1 + 1, d1 + 1) .. sub(B64, d2 + 1, d2 + 1)
      .. (b and sub(B64, d3 + 1, d3 + 1) or "=") .. (c and sub(B64, d4 + 1, d4 + 1) or "=")
  end
  return concat(out)
end

local function parse_url(url)
  if find(url, "[%z\1-\32\127]") then return bad_url(url, "spaces or control characters") end
  local scheme, rest = match(url, "^(%a[%w+.-]*)://(.*)$")
  if not scheme then return bad_url(url, "not scheme://host/...") end
  scheme = lower(scheme)
  if not DEFAULT_PORT[scheme] then return bad_url(url, "scheme is not http or https") end
  rest = gsub(rest, "#.*$", "")
  local authority, target = match(rest, "^([^/?]*)(.*)$")
  local userinfo, hostport = match(authority, "^(.*)@([^@]*)$")
  if not userinfo then hostport = authority end
  local host, port
  if sub(hostport, 1, 1) == "[" then
    host, port = match(hostport, "^%[([%x:.]+)%]:?(%d*)$")
  else
    host, port = match(hostport, "^([%w._~%-]+):?(%d*)$")
  end
  if not host then return bad_url(url, "bad host or port") end
  local pnum = DEFAULT_PORT[scheme]
  if port ~= "" then
    pnum = tonumber(port)
    if pnum < 1 or pnum > 65535 then return bad_url(url, "port out of range") end
  end
  if target == "" or sub(target, 1, 1) == "?" then target = "/" .. target end
  local ipv6 = find(host, ":", 1, true) ~= nil
  local hosthdr = ipv6 and "[" .. host .. "]" or host
  if pnum ~= DEFAULT_PORT[scheme] then hosthdr = hosthdr .. ":" .. pnum end
  local u = {
    scheme = scheme, host = lower(host), port = pnum, target = target,
    path = match(target, "^[^?]*"), authority = hosthdr, ipv6 = ipv6,
  }
  if userinfo then
    local user, pass = match(userinfo, "^([^:]*):?(.*)$")
    u.auth = "Basic " .. base64(unescape(user) .. ":" .. unescape(pass))
  end
  return u
end

-- Path with "." and ".." segments resolved (RFC 3986 5.2.4), its query kept.
local function remove_dots(target)
  local path, query = match(target, "^([^?]*)(.*)$")
  local out = {}
  for seg in gmatch(path .. "/", "([^/]*)/") do
    if seg == ".." then
      if #out > 1 then remove(out) end
    elseif seg ~= "." then
      out[#out + 1] = seg
    end
  end
  local last = match(path, "[^/]*$")
  if last == "." or last == ".." then out[#out + 1] = "" end
  local joined = concat(out, "/")
  if sub(joined, 1, 1) ~= "/" then joined = "/" .. joined end
  return joined .. query
end

-- A Location (absolute, scheme-relative, absolute path or relative) as an
-- absolute URL against the request's.
local function resolve(base, loc)
  if match(loc, "^%a[%w+.-]*://") then return loc end
  if sub(loc, 1, 2) == "//" then return base.scheme .. ":" .. loc end
  local origin = base.scheme .. "://" .. base.authority
  local c = sub(loc, 1, 1)
  if c == "/" then return origin .. remove_dots(loc) end
  if c == "?" then return origin .. base.path .. loc end
  if loc == "" then return origin .. base.target end
  return origin .. remove_dots((match(base.path, "^(.*/)") or "/") .. loc)
end

---------------------------------------------------------------------------
-- The request head.

local TOKEN = "^[%w!#$%%&'*+%-.^_`|~]+$"

local function invalid(fmt, ...)
  return nil, "invalid: " .. format(fmt, ...)
end

-- The request's header lines (without Host), checked, and what they say
-- about framing: returns lines, has (lower-case names present), or nil, err.
local function user_headers(headers, body)
  local lines, has = {}, {}
  if headers == nil then return lines, has end
  for name, value in pairs(headers) do
    if type(name) ~= "string" then error("bad argument #3 to 'http.request' (opts.headers: names must be strings)", 3) end
    if not find(name, TOKEN) then return invalid("header name %q", name) end
    local values = value
    if type(value) ~= "table" then values = { value } end
    for _, v in ipairs(values) do
      local tv = type(v)
      if tv == "number" then v = tostring(v)
      elseif tv ~= "string" then
        error(format("bad argument #3 to 'http.request' (opts.headers[%q]: string expected, got %s)", name, tv), 3)
      end
      if find(v, "[%z\r\n]") then return invalid("header %s: value has CR, LF or NUL", name) end
      lines[#lines + 1] = name .. ": " .. v .. "\r\n"
    end
    local lname = lower(name)
    has[lname] = values[#values]
    if lname == "transfer-encoding" then
      return invalid("header Transfer-Encoding is set by the client itself")
    elseif lname == "content-length" and (#values ~= 1 or tonumber(values[1]) ~= #(body or "")) then
      return invalid("header Content-Length %s does not match the body (%d bytes)", tostring(values[1]), #(body or ""))
    end
  end
  return lines, has
end

local function request_head(method, u, lines, has, body, keep)
  local head = { method, " ", u.target, " HTTP/1.1\r\n" }
  if not has.host then head[#head + 1] = "Host: " .. u.authority .. "\r\n" end
  if not has["user-agent"] then head[#head + 1] = "User-Agent: " .. M.user_agent .. "\r\n" end
  if u.auth and not has.authorization then head[#head + 1] = "Authorization: " .. u.auth .. "\r\n" end
  for i = 1, #lines do head[#head + 1] = lines[i] end
  if not has["content-length"] and (body or method == "POST" or method == "PUT" or method == "PATCH") then
    head[#head + 1] = "Content-Length: " .. #(body or "") .. "\r\n"
  end
  if not has.connection then head[#head + 1] = keep and "Connection: keep-alive\r\n" or "Connection: close\r\n" end
  head[#head + 1] = "\r\n"
  return concat(head)
end

---------------------------------------------------------------------------
-- Waiting calls under the call's deadline: each arms the socket with the
-- time left.

local function armed(sock, deadline)
  local left = deadline - now()
  if left <= 0 then return false end
  if left > 1e9 then sock:settimeout(nil) else sock:settimeout(left) end  -- timeout = math.huge
  return true
end

local function send(sock, data, deadline)
  if not armed(sock, deadline) then return nil, "timeout" end
  local n, err = sock:send(data)
  if not n then return nil, err end
  return n
end

-- A response reader: lines come from a buffer filled by receiveany (so a
-- line is bounded and the head of a small response takes one call), body
-- bytes from the buffer first, then straight from the socket. A socket
-- without receiveany (an ssl module's) is read with "*l" instead, and
-- nothing is ever left in the buffer.
local Reader = {}
Reader.__index = Reader

local function reader(sock, deadline)
  return setmetatable({ sock = sock, deadline = deadline, buf = "",
    any = type(sock.receiveany) == "function" }, Reader)
end

local function receive(self, pattern)
  if not armed(self.sock, self.deadline) then return nil, "timeout", "" end
  return self.sock:receive(pattern)
end

-- The next line without its end (CR LF, or LF alone), or nil, err (the
-- socket's, or "too long" past max bytes).
function Reader:line(max)
  if not self.any then
    local line, err = receive(self, "*l")
    if line and #line > max then return nil, "too long" end
    return line, err
  end
  local from = 1
  while true do
    local buf = self.buf
    local i = find(buf, "\n", from, true)
    if i then
      self.buf = sub(buf, i + 1)
      if i > 1 and byte(buf, i - 1) == 13 then i = i - 1 end
      return sub(buf, 1, i - 1)
    end
    if #buf > max then return nil, "too long" end
    from = #buf + 1
    if not armed(self.sock, self.deadline) then return nil, "timeout" end
    local more, err = self.sock:receiveany(16384)
    if not more then return nil, err end
    self.buf = buf .. more
  end
end

-- Exactly n bytes into out, in pieces the host buffers comfortably.
function Reader:take(n, out)
  local buf = self.buf
  if #buf >= n then
    out[#out + 1] = sub(buf, 1, n)
    self.buf = sub(buf, n + 1)
    return true
  end
  if buf ~= "" then
    out[#out + 1] = buf
    n = n - #buf
    self.buf = ""
  end
  while n > 0 do
    local piece, err = receive(self, n < PIECE and n or PIECE)
    if not piece then return nil, err end
    out[#out + 1] = piece
    n = n - #piece
  end
  return true
end

-- Everything until the server closes, into out.
function Reader:rest(out)
  out[#out + 1] = self.buf
  self.buf = ""
  while true do
    local piece, err, partial = receive(self, PIECE)
    if piece then
      out[#out + 1] = piece
    elseif err == "closed" then
      out[#out + 1] = partial
      return true
    else
      return nil, err
    end
  end
end

-- A line of the response's head or a chunked body's framing: the
-- reader's errors, with "too long" named.
local function framing_line(r, max, what)
  local line, err = r:line(max)
  if line then return line end
  if err == "too long" then return nil, "bad response: " .. what .. " too large" end
  return nil, err
end

local function read_chunked(r, out)
  while true do
    local line, err = framing_line(r, 1024, "chunk size line")
    if not line then return nil, err end
    local hex = match(line, "^%s*(%x+)%s*;?")
    if not hex or #hex > 12 then return nil, "bad response: chunk size line " .. format("%q", sub(line, 1, 80)) end
    local size = tonumber(hex, 16)
    if size == 0 then break end
    local ok, rerr = r:take(size, out)
    if not ok then return nil, rerr end
    line, err = framing_line(r, 1024, "chunk")
    if not line then return nil, err end
    if line ~= "" then return nil, "bad response: chunk longer than its size" end
  end
  -- Trailers, dropped, up to the empty line.
  local left = MAX_HEADER_BYTES
  while true do
    local line, err = framing_line(r, left, "trailers")
    if not line then return nil, err end
    if line == "" then return true end
    left = left - #line
  end
end

---------------------------------------------------------------------------
-- The response.

-- Whether a comma-separated header value holds token (case-insensitive).
local function has_token(value, token)
  if not value then return false end
  for t in gmatch(lower(value), "[^,%s]+") do
    if t == token then return true end
  end
  return false
end

-- Status line and headers, skipping interim 1xx responses. Returns the
-- response table and the HTTP minor version, or nil, err, started (true
-- once any of the response has come).
local function read_head(r)
  local started = false
  while true do
    local line, err = framing_line(r, MAX_HEADER_BYTES, "status line")
    if not line then return nil, err, started end
    started = true
    local minor, status = match(line, "^HTTP/1%.(%d) (%d%d%d)")
    if not minor then return nil, "bad response: status line " .. format("%q", sub(line, 1, 80)), true end
    status = tonumber(status)
    local headers, left, count, last = {}, MAX_HEADER_BYTES - #line, 0, nil
    while true do
      line, err = framing_line(r, left, "headers")
      if not line then return nil, err, true end
      if line == "" then break end
      left, count = left - #line, count + 1
      if count > MAX_HEADER_LINES then return nil, "bad response: headers too large", true end
      -- A CR that does not end the line would reach the caller inside a
      -- value, where a proxy or log that takes it for a line end sees
      -- headers the server never sent.
      if find(line, "\r", 1, true) then
        return nil, "bad response: header line " .. format("%q", sub(line, 1, 80)) .. " holds a CR", true
      end
      local name, value = match(line, "^([^:%s]+):%s*(.-)%s*$")
      if name then
        name = lower(name)
        local old = headers[name]
        if name == "set-cookie" then
          if old then old[#old + 1] = value else headers[name] = { value } end
        elseif old then
          headers[name] = old .. ", " .. value
        else
          headers[name] = value
        end
        last = name
      elseif find(line, "^[ \t]") and last and last ~= "set-cookie" then
        headers[last] = headers[last] .. " " .. match(line, "^%s*(.-)%s*$")  -- obsolete folding
      else
        return nil, "bad response: header line " .. format("%q", sub(line, 1, 80)), true
      end
    end
    if status >= 200 or status == 101 then
      return { status = status, headers = headers }, tonumber(minor)
    end
  end
end

-- The body, by the response's framing. Returns the body and whether the
-- connection can carry another request, or nil, err.
local function read_body(r, method, res, minor)
  local status, h = res.status, res.headers
  local keep = minor >= 1 and not has_token(h.connection, "close")
    or minor == 0 and has_token(h.connection, "keep-alive")
  if status < 200 then return "", false end  -- 101: the connection is no longer HTTP's
  if method == "HEAD" or status == 204 or status == 304 then return "", keep end
  local out = {}
  local te = h["transfer-encoding"]
  if te then
    if match(lower(te), "chunked%s*$") then
      local ok, err = read_chunked(r, out)
      if not ok then return nil, err end
      return concat(out), keep
    end
    local ok, err = r:rest(out)
    if not ok then return nil, err end
    return concat(out), false
  end
  local cl = h["content-length"]
  if cl then
    local n
    for v in gmatch(cl, "[^,]+") do
      local d = match(v, "^%s*(%d+)%s*$")
      if not d or (n and tonumber(d) ~= n) or #d > 15 then
        return nil, "bad response: Content-Length " .. format("%q", sub(cl, 1, 80))
      end
      n = tonumber(d)
    end
    local ok, err = r:take(n, out)
    if not ok then return nil, err end
    return concat(out), keep
  end
  local ok, err = r:rest(out)
  if not ok then return nil, err end
  return concat(out), false
end

---------------------------------------------------------------------------
-- Connections: the pool, connecting, TLS.

-- pool[key] = list of { sock =, since = }, the most recently used last.
local pool = {}

local function pool_key(u, opts)
  if u.scheme == "https" then
    return format("https|%s|%d|%s|%s", u.host, u.port, tostring(opts.verify ~= false), tostring(opts.ca_file))
  end
  return format("http|%s|%d", u.host, u.port)
end

-- Whether an idle socket still looks usable: nothing to read and not
-- closed by the server (a zero-time receive answers timeout).
local function looks_alive(sock)
  sock:settimeout(0)
  local ok, v, err = pcall(sock.receive, sock, 1)
  return ok and v == nil and (err == "timeout" or err == "wantread")
end

-- The probe and close yield, and other coroutines of the process take
-- and give meanwhile: each connection leaves its list before a call that
-- yields, and a key's list, once made, stays (until close_idle).
local function take(key)
  local list = pool[key]
  if not list then return nil end
  while #list > 0 do
    local c = remove(list)
    if now() - c.since <= IDLE_SECONDS and looks_alive(c.sock) then return c.sock end
    c.sock:close()
  end
  return nil
end

local function give(key, sock)
  local list = pool[key]
  if not list then
    list = {}
    pool[key] = list
  end
  local oldest = #list >= MAX_IDLE and remove(list, 1)
  list[#list + 1] = { sock = sock, since = now() }
  if oldest then oldest.sock:close() end
end

-- Closes this process's idle connections (those in use stay open and
-- go back to the pool after their request).
function M.close_idle()
  local old = pool
  pool = {}
  for _, list in pairs(old) do
    for _, c in ipairs(list) do c.sock:close() end
  end
end

local ssl_module, ssl_error = nil, nil
local function load_ssl()
  if ssl_module == nil and ssl_error == nil then
    local ok, mod = pcall(require, "ssl")
    if ok and type(mod) == "table" and mod.wrap then ssl_module = mod
    elseif ok then ssl_error = "require(\"ssl\") has no wrap"
    else ssl_error = (gsub(match(tostring(mod), "^[^\n]*"), ":$", "")) end
  end
  return ssl_module, ssl_error
end

-- Whether the certificate's names cover host: subjectAltName's DNS names
-- (a "*." wildcard covers one leftmost label) or IP addresses, else the
-- subject's common name when there are no DNS names. Nil when the ssl
-- module offers no certificate to read (it then answers for the check).
local function cert_matches(conn, host, ipv6)
  if type(conn.getpeercertificate) ~= "function" then return nil end
  local ok, cert = pcall(conn.getpeercertificate, conn)
  if not ok or not cert or type(cert.extensions) ~= "function" then return nil end
  local is_ip = ipv6 or match(host, "^%d+%.%d+%.%d+%.%d+$") ~= nil
  local _, ext = pcall(cert.extensions, cert)
  local san = type(ext) == "table" and ext["2.5.29.17"] or nil
  local dns = san and san.dNSName
  if is_ip then
    for _, ip in ipairs(san and san.iPAddress or {}) do
      if lower(ip) == host then return true end
    end
    return false
  end
  local function covers(pattern)
    pattern = lower(pattern)
    if pattern == host then return true end
    local rest = match(pattern, "^%*(%..+%..+)$")
    return rest ~= nil and sub(host, -#rest) == rest and not find(sub(host, 1, -#rest - 1), "[.]")
      and #host > #rest
  end
  if dns and #dns > 0 then
    for _, name in ipairs(dns) do
      if covers(name) then return true end
    end
    return false
  end
  local sok, subject = pcall(cert.subject, cert)
  if sok and type(subject) == "table" then
    for _, entry in ipairs(subject) do
      if entry.name == "commonName" or entry.oid == "2.5.4.3" then
        if covers(entry.value) then return true end
      end
    end
  end
  return false
end

local function start_tls(sock, u, opts, deadline)
  local conn, err = ssl_module.wrap(sock, {
    mode = "client", protocol = "any",
    verify = opts.verify == false and "none" or "peer",
    cafile = opts.ca_file,
    options = "all",
  })
  if not conn then return nil, "tls: " .. tostring(err) end
  -- The host's ssl takes an address here too (no SNI sent: the check is
  -- against the certificate's IP addresses).
  if conn.sni then conn:sni(u.host) end
  while true do
    if not armed(conn, deadline) then return nil, "timeout" end
    local ok, herr = conn:dohandshake()
    if ok then break end
    if herr ~= "wantread" and herr ~= "wantwrite" then
      if herr == "timeout" or herr == "closed" then return nil, herr end
      return nil, "tls: " .. tostring(herr)
    end
    time.sleep(0.001)
  end
  if opts.verify ~= false and cert_matches(conn, u.host, u.ipv6) == false then
    conn:close()
    return nil, "tls: certificate does not match host " .. u.host
  end
  return conn
end

local function connect(u, opts, deadline)
  if u.scheme == "https" then
    local ssl, why = load_ssl()
    if not ssl then return nil, "not supported: https needs require(\"ssl\"): " .. why end
  end
  local left = deadline - now()
  if left <= 0 then return nil, "timeout" end
  local cdeadline = deadline
  if opts.connect_timeout and opts.connect_timeout < left then cdeadline = now() + opts.connect_timeout end
  local sock, err = socket.tcp()
  if not sock then return nil, err end
  armed(sock, cdeadline)
  local ok, cerr = sock:connect(u.host, u.port)
  if not ok then
    sock:close()
    return nil, cerr
  end
  sock:setoption("tcp-nodelay", true)
  if u.scheme == "https" then
    local conn, terr = start_tls(sock, u, opts, cdeadline)
    if not conn then
      sock:close()
      return nil, terr
    end
    return conn
  end
  return sock
end

---------------------------------------------------------------------------
-- One request and its response on one connection. Returns the response,
-- or nil, err, retry (true when it failed before any of the response came
-- back: the request may be sent again elsewhere).
local function exchange(sock, method, head, body, deadline)
  local ok, err
  if body and #body > SEND_APART then
    ok, err = send(sock, head, deadline)
    if ok then ok, err = send(sock, body, deadline) end
  else
    ok, err = send(sock, body and head .. body or head, deadline)
  end
  if not ok then return nil, err, true end
  local r = reader(sock, deadline)
  local res, minor, started = read_head(r)
  if not res then return nil, minor, not started end
  local body_or_nil, keep = read_body(r, method, res, minor)
  if not body_or_nil then return nil, keep end
  res.body = body_or_nil
  return res, keep and r.buf == ""  -- bytes past the response: not HTTP we can trust
end

-- One request, without redirects, on a pooled or a fresh connection.
local function request_once(method, u, opts, lines, has, body, deadline)
  local key = pool_key(u, opts)
  local want_keep = not has_token(has.connection, "close")
  local head = request_head(method, u, lines, has, body, want_keep)
  local sock = want_keep and take(key)
  local reused = sock and true or false
  for _ = 1, 2 do
    if not sock then
      local err
      sock, err = connect(u, opts, deadline)
      if not sock then return nil, err end
    end
    local res, keep_or_err, retry = exchange(sock, method, head, body, deadline)
    if res then
      if keep_or_err and want_keep then give(key, sock) else sock:close() end
      return res
    end
    sock:close()
    sock = nil
    if not (reused and retry and IDEMPOTENT[method] and keep_or_err ~= "timeout") then return nil, keep_or_err end
    reused = false
  end
end

---------------------------------------------------------------------------
-- request(method, url[, opts])

local OPTION = {
  headers = "table", body = "string", timeout = "number", connect_timeout = "number",
  redirects = "number", ca_file = "string", verify = "boolean",
}

function M.request(method, url, opts)
  if type(method) ~= "string" then
    error("bad argument #1 to 'http.request' (string expected, got " .. type(method) .. ")", 2)
  end
  if type(url) ~= "string" then
    error("bad argument #2 to 'http.request' (string expected, got " .. type(url) .. ")", 2)
  end
  if opts == nil then opts = {} end
  if type(opts) ~= "table" then
    error("bad argument #3 to 'http.request' (table expected, got " .. type(opts) .. ")", 2)
  end
  require("host.options").check(opts, OPTION, 2)
  for k, v in pairs(opts) do
    local want = OPTION[k]
    if type(v) ~= want then
      error(format("bad argument #3 to 'http.request' (opts.%s: %s expected, got %s)", k, want, type(v)), 2)
    end
  end
  -- A NUL byte would cut the host name (or a file's name) short, so
  -- another than the one named would be reached.
  if find(url, "\0", 1, true) then return nil, "invalid: url contains a NUL byte" end
  if opts.ca_file and find(opts.ca_file, "\0", 1, true) then return nil, "invalid: ca_file contains a NUL byte" end
  if not find(method, TOKEN) then return invalid("method %q", method) end
  local timeout = opts.timeout or DEFAULT_TIMEOUT
  if timeout ~= timeout or timeout < 0 then return invalid("timeout %s", tostring(timeout)) end
  if opts.connect_timeout and not (opts.connect_timeout >= 0) then
    return invalid("connect_timeout %s", tostring(opts.connect_timeout))
  end
  local redirects = opts.redirects or 0
  if redirects < 0 or redirects ~= floor(redirects) then return invalid("redirects %s", tostring(redirects)) end
  local deadline = now() + timeout
  local u, err = parse_url(url)
  if not u then return nil, err end
  local body = opts.body
  local lines, has = user_headers(opts.headers, body)
  if not lines then return nil, has end

  local followed = 0
  while true do
    local res, rerr = request_once(method, u, opts, lines, has, body, deadline)
    if not res then return nil, rerr end
    local location = res.headers.location
    if not (REDIRECT[res.status] and location and redirects > 0) then return res end
    if followed >= redirects then return nil, "limit: too many redirects (" .. redirects .. ")" end
    followed = followed + 1
    local nu, uerr = parse_url(resolve(u, location))
    if not nu then return nil, "bad response: redirect to " .. sub(uerr, #"invalid: " + 1) end
    if res.status == 303 and method ~= "HEAD"
      or (res.status == 301 or res.status == 302) and method == "POST" then
      method, body = "GET", nil
      local kept = {}
      for name, value in pairs(opts.headers or {}) do
        local l = lower(name)
        if l ~= "content-length" and l ~= "content-type" then kept[name] = value end
      end
      lines, has = user_headers(kept, nil)
      opts = setmetatable({ headers = kept }, { __index = opts })
    end
    if nu.scheme ~= u.scheme or nu.host ~= u.host or nu.port ~= u.port then
      local kept = {}
      for name, value in pairs(opts.headers or {}) do
        local l = lower(name)
        if l ~= "authorization" and l ~= "cookie" and l ~= "host" then kept[name] = value end
      end
      lines, has = user_headers(kept, body)
      opts = setmetatable({ headers = kept }, { __index = opts })
    end
    u = nu
  end
end

return M

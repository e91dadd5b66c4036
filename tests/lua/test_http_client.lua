-- http.request (the client) against a python peer the
-- test starts on a loopback port: python's http.server with handlers of
-- our own for each framing, the slow, the redirecting and the dropping.
local T = require("t")
local http = require("http")
local socket = require("socket")

-- The peer. GET /count answers how many connections it has accepted so
-- far; /drop-next makes the connection's next request get no answer (the
-- connection closes as if it had gone stale in the pool).
local PEER = [=[
import socket, sys, time, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

lock = threading.Lock()
connections = 0
BIG = bytes(range(256)) * (5 * 1024 * 1024 // 256)

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def setup(self):
        global connections
        with lock:
            connections += 1
        self.drop_next = False
        super().setup()

    def reply(self, status, body, headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def do_any(self):
        body = self.read_body()
        if self.drop_next:
            self.close_connection = True
            return
        p = self.path
        if p == "/plain":
            self.reply(200, b"hello", [("Content-Type", "text/plain")])
        elif p == "/count":
            with lock:
                n = connections
            self.reply(200, str(n).encode())
        elif p == "/close-soon":
            self.reply(200, b"closing soon")
            self.wfile.flush()
            threading.Timer(0.1, self.connection.shutdown, [socket.SHUT_RDWR]).start()
        elif p == "/drop-next":
            self.drop_next = True
            self.reply(200, b"next one drops")
        elif p == "/echo":
            names = ",".join(k for k in self.headers.keys())
            self.reply(200, body, [("X-Method", self.command), ("X-Names", names),
                                   ("X-Target", self.path), ("X-Host", self.headers["Host"]),
                                   ("X-Multi", "|".join(self.headers.get_all("X-Multi") or []))])
        elif p.startswith("/echo?"):
            self.reply(200, body, [("X-Method", self.command), ("X-Target", self.path)])
        elif p == "/chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"5\r\nhello\r\n6;name=value\r\n, worl\r\n1\r\nd\r\n0\r\nX-Trailer: t\r\n\r\n")
        elif p == "/chunked-big":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            step = 300000
            for i in range(0, len(BIG), step):
                part = BIG[i:i + step]
                self.wfile.write(b"%x\r\n" % len(part) + part + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
        elif p == "/big":
            self.reply(200, BIG)
        elif p == "/until-close":
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"all of it, then the end")
            self.close_connection = True
        elif p == "/early-close":
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part")
            self.close_connection = True
        elif p == "/garbage":
            self.wfile.write(b"SSH-2.0-OpenSSH\r\n\r\n")
            self.close_connection = True
        elif p == "/bare-cr":
            self.wfile.write(b"HTTP/1.1 200 OK\r\nX-A: a\rSet-Cookie: forged=1\r\nContent-Length: 2\r\n\r\nok")
            self.close_connection = True
        elif p == "/bare-lf":
            self.wfile.write(b"HTTP/1.1 200 OK\nX-A: 1\nContent-Length: 2\n\nok")
        elif p == "/huge-header":
            self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Big: " + b"x" * 200000 + b"\r\n\r\n")
            self.close_connection = True
        elif p == "/wait":
            time.sleep(0.3)
            self.reply(200, b"waited")
        elif p == "/slow":
            time.sleep(3)
            self.reply(200, b"late")
        elif p == "/headers":
            self.send_response(200)
            self.send_header("X-Mixed-Case", "Value Kept")
            self.send_header("x-rep", "a")
            self.send_header("X-REP", "b")
            self.send_header("Set-Cookie", "a=1; Expires=Wed, 21 Oct 2037 07:28:00 GMT")
            self.send_header("Set-Cookie", "b=2")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif p == "/no-content":
            self.send_response(204)
            self.end_headers()
        elif p.startswith("/hops/"):
            n = int(p[len("/hops/"):])
            if n == 0:
                self.reply(200, b"arrived")
            else:
                self.reply(302, b"", [("Location", "/hops/%d" % (n - 1))])
        elif p == "/see-other":
            self.reply(303, b"", [("Location", "echo")])
        elif p == "/moved":
            self.reply(301, b"", [("Location", "http://127.0.0.1:%d/echo?from=moved" % port)])
        elif p == "/temporary":
            self.reply(307, b"", [("Location", "/echo?from=307")])
        elif p == "/loop":
            self.reply(302, b"", [("Location", "/loop")])
        else:
            self.reply(404, b"not found")

    do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = do_any

class Server(ThreadingHTTPServer):
    request_queue_size = 64  # listen's backlog: python's 5 drops the SYNs of a burst

    def handle_error(self, request, client_address):
        pass  # the connections the tests cut short: no tracebacks into a pipe nobody reads

port = int(sys.argv[1])
server = Server(("127.0.0.1", port), Handler)
server.daemon_threads = True
if len(sys.argv) > 3:  # https: CERT KEY
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[2], sys.argv[3])
    server.socket = ctx.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
server.serve_forever()
]=]

local peers, base, dir = {}, nil, nil

-- Starts the peer (https with a certificate and its key) on a free port;
-- returns its base URL.
local function start_peer(cert, key)
  local port = T.free_port()
  local argv = { "python3", dir .. "/peer.py", tostring(port), cert, key }
  peers[#peers + 1] = assert(exec.start(argv))
  T.ok(T.wait_port(port, 10), "the python peer started")
  return (cert and "https" or "http") .. "://127.0.0.1:" .. port
end

local function stop_peers()
  for _, p in ipairs(peers) do
    p:kill()
    p:wait()
  end
  if dir then os.execute("rm -rf " .. dir) end
end

local function count(url, opts)
  local res = assert(http.request("GET", (url or base) .. "/count", opts))
  return tonumber(res.body)
end

-- A self-signed certificate for names (openssl's subjectAltName list):
-- the paths of the certificate and its key.
local function certificate(name, alt)
  local cert, key = dir .. "/" .. name .. ".pem", dir .. "/" .. name .. ".key"
  local r = assert(exec.run({ "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
    "-keyout", key, "-out", cert, "-subj", "/CN=" .. name, "-addext", "subjectAltName=" .. alt }, { timeout = 30 }))
  T.eq(r.code, 0, "openssl made a certificate: " .. r.stderr)
  return cert, key
end

local function big(n)
  local t = {}
  for i = 0, 255 do t[#t + 1] = string.char(i) end
  return string.rep(table.concat(t), n / 256)
end

local function cases()
  return {
    { "a GET with a content-length body", function()
      local res, err = http.request("GET", base .. "/plain")
      T.eq(err, nil)
      T.eq(res.status, 200)
      T.eq(res.body, "hello")
      T.eq(res.headers["content-type"], "text/plain")
      T.eq(res.headers["content-length"], "5")
      local missing = assert(http.request("GET", base .. "/nowhere"))
      T.eq(missing.status, 404, "a 404 is a response, not an error")
    end },
    { "a chunked body, its extensions and trailers dropped", function()
      local res = assert(http.request("GET", base .. "/chunked"))
      T.eq(res.body, "hello, world")
      T.eq(res.headers["x-trailer"], nil)
      T.eq(assert(http.request("GET", base .. "/plain")).body, "hello", "the connection went on after it")
    end },
    { "a body read until the server closes", function()
      local res = assert(http.request("GET", base .. "/until-close"))
      T.eq(res.body, "all of it, then the end")
    end },
    { "a server that closes before the body is whole: closed", function()
      local res, err = http.request("GET", base .. "/early-close")
      T.eq(res, nil)
      T.eq(err, "closed")
    end },
    { "a server that does not speak HTTP: bad response", function()
      local res, err = http.request("GET", base .. "/garbage")
      T.eq(res, nil)
      T.match(err, "^bad response: status line")
    end },
    { "lines ended by LF alone are read; a header past 64 KB is refused", function()
      local res = assert(http.request("GET", base .. "/bare-lf"))
      T.eq(res.headers["x-a"], "1")
      T.eq(res.body, "ok")
      local err
      res, err = http.request("GET", base .. "/huge-header")
      T.eq(res, nil)
      T.eq(err, "bad response: headers too large")
    end },
    { "a CR alone inside a response's header line is refused: bad response", function()
      local res, err = http.request("GET", base .. "/bare-cr")
      T.eq(res, nil, "no response with a CR in a header value")
      T.match(err, "^bad response: header line .* holds a CR")
      T.eq(assert(http.request("GET", base .. "/plain")).body, "hello", "the next request is served")
    end },
    { "HEAD and 204 have no body", function()
      local res = assert(http.request("HEAD", base .. "/plain"))
      T.eq(res.status, 200)
      T.eq(res.body, "")
      T.eq(res.headers["content-length"], "5")
      res = assert(http.request("GET", base .. "/no-content"))
      T.eq(res.status, 204)
      T.eq(res.body, "")
      T.eq(assert(http.request("GET", base .. "/plain")).body, "hello", "the connection went on after them")
    end },
    { "a POST body goes with its content-length; header names are sent as given", function()
      local res = assert(http.request("POST", base .. "/echo", {
        body = "a=1&b=2", headers = { ["X-Mixed-Case"] = "yes", ["content-type"] = "text/plain" } }))
      T.eq(res.body, "a=1&b=2")
      T.eq(res.headers["x-method"], "POST")
      local names = "," .. res.headers["x-names"] .. ","
      T.match(names, ",X%-Mixed%-Case,")
      T.match(names, ",Host,")
      T.match(names, ",User%-Agent,")
      T.match(names, ",Content%-Length,")
      res = assert(http.request("GET", base .. "/echo", { headers = { ["X-Multi"] = { "one", "two" }, Host = "example.test" } }))
      T.eq(res.headers["x-multi"], "one|two", "a list sends the header once per value")
      T.eq(res.headers["x-host"], "example.test", "a Host of your own replaces the default")
      res = assert(http.request("GET", base .. "/echo"))
      T.eq(res.headers["x-host"], base:sub(8), "the default Host names the port")
      res = assert(http.request("PUT", base .. "/echo"))
      T.eq(res.body, "", "a PUT without a body sends Content-Length: 0")
    end },
    { "response header names in lower case, repeats joined, set-cookie a list", function()
      local res = assert(http.request("GET", base .. "/headers"))
      T.eq(res.headers["x-mixed-case"], "Value Kept")
      T.eq(res.headers["X-Mixed-Case"], nil)
      T.eq(res.headers["x-rep"], "a, b")
      local cookies = res.headers["set-cookie"]
      T.eq(type(cookies), "table")
      T.eq(#cookies, 2)
      T.eq(cookies[1], "a=1; Expires=Wed, 21 Oct 2037 07:28:00 GMT")
      T.eq(cookies[2], "b=2")
    end },
    { "connections are kept alive and reused", function()
      require("http.client").close_idle()
      local before = count()
      for _ = 1, 10 do T.eq(assert(http.request("GET", base .. "/plain")).body, "hello") end
      T.eq(count(), before, "count's own connection carried all of them")
      local res = assert(http.request("GET", base .. "/plain", { headers = { Connection = "close" } }))
      T.eq(res.body, "hello")
      T.eq(count(), before + 1, "a Connection: close request has one of its own")
      T.eq(count(), before + 1, "and the pooled one is still there")
    end },
    { "concurrent requests in one process each get a connection, all pooled after", function()
      require("http.client").close_idle()
      local before = count()
      local done = channel.new(3)
      for _ = 1, 3 do
        coroutine.spawn(function() done:send(assert(http.request("GET", base .. "/plain")).body) end)
      end
      for _ = 1, 3 do T.eq(done:receive(), "hello") end
      T.eq(count(), before + 2, "the pooled one and two new")
      for _ = 1, 3 do
        coroutine.spawn(function() done:send(assert(http.request("GET", base .. "/plain")).body) end)
      end
      for _ = 1, 3 do T.eq(done:receive(), "hello") end
      T.eq(count(), before + 2, "the three reused")
    end },
    { "at most 4 idle connections a key are kept", function()
      require("http.client").close_idle()
      local before = count()
      local done = channel.new(10)
      local function wave()
        -- All ten in flight at once: the peer holds each response 0.3 s.
        for _ = 1, 10 do
          coroutine.spawn(function() done:send(assert(http.request("GET", base .. "/wait")).body) end)
        end
        for _ = 1, 10 do T.eq(done:receive(), "waited") end
      end
      wave()
      T.eq(count(), before + 9, "the pooled one and nine new")
      wave()
      T.eq(count(), before + 15, "four kept and reused, six new")
    end },
    { "a pooled connection that went stale: an idempotent request is sent again", function()
      require("http.client").close_idle()
      local before = count()
      T.eq(assert(http.request("GET", base .. "/drop-next")).body, "next one drops")
      local res, err = http.request("GET", base .. "/plain")
      T.eq(err, nil)
      T.eq(res.body, "hello")
      T.eq(count(), before + 1, "a fresh connection")
      T.eq(assert(http.request("GET", base .. "/drop-next")).body, "next one drops")
      res, err = http.request("POST", base .. "/echo", { body = "once" })
      T.eq(res, nil, "a POST is not sent twice")
      T.eq(err, "closed")
    end },
    { "a pooled connection the server has closed is not taken, even for a POST", function()
      require("http.client").close_idle()
      local before = count()
      T.eq(assert(http.request("GET", base .. "/close-soon")).body, "closing soon")
      time.sleep(0.3)  -- the peer shuts the idle connection down meanwhile
      local res, err = http.request("POST", base .. "/echo", { body = "x" })
      T.eq(err, nil)
      T.eq(res.body, "x")
      T.eq(count(), before + 1, "a fresh connection")
    end },
    { "a slow response: timeout, on time", function()
      local t0 = time.now()
      local res, err = http.request("GET", base .. "/slow", { timeout = 0.3 })
      T.eq(res, nil)
      T.eq(err, "timeout")
      local took = time.now() - t0
      T.ok(took >= 0.29 and took < 2, "took " .. took .. " s")
      T.eq(assert(http.request("GET", base .. "/plain")).body, "hello", "the client goes on")
    end },
    { "a connect that does not complete: timeout after connect_timeout", function()
      -- A listener with a backlog of 0 that never accepts: once its queue
      -- is full, the kernel drops further SYNs and a connect waits.
      local srv = assert(socket.tcp())
      assert(srv:bind("127.0.0.1", 0))
      assert(srv:listen(0))
      local _, port = srv:getsockname()
      local held = {}
      for _ = 1, 8 do
        local c = socket.tcp()
        c:settimeout(0.2)
        held[#held + 1] = c
        if not c:connect("127.0.0.1", port) then break end
      end
      local t0 = time.now()
      local res, err = http.request("GET", "http://127.0.0.1:" .. port .. "/", { connect_timeout = 0.2, timeout = 5 })
      local took = time.now() - t0
      T.eq(res, nil)
      T.eq(err, "timeout")
      T.ok(took >= 0.19 and took < 2, "took " .. took .. " s")
      for _, c in ipairs(held) do c:close() end
      srv:close()
    end },
    { "a refused port: connection refused", function()
      local res, err = http.request("GET", "http://127.0.0.1:" .. T.free_port() .. "/")
      T.eq(res, nil)
      T.eq(err, "connection refused")
    end },
    { "redirects are not followed unless asked", function()
      local res = assert(http.request("GET", base .. "/hops/2"))
      T.eq(res.status, 302)
      T.eq(res.headers.location, "/hops/1")
      res = assert(http.request("GET", base .. "/hops/2", { redirects = 2 }))
      T.eq(res.status, 200)
      T.eq(res.body, "arrived")
      local err
      res, err = http.request("GET", base .. "/hops/3", { redirects = 2 })
      T.eq(res, nil)
      T.eq(err, "limit: too many redirects (2)")
      res, err = http.request("GET", base .. "/loop", { redirects = 5 })
      T.eq(err, "limit: too many redirects (5)")
    end },
    { "303, and 301 after a POST, become a GET without the body; 307 keeps both", function()
      local res = assert(http.request("POST", base .. "/see-other", { body = "data", redirects = 1,
        headers = { ["Content-Type"] = "text/plain" } }))
      T.eq(res.status, 200)
      T.eq(res.headers["x-method"], "GET")
      T.eq(res.body, "")
      T.ok(not ("," .. res.headers["x-names"] .. ","):find(",Content%-Type,"), "content-type dropped")
      res = assert(http.request("POST", base .. "/moved", { body = "data", redirects = 1 }))
      T.eq(res.headers["x-method"], "GET")
      T.eq(res.headers["x-target"], "/echo?from=moved")
      res = assert(http.request("POST", base .. "/temporary", { body = "data", redirects = 1 }))
      T.eq(res.headers["x-method"], "POST")
      T.eq(res.headers["x-target"], "/echo?from=307")
      T.eq(res.body, "data")
    end },
    { "5 MB each way: a request body and content-length and chunked responses", function()
      local data = big(5 * 1024 * 1024)
      local res = assert(http.request("POST", base .. "/echo", { body = data, timeout = 20 }))
      T.eq(#res.body, #data)
      T.ok(res.body == data, "the echoed body is the one sent")
      res = assert(http.request("GET", base .. "/big", { timeout = 20 }))
      T.ok(res.body == data, "a 5 MB content-length body")
      res = assert(http.request("GET", base .. "/chunked-big", { timeout = 20 }))
      T.ok(res.body == data, "a 5 MB chunked body")
    end },
    { "bad arguments: invalid values return nil, err; wrong types raise", function()
      local function fails(pattern, ...)
        local res, err = http.request(...)
        T.eq(res, nil)
        T.match(err, pattern)
      end
      fails('^invalid: method "GE T"', "GE T", base .. "/plain")
      fails("^invalid: bad url", "GET", "ftp://example.com/")
      fails("^invalid: bad url", "GET", "http://")
      fails("^invalid: bad url", "GET", "127.0.0.1/plain")
      fails("^invalid: bad url", "GET", "http://127.0.0.1:99999/")
      fails("^invalid: bad url", "GET", "http://127.0.0.1/a b")
      fails("^invalid: header X%-A: value has CR", "GET", base .. "/plain", { headers = { ["X-A"] = "a\r\nX-B: b" } })
      fails("^invalid: header name", "GET", base .. "/plain", { headers = { ["X A"] = "a" } })
      fails("^invalid: header Content%-Length", "POST", base .. "/echo", { body = "abc", headers = { ["Content-Length"] = "5" } })
      fails("^invalid: header Transfer%-Encoding", "POST", base .. "/echo", { headers = { ["Transfer-Encoding"] = "chunked" } })
      fails("^invalid: redirects", "GET", base .. "/plain", { redirects = -1 })
      T.raises(function() http.request(nil, base) end, "bad argument #1 to 'http.request'")
      T.raises(function() http.request("GET", 42) end, "bad argument #2 to 'http.request'")
      T.raises(function() http.request("GET", base, { body = 42 }) end, "opts.body: string expected")
      T.raises_here(function() http.request("GET", base, { timout = 1 }) end, "invalid: unknown option 'timout'")
      T.raises_here(function() require("http.client").request("GET", base, { timout = 1 }) end, "invalid: unknown option 'timout'")
      T.eq(select(2, http.request("GET", "http://127.0.0.1\0.example.com/")), "invalid: url contains a NUL byte")
      T.eq(select(2, http.request("GET", "https://127.0.0.1/", { ca_file = "ca\0.pem" })), "invalid: ca_file contains a NUL byte")
      T.raises(function() http.request("GET", base, { headers = { A = print } }) end, "string expected, got function")
    end },
    { "a query string and fragment; user:password becomes Basic authorization", function()
      local res = assert(http.request("GET", base .. "/echo?x=1&y=2#frag"))
      T.eq(res.headers["x-target"], "/echo?x=1&y=2")
      res = assert(http.request("GET", "http://ada:s%3Acret@" .. base:sub(8) .. "/echo"))
      T.match(("," .. res.headers["x-names"] .. ","), ",Authorization,")
    end },
    { "https: verified against ca_file, names checked, kept alive; verify = false", function()
      if not pcall(require, "ssl") then
        print("     (skipped: no ssl module)")
        return
      end
      local cert, key = certificate("good", "IP:127.0.0.1,DNS:localhost")
      local other_cert, other_key = certificate("other", "DNS:other.test")
      local good = start_peer(cert, key)
      local other = start_peer(other_cert, other_key)
      local trust = { ca_file = cert }
      local res, err = http.request("GET", good .. "/plain", trust)
      T.eq(err, nil)
      T.eq(res.body, "hello")
      local before = count(good, trust)
      for _ = 1, 5 do T.eq(assert(http.request("GET", good .. "/chunked", trust)).body, "hello, world") end
      T.eq(count(good, trust), before, "one TLS connection for all of them")
      T.eq(assert(http.request("GET", good .. "/close-soon", trust)).body, "closing soon")
      time.sleep(0.3)
      res, err = http.request("POST", good .. "/echo", { ca_file = cert, body = "after" })
      T.eq(err, nil, "a pooled TLS connection the server closed is not taken")
      T.eq(res.body, "after")
      before = count(good, trust)
      local data = big(1024 * 1024)
      res = assert(http.request("POST", good .. "/echo", { ca_file = cert, body = data }))
      T.ok(res.body == data, "1 MB each way over TLS")
      res, err = http.request("GET", good .. "/plain")
      T.eq(res, nil, "a self-signed certificate is not in the default store")
      T.match(err, "^tls: ")
      res, err = http.request("GET", good .. "/plain", { verify = false })
      T.eq(err, nil)
      T.eq(res.body, "hello")
      T.eq(count(good, trust), before + 2, "the refused one, and verify = false's: a pool key of its own")
      res, err = http.request("GET", other .. "/plain", { ca_file = other_cert })
      T.eq(res, nil, "a trusted certificate for another name")
      T.match(err, "^tls: ")
      res, err = http.request("GET", other .. "/plain", { ca_file = other_cert, verify = false })
      T.eq(err, nil)
    end },
    { "https without an ssl module fails clearly", function()
      local ok = pcall(require, "ssl")
      if ok then return end  -- a host with TLS: covered by its own tests
      local res, err = http.request("GET", "https://127.0.0.1:1/")
      T.eq(res, nil)
      T.match(err, '^not supported: https needs require%("ssl"%)')
    end },
  }
end

return { main = function()
  dir = T.tmpdir()
  assert(fs.write(dir .. "/peer.py", PEER))
  local ok, err = pcall(function()
    base = start_peer()
    return T.run(cases())
  end)
  stop_peers()
  if not ok then error(err, 0) end
  return true
end }

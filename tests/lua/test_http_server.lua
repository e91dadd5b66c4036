-- http.serve, through the host as a user runs it: curl
-- and raw sockets as clients, each case against a server of its own.
local T = require("t")
local http = require("http")
local json = require("json")
local socket = require("socket")
local H = require("http_raw")
local APP, serve, connect, read_response, get, closed, fds = H.APP, H.serve, H.connect, H.read_response, H.get, H.closed, H.fds

-- This host's resident memory, in MB.
local function rss_mb()
  return tonumber(assert(fs.read("/proc/self/status")):match("VmRSS:%s*(%d+) kB")) / 1024
end

local function curl(args)
  local argv = { "curl", "-sS", "--max-time", "10" }
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  return exec.run(argv)
end

-- The milliseconds a request for the URL with these extra header lines
-- takes, at best of three (the best hides a moment the machine was busy).
local function request_ms(port, target, extra)
  local c = connect(port)
  local t0 = time.now()
  local status, _, body = get(c, target, extra)
  local ms = (time.now() - t0) * 1000
  c:close()
  T.eq(status, 200, "served: " .. tostring(body))
  return ms
end

-- The best of three for each of two requests, taken in turn, so that a
-- stretch when the machine is busy slows both alike rather than one
-- (a CPU hog that came between two runs of three once made the second
-- look quadratic).
local function best_ms_pair(port, a, b, extra_a, extra_b)
  local best_a, best_b = math.huge, math.huge
  for _ = 1, 3 do
    best_a = math.min(best_a, request_ms(port, a, extra_a))
    best_b = math.min(best_b, request_ms(port, b, extra_b))
  end
  return best_a, best_b
end

-- A query of n distinct keys, and n distinct header lines.
local function many_keys(n)
  local q = {}
  for i = 1, n do q[i] = "k" .. i .. "=" .. i end
  return "/count?" .. table.concat(q, "&")
end
local function many_headers(n)
  local h = {}
  for i = 1, n do h[i] = "X-H" .. i .. ": " .. i .. "\r\n" end
  return table.concat(h)
end

return { main = function(host)
  -- This host's program, to run a second one whose log is read.
  host = host or "/proc/self/exe"
  local tests_dir = debug.getinfo(1, "S").source:match("^@(.*)/[^/]+$")
  return T.run {
    { "a request reaches the handler as the documented request table; curl gets the response", function()
      local srv, port = serve()
      local r = curl { "-H", "X-Mixed-Case: Yes", "-H", "Accept: a", "-d", "payload=1",
        string.format("http://127.0.0.1:%d/echo?a=1&b=two%%20words&a=3&c=x+y&flag", port) }
      T.eq(r.code, 0, "curl's exit: " .. r.stderr)
      local req = assert(json.decode(r.stdout))
      T.eq(req.method, "POST")
      T.eq(req.path, "/echo")
      T.eq(req.query.b, "two words")
      T.eq(req.query.c, "x y")
      T.eq(req.query.flag, "")
      T.eq(#req.query.a, 2, "a key given twice is a list")
      T.eq(req.query.a[1], "1"); T.eq(req.query.a[2], "3")
      T.eq(req.headers["x-mixed-case"], "Yes", "header names in lower case")
      T.eq(req.headers["content-type"], "application/x-www-form-urlencoded")
      T.eq(req.body, "payload=1")
      T.match(req.remote, "^127%.0%.0%.1:%d+$")
      T.eq(req.version, "1.1")
      -- The client's own address and port, exactly.
      local c = H.connect(port)
      local _, cport = c:getsockname()
      local status, _, body = H.get(c, "/echo", "Connection: close\r\n")
      T.eq(status, 200)
      T.eq(json.decode(body).remote, "127.0.0.1:" .. cport)
      c:close()
      srv:close()
    end },
    { "srv.address names the port chosen; bad arguments are named", function()
      local srv = assert(http.serve("127.0.0.1:0", APP))
      T.match(srv.address, "^127%.0%.0%.1:%d+$")
      T.ok(tonumber(srv.address:match(":(%d+)$")) > 0)
      local again, err = http.serve(srv.address, APP)
      T.eq(again, nil); T.match(err, "address already in use")
      T.raises(function() http.serve("nonsense", APP) end, "IP:PORT")
      T.raises(function() http.serve("127.0.0.1:0", 42) end, "module:method")
      local none, nerr = http.serve("127.0.0.1:0", "no_such_module:handle")
      T.eq(none, nil); T.match(nerr, "^not_found: no module 'no_such_module'")
      local bad, berr = http.serve("127.0.0.1:0", APP, { max_body_bytes = "lots" })
      T.eq(bad, nil); T.match(berr, "^invalid: opts.max_body_bytes")
      srv:close()
    end },
    { "an unknown option, or tls option, raises at the caller's line", function()
      T.raises_here(function() http.serve("127.0.0.1:0", APP, { max_body = 10 }) end, "invalid: unknown option 'max_body'")
      T.raises_here(function() http.serve("127.0.0.1:0", APP, { tls = { cert = "c", key = "k", ca = "x" } }) end, "invalid: unknown option 'ca'")
    end },
    { "keep-alive: one connection, one process, requests in turn", function()
      local srv, port = serve { hibernate_after = 30 }
      local c = connect(port)
      local s1, h1, b1 = get(c, "/who")
      local s2, h2, b2 = get(c, "/who")
      T.eq(s1, 200); T.eq(s2, 200)
      T.eq(h1["x-pid"], h2["x-pid"], "the same process serves the connection")
      T.eq(b1, "1"); T.eq(b2, "2")
      T.ok(h1["date"], "a Date header")
      local c2 = connect(port)
      local _, h3 = get(c2, "/who")
      T.ok(h3["x-pid"] ~= h1["x-pid"], "another connection, another process")
      c:close(); c2:close()
      srv:close()
    end },
    { "pipelined requests are answered in order", function()
      local srv, port = serve()
      local c = connect(port)
      local reqs = {}
      for i = 1, 5 do reqs[i] = "GET /echo?i=" .. i .. " HTTP/1.1\r\nHost: t\r\n\r\n" end
      assert(c:send(table.concat(reqs)))
      for i = 1, 5 do
        local status, _, body = read_response(c)
        T.eq(status, 200)
        T.eq(json.decode(body).query.i, tostring(i), "response " .. i)
      end
      c:close()
      srv:close()
    end },
    { "a usual GET head is read as http-parser reads it: the same request, Connection: close kept", function()
      -- The first of each pair is of the usual shape (read without
      -- http-parser, http_request_parser.cpp's take_plain); the second,
      -- which also says Content-Length: 0, is read by http-parser.
      local head = "GET /e%63ho?a=1&b=two+words&a=3&flag HTTP/1.1\r\nHost: t\r\nX-Mixed-Case:  Yes\r\n" ..
        "x-mixed-case: again\r\nCookie: a=1\r\ncookie: b=2\r\nUser-Agent: T/1 (x; y)\r\n"
      local srv, port = serve()
      local c = connect(port)
      assert(c:send(head .. "\r\n" .. head .. "Content-Length: 0\r\n\r\n" ..
        "HEAD /echo HTTP/1.1\r\nHost: t\r\n\r\n"))
      local _, _, plain = read_response(c)
      local _, _, parsed = read_response(c)
      local hs, hh = read_response(c, true)
      plain, parsed = json.decode(plain), json.decode(parsed)
      T.eq(parsed.headers["content-length"], "0")
      parsed.headers["content-length"] = nil
      local function same(a, b, what)
        for k, v in pairs(a) do T.eq(type(v) == "table" and table.concat(v, "|") or v,
          type(b[k]) == "table" and table.concat(b[k], "|") or b[k], what .. " " .. k) end
        for k in pairs(b) do T.ok(a[k] ~= nil, what .. " " .. k) end
      end
      same(plain.headers, parsed.headers, "header")
      T.eq(plain.headers["x-mixed-case"], "Yes, again", "names in lower case, one value")
      T.eq(plain.headers.cookie, "a=1; b=2")
      same(plain.query, parsed.query, "query key")
      T.eq(plain.query.b, "two words")
      for _, k in ipairs { "method", "path", "body", "version", "remote" } do
        T.eq(plain[k], parsed[k], k)
      end
      T.eq(plain.path, "/echo")
      T.eq(hs, 200); T.ok(tonumber(hh["content-length"]) > 0, "HEAD, read the same way")
      -- Connection: close in a usual head: answered, then closed, what
      -- came after it unanswered.
      assert(c:send("GET /who HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\nGET /who HTTP/1.1\r\nHost: t\r\n\r\n"))
      local status, headers = read_response(c)
      T.eq(status, 200)
      T.eq(headers.connection, "close")
      T.eq(read_response(c), nil, "closed after it")
      c:close()
      -- No Host, or two: refused (400) either way.
      for _, hosts in ipairs { "", "Host: a\r\nHost: b\r\n" } do
        local c2 = connect(port)
        assert(c2:send("GET /echo HTTP/1.1\r\n" .. hosts .. "\r\n"))
        T.eq(read_response(c2), 400, "hosts: " .. hosts)
        c2:close()
      end
      srv:close()
    end },
    { "a chunked request body arrives whole; a function body goes out chunked", function()
      local srv, port = serve()
      local c = connect(port)
      assert(c:send("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n" ..
        "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"))
      local status, _, body = read_response(c)
      T.eq(status, 200)
      T.eq(json.decode(body).body, "hello world")
      local s2, h2, b2 = get(c, "/stream?parts=4")
      T.eq(s2, 200)
      T.eq(h2["transfer-encoding"], "chunked")
      T.eq(b2, "part 1\npart 2\npart 3\npart 4\n")
      c:close()
      srv:close()
    end },
    { "HEAD gets the headers only; 204 has no body; lists become repeated headers", function()
      local srv, port = serve()
      local c = connect(port)
      assert(c:send("HEAD /echo HTTP/1.1\r\nHost: t\r\n\r\n"))
      local status, headers = read_response(c, true)
      T.eq(status, 200)
      T.ok(tonumber(headers["content-length"]) > 0, "HEAD keeps the length")
      local s2, h2 = get(c, "/nobody")
      T.eq(s2, 204); T.eq(h2["content-length"], nil); T.eq(h2["x-a"], "b")
      local s3, h3 = get(c, "/multi")
      T.eq(s3, 201)
      T.eq(h3["set-cookie"], "a=1|b=2")
      T.eq(h3["x-num"], "42")
      local s4 = get(c, "/who")
      T.eq(s4, 200, "the connection still works after HEAD and 204")
      c:close()
      srv:close()
    end },
    { "Expect: 100-continue is answered before the body is sent", function()
      local srv, port = serve()
      local c = connect(port)
      assert(c:send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n"))
      T.eq(c:receive("*l"), "HTTP/1.1 100 Continue")
      T.eq(c:receive("*l"), "")
      assert(c:send("data"))
      local status, _, body = read_response(c)
      T.eq(status, 200)
      T.eq(json.decode(body).body, "data")
      c:close()
      srv:close()
    end },
    { "Connection: close, HTTP/1.0 and a handler's close end the connection after the response", function()
      local srv, port = serve()
      local c = connect(port)
      local status, headers = get(c, "/who", "Connection: close\r\n")
      T.eq(status, 200); T.eq(headers.connection, "close")
      T.ok(closed(c), "closed after Connection: close")
      local c2 = connect(port)
      assert(c2:send("GET /who HTTP/1.0\r\n\r\n"))
      T.eq(read_response(c2), 200)
      T.ok(closed(c2), "closed after HTTP/1.0")
      local c3 = connect(port)
      assert(c3:send("GET /who HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"))
      local s3, h3 = read_response(c3)
      T.eq(s3, 200); T.eq(h3.connection, "keep-alive")
      T.eq(get(c3, "/who"), 200, "HTTP/1.0 with keep-alive stays open")
      local c4 = connect(port)
      local s4, h4, b4 = get(c4, "/close")
      T.eq(s4, 200); T.eq(h4.connection, "close"); T.eq(b4, "bye")
      T.ok(closed(c4), "closed after the handler's Connection: close")
      c3:close()
      srv:close()
    end },
    { "a client that asked for the close and sends nothing more is closed at once; one the server closes is lingered on", function()
      local srv, port = serve()
      local c = connect(port)
      T.eq(get(c, "/who", "Connection: close\r\n"), 200)
      T.ok(closed(c), "closed after Connection: close")
      -- The client keeps its side open: its connection's process ends all
      -- the same, well within the 2 s a lingering close waits for it.
      T.eventually(function() return T.count_processes("http.conn:serve") == 0 end, 1, "its process ended")
      local c2 = connect(port)
      assert(c2:send("GET /who HTTP/1.0\r\n\r\n"))
      T.eq(read_response(c2), 200)
      T.eventually(function() return T.count_processes("http.conn:serve") == 0 end, 1, "HTTP/1.0: its process ended")
      -- The handler's close: the client did not ask for it and may still
      -- send, so its connection waits for the client's end.
      local d = connect(port)
      T.eq(get(d, "/close"), 200)
      T.ok(closed(d), "closed after the handler's Connection: close")
      time.sleep(0.3)
      T.eq(T.count_processes("http.conn:serve"), 1, "lingering for a client that did not ask")
      d:close()
      T.eventually(function() return T.count_processes("http.conn:serve") == 0 end, 5, "ended at the client's end")
      c:close(); c2:close()
      srv:close()
      -- A streamed body (over buffer_body_bytes) the handler left unread:
      -- the server closes, not the client (which asked for keep-alive).
      local srv2, port2 = serve { buffer_body_bytes = 16 }
      local e = connect(port2)
      assert(e:send("POST /who HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n" .. string.rep("x", 100)))
      T.eq(read_response(e), 200)
      T.ok(closed(e), "closed after a streamed body")
      time.sleep(0.3)
      T.eq(T.count_processes("http.conn:serve"), 1, "lingering for a client that asked for keep-alive")
      e:close()
      T.eventually(function() return T.count_processes("http.conn:serve") == 0 end, 5, "ended at the client's end")
      srv2:close()
    end },
    { "framing: a 204 with a function body writes no chunks; HTTP/1.0 gets a stream raw, then the close", function()
      local srv, port = serve()
      local c = connect(port)
      local s1, h1 = get(c, "/nobody_stream")
      T.eq(s1, 204); T.eq(h1["transfer-encoding"], nil)
      T.eq(get(c, "/who"), 200, "the connection is still in step")
      c:close()
      local d = connect(port)
      assert(d:send("GET /stream?parts=3 HTTP/1.0\r\n\r\n"))
      local line = d:receive("*l")
      T.match(line, "^HTTP/1%.1 200")
      local headers = {}
      while true do
        local h = assert(d:receive("*l"))
        if h == "" then break end
        headers[#headers + 1] = h:lower()
      end
      local all = table.concat(headers, "\n")
      T.ok(not all:find("transfer%-encoding"), "no chunks for HTTP/1.0")
      T.match(all, "connection: close")
      local ok, rest = closed(d)
      T.ok(ok); T.eq(rest, "part 1\npart 2\npart 3\n")
      srv:close()
    end },
    { "a handler's Connection: close ends the connection even with requests queued behind it", function()
      local srv, port = serve()
      local c = connect(port)
      assert(c:send("GET /close HTTP/1.1\r\nHost: t\r\n\r\nGET /who HTTP/1.1\r\nHost: t\r\n\r\n"))
      local status, headers, body = read_response(c)
      T.eq(status, 200); T.eq(headers.connection, "close"); T.eq(body, "bye")
      local ok, rest = closed(c)
      T.ok(ok); T.eq(rest, "", "the queued request is not answered")
      srv:close()
    end },
    { "a malformed request gets 400 and the connection closes; the handler never sees it", function()
      local srv, port = serve()
      for _, bad in ipairs {
        "GARBAGE\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: t\r\nBad Header Line\r\n\r\n",
        "GET / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
      } do
        local c = connect(port)
        assert(c:send(bad))
        T.eq(read_response(c), 400, "for " .. string.format("%q", bad))
        T.ok(closed(c), "closed after 400")
      end
      local v = connect(port)
      assert(v:send("GET / HTTP/2.0\r\n\r\n"))
      T.eq(read_response(v), 505, "a version other than 1.x")
      -- A bad request after good pipelined ones: those are answered first.
      local c = connect(port)
      assert(c:send("GET /who HTTP/1.1\r\nHost: t\r\n\r\nNOT HTTP\r\n\r\n"))
      T.eq(read_response(c), 200)
      T.eq(read_response(c), 400)
      T.ok(closed(c))
      srv:close()
    end },
    { "headers over max_header_bytes get 431; a body over max_body_bytes 413", function()
      local srv, port = serve { max_header_bytes = 1024, max_body_bytes = 100 }
      local c = connect(port)
      assert(c:send("GET /who HTTP/1.1\r\nHost: t\r\nX-Big: " .. string.rep("b", 2000) .. "\r\n\r\n"))
      T.eq(read_response(c), 431)
      T.ok(closed(c))
      local c2 = connect(port)
      assert(c2:send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 101\r\n\r\n"))
      T.eq(read_response(c2), 413, "a declared length over the limit, before the body")
      T.ok(closed(c2))
      local c3 = connect(port)
      assert(c3:send("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n" ..
        "40\r\n" .. string.rep("x", 64) .. "\r\n40\r\n" .. string.rep("y", 64) .. "\r\n0\r\n\r\n"))
      T.eq(read_response(c3), 413, "a chunked body over the limit")
      local c4 = connect(port)
      assert(c4:send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n" .. string.rep("z", 100)))
      local s4, _, b4 = read_response(c4)
      T.eq(s4, 200, "a body of exactly the limit")
      T.eq(#json.decode(b4).body, 100)
      c4:close()
      srv:close()
    end },
    { "a client too slow to send its request gets 408", function()
      local srv, port = serve { request_timeout = 0.3 }
      local c = connect(port)
      assert(c:send("GET /who HTTP/1.1\r\nHost: t\r\n"))  -- never finished
      local t0 = time.now()
      T.eq(read_response(c), 408)
      T.ok(time.now() - t0 < 3, "408 in about the timeout")
      T.ok(closed(c))
      local c2 = connect(port)  -- a connection that sends nothing at all
      T.eq(read_response(c2), 408)
      srv:close()
    end },
    { "a handler that raises gets 500 and the server goes on", function()
      local srv, port = serve()
      local c = connect(port)
      local status, _, body = get(c, "/raise")
      T.eq(status, 500)
      T.match(body, "internal server error")
      T.eq(get(c, "/who"), 200, "the same connection serves the next request")
      local s2 = get(c, "/badstatus")
      T.eq(s2, 500, "a status that is not a number")
      c:close()
      srv:close()
    end },
    { "a connection's process loads conn.lua's rare part only when a request needs it", function()
      local srv, port = serve()
      local c = connect(port)
      local _, _, body = get(c, "/made")
      T.eq(body, "rare=false tracked=false", "a request answered normally needs neither")
      T.eq(get(c, "/raise"), 500)
      _, _, body = get(c, "/made")
      T.eq(body, "rare=true tracked=false", "the 500 loaded it")
      c:close()
      srv:close()
    end },
    { "host.http's tracking handle: its methods refuse another userdata as self", function()
      local srv, port = serve()
      local c = connect(port)
      local h = assert(require("host.http").track(c))
      local untrack = getmetatable(h).__index.untrack
      T.raises(function() untrack(c) end, "http track handle expected, got userdata")
      T.raises(function() untrack() end, "http track handle expected")
      untrack(h)
      c:close()
      srv:close()
    end },
    { "host.http's server configuration: made once, found by its id while its handle lives", function()
      local hc = require("host.http")
      T.raises(function() hc.config({ entry = "app" }) end, "conf.module and conf.method must be set")
      local h, id = hc.config({ entry = "app:main", module = "app", method = "main", acceptor = "<0.1>",
        max_header_bytes = 4096 })
      T.ok(h ~= nil and type(id) == "number", "a handle and its id")
      T.eq(hc.server_conf(id, "entry"), "app:main")
      T.eq(hc.server_conf(id, "acceptor"), "<0.1>")
      T.eq(hc.server_conf(id, "bound"), nil, "a script's server has no bound address")
      local _, id2 = hc.config({ module = "app", method = "main" })
      T.ok(id2 ~= id, "each server its own")
      local bad, err = hc.config({ module = "app", method = "main", tls_cert = "not a certificate", tls_key = "x" })
      T.eq(bad, nil, "a TLS context that cannot be made")
      T.ok(type(err) == "string" and #err > 0, "says why: " .. tostring(err))
      -- A connection over a server's configuration gets its module and method.
      local srv, port = serve()
      local c = connect(port)
      local peer_ip, peer_port = c:getpeername()  -- (hc.conn takes the socket out of c)
      local conn, module, method, remote = hc.conn(c, 0, id)
      T.ok(conn ~= nil, "a connection")
      T.eq(module, "app")
      T.eq(method, "main")
      T.eq(remote, peer_ip .. ":" .. peer_port, "the peer's address")
      conn:close()
      -- The handle dropped: the configuration is gone, and a connection
      -- over it is refused.
      h = nil
      collectgarbage()
      collectgarbage()
      T.eq(hc.server_conf(id, "entry"), nil, "gone with its handle")
      local c2 = connect(port)
      local none, why = hc.conn(c2, 0, id)
      T.eq(none, nil)
      T.eq(why, "closed")
      c2:close()
      srv:close()
    end },
    { "a connection's socket carries its server's configuration: served though the acceptor's handle went since", function()
      -- The acceptor gives the socket the configuration (track, then
      -- hibernate); a process spawned just before the acceptor ended (its
      -- handle collected, the id found no more) still serves it.
      local hc = require("host.http")
      local lst = assert(socket.tcp())
      assert(lst:bind("127.0.0.1", 0))
      assert(lst:listen(8))
      local _, port = lst:getsockname()
      local h, id = hc.config({ entry = "app:main", module = "app", method = "main", max_header_bytes = 4096 })
      local c = connect(port)
      assert(c:send("GET /who HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"))
      local s = assert(lst:accept())
      local th = assert(hc.track(s, false, id))
      local held = th:hibernate(s)
      local sock = held == true and th:wake() or held
      T.eq(type(sock), "userdata", "the socket back from the acceptor's handle")
      h = nil
      collectgarbage()
      collectgarbage()
      T.eq(hc.server_conf(id, "entry"), nil, "the configuration's entry gone with its handle")
      local conn, module, method = hc.conn(sock, 0, id)
      T.ok(conn ~= nil, "the connection served with the configuration its socket carried")
      T.eq(module, "app"); T.eq(method, "main")
      local verb, path = conn:next()
      T.eq(verb, "GET"); T.eq(path, "/who")
      assert(conn:respond(200, {}, "served"))
      local status, _, body = read_response(c)
      T.eq(status, 200); T.eq(body, "served")
      conn:close()
      th:untrack(false)
      c:close(); lst:close()
    end },
    { "host.http's ids: only integers in [1, 2^53) name a configuration or a connection", function()
      local hc = require("host.http")
      local h, id = hc.config({ entry = "app:main", module = "app", method = "main" })
      T.eq(hc.server_conf(id, "entry"), "app:main")
      for _, bad in ipairs { -1, 0, 0 / 0, 1 / 0, -1 / 0, 1e30, 2 ^ 53, id + 0.5, "1", false } do
        T.eq(hc.server_conf(bad, "entry"), nil, "server_conf(" .. tostring(bad) .. ")")
      end
      local srv, port = serve()
      for _, bad in ipairs { 0 / 0, 1e30, -1 } do
        local c = connect(port)
        local none, why = hc.conn(c, 0, bad)
        T.eq(none, nil, "conn over configuration " .. tostring(bad)); T.eq(why, "closed")
        c:close()
      end
      -- A track id out of range is none: the connection is served, untracked.
      for _, bad in ipairs { -1, 0 / 0, 1e30, 1.5 } do
        local c = connect(port)
        local conn, module = hc.conn(c, bad, id)
        T.ok(conn ~= nil, "conn with track id " .. tostring(bad)); T.eq(module, "app")
        conn:close()
      end
      h = nil
      srv:close()
    end },
    { "a server whose module lacks the method answers 500 and logs the entry, the method and the module", function()
      local r = exec.run({ host, "run", tests_dir, "--entry", "fixtures.http_app:no_method" }, { timeout = 60 })
      T.eq(r.code, 0, "the second host: " .. r.stderr)
      T.match(r.stdout, "status: 500\n")
      T.ok(r.stderr:find("cannot load the handler for GET /who: entry 'fixtures.http_app:nope': " ..
        "no function 'nope' in module 'fixtures.http_app'", 1, true), "the error logged: " .. r.stderr)
    end },
    { "a handler's process past its memory limit gets the client 500; the server goes on", function()
      local srv, port = serve()
      local c = connect(port)
      T.eq(get(c, "/memory"), 500)
      T.ok(closed(c), "the connection closes with its process")
      local c2 = connect(port)
      T.eq(get(c2, "/who"), 200)
      c2:close()
      srv:close()
    end },
    { "a handler's process terminated mid-request gets the client 500, then the close", function()
      local srv, port = serve()
      local c = connect(port)
      assert(c:send("GET /hang?to=" .. tostring(process.pid()) .. " HTTP/1.1\r\nHost: t\r\n\r\n"))
      local m = assert(process.receive(5))
      T.eq(m.topic, "serving")
      process.terminate(m.payload)
      local status, _, body = read_response(c)
      T.eq(status, 500); T.match(body, "Internal Server Error")
      T.ok(closed(c), "the connection closes with its process")
      -- One that terminates itself, on a connection that asked for the close.
      local d = connect(port)
      T.eq(get(d, "/terminate", "Connection: close\r\n"), 500)
      T.ok(closed(d))
      local e = connect(port)
      T.eq(get(e, "/who"), 200, "the server goes on")
      e:close()
      srv:close()
    end },
    { "a handler's process past its time limit gets the client 500 (a second host, --time-limit 0.3)", function()
      -- A process stuck in JIT-compiled code has its thread given up: its
      -- state and what it held are never freed, by design, which
      -- LeakSanitizer would report at the second host's exit.
      local r = exec.run({ host, "run", tests_dir, "--time-limit", "0.3", "--entry", "fixtures.http_app:time_limited" },
        { timeout = 60, env = { ASAN_OPTIONS = "detect_leaks=0" } })
      T.eq(r.code, 0, "the second host: " .. r.stderr)
      T.eq(r.stdout, "/spin 500, /spin_hooked 500, /who 200\n")
    end },
    { "close(): an idle keep-alive connection ends at once, a busy one's answer closes it; close returns then", function()
      local srv, port = serve { hibernate_after = false }
      local idle, busy = connect(port), connect(port)
      T.eq(get(idle, "/who"), 200)
      assert(busy:send("GET /slow?secs=0.3 HTTP/1.1\r\nHost: t\r\n\r\n"))
      time.sleep(0.1)
      local t0 = time.now()
      T.eq(srv:close(), true)
      local took = time.now() - t0
      -- The idle one waits for nothing (keepalive_timeout is 60 s, close's
      -- own wait 10 s), and the busy one, answered with Connection: close,
      -- does not linger for its client's end (2 s).
      T.ok(took < 1.5, "close took " .. took .. " s")
      T.ok(closed(idle), "the idle connection closed")
      local status, headers, body = read_response(busy)
      T.eq(status, 200); T.eq(body, "slow done"); T.eq(headers.connection, "close")
      T.ok(closed(busy))
    end },
    { "CR or LF in a response header is refused: 500, nothing injected", function()
      local srv, port = serve()
      local c = connect(port)
      local status, headers, body = get(c, "/inject")
      T.eq(status, 500)
      T.eq(headers["set-cookie"], nil)
      T.eq(headers["x-evil"], nil)
      T.match(body, "internal server error")
      c:close()
      srv:close()
    end },
    { "connections past max_connections get 503", function()
      local srv, port = serve { max_connections = 2 }
      local a, b = connect(port), connect(port)
      T.eq(get(a, "/who"), 200); T.eq(get(b, "/who"), 200)
      local c = connect(port)
      T.eq(read_response(c), 503)
      T.ok(closed(c))
      a:close()
      T.eventually(function()
        local d = connect(port)
        local st = get(d, "/who")
        d:close()
        return st == 200
      end, 5, "a slot freed by a closed connection")
      b:close()
      srv:close()
    end },
    { "a client that leaves mid-response costs nothing else", function()
      local srv, port = serve()
      local base = T.count_processes("http.conn:serve")
      for _ = 1, 5 do
        local c = connect(port)
        assert(c:send("GET /stream?parts=50&pause=0.01 HTTP/1.1\r\nHost: t\r\n\r\n"))
        assert(c:receive("*l"))
        c:close()
      end
      local c = connect(port)
      T.eq(get(c, "/who"), 200)
      c:close()
      T.eventually(function() return T.count_processes("http.conn:serve") == base end, 5, "connection processes ended")
      srv:close()
    end },
    { "close(): the request in flight is answered, then the connection closes; no new ones", function()
      local srv, port = serve()
      local c = connect(port)
      assert(c:send("GET /slow?secs=0.3 HTTP/1.1\r\nHost: t\r\n\r\n"))
      time.sleep(0.1)
      srv:close()
      local status, headers, body = read_response(c)
      T.eq(status, 200); T.eq(body, "slow done")
      T.eq(headers.connection, "close")
      T.ok(closed(c))
      local refused, err = socket.connect("127.0.0.1", port)
      T.eq(refused, nil); T.eq(err, "connection refused")
      T.eq(srv:close(), true, "close again")
    end },
    { "a server closes when the process that made it ends", function()
      local pid = assert(process.spawn_monitored("fixtures.http_app:serve_until_told", process.pid()))
      local m = assert(process.receive(5))
      local port = tonumber(m.payload:match(":(%d+)$"))
      local c = connect(port)
      T.eq(get(c, "/who"), 200)
      process.terminate(pid)
      T.next_event("exit")
      T.eventually(function() return socket.connect("127.0.0.1", port) == nil end, 5, "the port closed")
      T.ok(closed(c), "its connections close too")
    end },
    { "an idle keep-alive connection gives its process up; the next request starts another", function()
      local srv, port = serve { hibernate_after = 0.2 }
      local c = connect(port)
      local _, h1, b1 = get(c, "/who")
      local _, h2, b2 = get(c, "/who")
      T.eq(h1["x-pid"], h2["x-pid"]); T.eq(b2, "2", "one process while requests keep coming")
      T.eventually(function() return T.count_processes("http.conn:serve") == 0 end, 5, "the idle connection's process ended")
      local s3, h3, b3 = get(c, "/who")
      T.eq(s3, 200, "the connection itself stayed open")
      T.ok(h3["x-pid"] ~= h1["x-pid"], "a new process"); T.eq(b3, "1")
      c:close()
      srv:close()
      local srv2, port2 = serve { hibernate_after = false }
      local c2 = connect(port2)
      local _, k1 = get(c2, "/who")
      time.sleep(0.4)
      local _, k2 = get(c2, "/who")
      T.eq(k1["x-pid"], k2["x-pid"], "hibernate_after = false keeps the process")
      c2:close()
      srv2:close()
    end },
    { "a connection kept busy keeps its process past hibernate_after; one left idle closes at keepalive_timeout", function()
      -- The wait for the next request has no timer of its own: one sleep a
      -- connection, due at the first deadline, sleeps again when requests
      -- came since (bindings/http_conn.cpp, idle_timer_fired).
      -- Requests 0.15 s apart for 0.9 s: the sleep due at the first
      -- deadline (0.5 s) must find the connection busy and sleep again.
      local srv, port = serve { hibernate_after = 0.5 }
      local c = connect(port)
      local _, first = get(c, "/who")
      for i = 1, 6 do
        time.sleep(0.15)
        local _, h, b = get(c, "/who")
        T.eq(h["x-pid"], first["x-pid"], "requests 0.15 s apart keep the process (request " .. i .. ")")
        T.eq(b, tostring(i + 1))
      end
      T.eventually(function() return T.count_processes("http.conn:serve") == 0 end, 5, "then idle, it gives it up")
      c:close()
      srv:close()
      local srv2, port2 = serve { hibernate_after = false, keepalive_timeout = 0.3 }
      local c2 = connect(port2)
      T.eq(get(c2, "/who"), 200)
      local t0 = time.now()
      T.ok(closed(c2), "the idle connection closed")
      local waited = time.now() - t0
      T.ok(waited > 0.2 and waited < 3, "at keepalive_timeout (after " .. waited .. " s)")
      c2:close()
      srv2:close()
    end },
    { "a connection that never sends a request starts no process", function()
      local srv, port = serve()
      local base = T.count_processes("http.conn:serve")
      local c = connect(port)
      time.sleep(0.2)
      T.eq(T.count_processes("http.conn:serve"), base)
      c:close()
      srv:close()
    end },
    { "https: tls = { cert, key } serves TLS; curl and http.request verify it against the test CA", function()
      local c = require("certs").make()
      local srv = assert(http.serve("127.0.0.1:0", APP, { tls = { cert = c.cert, key = c.key } }))
      local port = tonumber(srv.address:match(":(%d+)$"))
      local url = "https://127.0.0.1:" .. port
      local r = curl { "--cacert", c.ca, "-d", "over tls", url .. "/echo?x=1" }
      T.eq(r.code, 0, "curl: " .. r.stderr)
      T.eq(json.decode(r.stdout).body, "over tls")
      local res = assert(http.request("GET", url .. "/who", { ca_file = c.ca }))
      T.eq(res.status, 200)
      local again = assert(http.request("GET", url .. "/who", { ca_file = c.ca }))
      T.eq(again.headers["x-pid"], res.headers["x-pid"], "kept alive over TLS")
      local big = string.rep("0123456789", 110000)
      local b = assert(http.request("POST", url .. "/echo", { ca_file = c.ca, body = big }))
      T.eq(b.status, 413, "over the default 1 MB body limit")
      local ok = assert(http.request("POST", url .. "/echo", { ca_file = c.ca, body = big:sub(1, 500000) }))
      T.eq(#json.decode(ok.body).body, 500000, "half a megabyte each way")
      local bad = curl { "--cacert", c.other_ca, url .. "/who" }
      T.ok(bad.code ~= 0, "a client that does not trust the certificate fails")
      local plain = connect(port)  -- plain HTTP to a TLS port: the handshake fails, the connection closes
      assert(plain:send("GET /who HTTP/1.1\r\nHost: t\r\n\r\n"))
      T.ok(closed(plain))
      local none, err = http.serve("127.0.0.1:0", APP, { tls = { cert = c.dir .. "/missing.pem", key = c.key } })
      T.eq(none, nil); T.match(err, "^not_found")
      local nokey, kerr = http.serve("127.0.0.1:0", APP, { tls = { cert = c.cert } })
      T.eq(nokey, nil); T.match(kerr, "^invalid: opts.tls needs cert and key")
      T.eq(select(2, http.serve("127.0.0.1:0", APP, { tls = { cert = c.cert .. "\0.x", key = c.key } })),
        "invalid: cert contains a NUL byte")
      T.eq(select(2, http.serve("127.0.0.1:0", APP, { tls = { cert = c.cert, key = c.key .. "\0.x" } })),
        "invalid: key contains a NUL byte")
      local fifo = c.dir .. "/key.fifo"
      T.eq(exec.run({ "mkfifo", fifo }).code, 0)
      T.eq(select(2, http.serve("127.0.0.1:0", APP, { tls = { cert = c.cert, key = fifo } })),
        "invalid: key file " .. fifo .. ": not a regular file", "a FIFO is refused, not waited for")
      srv:close()
      os.execute("rm -rf " .. c.dir)
    end },
    { "a body over buffer_body_bytes is streamed: req.body is nil, req:read_body() gives its chunks", function()
      local srv, port = serve { buffer_body_bytes = 1000, max_body_bytes = 10 * 1024 * 1024 }
      local data = {}
      for i = 1, 5000 do data[i] = string.format("%07d|", i) .. string.rep("x", 992) end
      local body = table.concat(data)  -- 5,000,000 bytes
      local c = connect(port)
      assert(c:send("POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: " .. #body .. "\r\n\r\n"))
      for i = 1, #body, 65536 do assert(c:send(body:sub(i, i + 65535))) end
      local status, rh, rbody = read_response(c)
      T.eq(status, 200)
      local r = json.decode(rbody)
      T.eq(r.total, #body); T.eq(r.streamed, true); T.ok(r.chunks > 1, "in several chunks: " .. r.chunks)
      T.eq(r.err, json.null)
      T.eq(rh.connection, "close", "nothing after a streamed request is parsed: the connection closes")
      T.ok(closed(c))
      -- A small body arrives whole; read_body gives it once.
      c = connect(port)
      assert(c:send("POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n0123456789"))
      local _, _, small = read_response(c)
      local sr = json.decode(small)
      T.eq(sr.total, 10); T.eq(sr.chunks, 1); T.eq(sr.streamed, false)
      -- A chunked body that grows past the buffer is streamed too.
      local parts = { "POST /upload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n" }
      for _ = 1, 10 do parts[#parts + 1] = "1f4\r\n" .. string.rep("y", 500) .. "\r\n" end
      parts[#parts + 1] = "0\r\n\r\n"
      assert(c:send(table.concat(parts)))
      local _, _, ch = read_response(c)
      local cr = json.decode(ch)
      T.eq(cr.total, 5000); T.eq(cr.streamed, true)
      c:close()
      -- A handler that answers before reading it all: the rest is dropped
      -- as it comes, the response goes out, the connection then closes.
      c = connect(port)
      assert(c:send("POST /upload?stop=1000 HTTP/1.1\r\nHost: t\r\nContent-Length: " .. #body .. "\r\n\r\n"))
      for i = 1, #body, 65536 do if not c:send(body:sub(i, i + 65535)) then break end end
      local _, _, partial = read_response(c)
      T.ok(json.decode(partial).total < #body, "stopped early")
      c:close()
      local n = connect(port)
      T.eq(get(n, "/who"), 200, "the server goes on")
      n:close()
      -- Past max_body_bytes in the middle of a streamed chunked body: the
      -- handler's read fails with too_large, then the connection closes.
      local lim, lport = serve { buffer_body_bytes = 1000, max_body_bytes = 3000 }
      local d = connect(lport)
      assert(d:send(table.concat(parts)))
      local st, _, lb = read_response(d)
      T.eq(st, 200)
      T.match(json.decode(lb).err, "^too_large")
      T.ok(closed(d))
      lim:close()
      srv:close()
    end },
    { "whitespace before a header's colon gets 400, so Content-Length and Transfer-Encoding are never read from it", function()
      local srv, port = serve()
      for _, bad in ipairs {
        "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length : 5\r\n\r\nhello",
        "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding : chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        "GET /echo HTTP/1.1\r\nHost: t\r\nX-A\t: 1\r\n\r\n",
      } do
        local c = connect(port)
        assert(c:send(bad))
        T.eq(read_response(c), 400, "for " .. string.format("%q", bad))
        T.ok(closed(c), "closed after 400")
      end
      srv:close()
    end },
    { "an HTTP/1.1 request without Host, or with more than one, gets 400; HTTP/1.0 may leave Host out", function()
      local srv, port = serve()
      for _, bad in ipairs {
        "GET /echo HTTP/1.1\r\n\r\n",
        "GET /echo HTTP/1.1\r\nHost: a\r\nHost: evil\r\n\r\n",
        "GET /echo HTTP/1.0\r\nHost: a\r\nhost: evil\r\n\r\n",
      } do
        local c = connect(port)
        assert(c:send(bad))
        T.eq(read_response(c), 400, "for " .. string.format("%q", bad))
        T.ok(closed(c), "closed after 400")
      end
      local c = connect(port)
      assert(c:send("GET /echo HTTP/1.0\r\n\r\n"))
      local status, _, body = read_response(c)
      T.eq(status, 200)
      T.eq(json.decode(body).headers.host, nil)
      c:close()
      srv:close()
    end },
    { "a chunked body's trailers never reach req.headers", function()
      local srv, port = serve()
      local c = connect(port)
      assert(c:send("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n" ..
        "5\r\nhello\r\n0\r\nAuthorization: Bearer forged\r\nX-Trailer: 1\r\n\r\n"))
      local status, _, body = read_response(c)
      T.eq(status, 200)
      local req = json.decode(body)
      T.eq(req.body, "hello")
      T.eq(req.headers.authorization, nil, "a trailer is not a header")
      T.eq(req.headers["x-trailer"], nil)
      T.eq(req.headers.host, "t")
      T.eq(get(c, "/who"), 200, "the connection goes on")
      c:close()
      srv:close()
    end },
    { "thousands of distinct query keys or header names are served in time linear in their count", function()
      local srv, port = serve { max_header_bytes = 4 * 1024 * 1024 }
      local c = connect(port)
      local _, _, counts = get(c, many_keys(20000))
      T.eq(counts, "20000 1", "every key reached the handler")
      _, _, counts = get(c, "/count", many_headers(20000))
      T.eq(counts, "0 20001", "every header reached the handler")
      c:close()
      -- Four times the names cost about four times the time; a quadratic
      -- cost would make it sixteen. The bound leaves room for a busy
      -- machine, and for the fixed cost of a request.
      local small_q, large_q = best_ms_pair(port, many_keys(10000), many_keys(40000))
      T.ok(large_q < 8 * small_q + 300,
        string.format("query keys: %.1f ms for 10000, %.1f ms for 40000", small_q, large_q))
      local small_h, large_h = best_ms_pair(port, "/count", "/count", many_headers(10000), many_headers(40000))
      T.ok(large_h < 8 * small_h + 300,
        string.format("header names: %.1f ms for 10000, %.1f ms for 40000", small_h, large_h))
      srv:close()
    end },
    { "a URL over 64 KB: its query arrives whole; in absolute form it gets 414", function()
      local srv, port = serve { max_header_bytes = 1024 * 1024 }
      local long = string.rep("v", 70000)
      local c = connect(port)
      local status, _, body = get(c, "/echo?a=1&long=" .. long .. "&z=2")
      T.eq(status, 200)
      local req = json.decode(body)
      T.eq(req.path, "/echo"); T.eq(req.query.a, "1"); T.eq(req.query.long, long); T.eq(req.query.z, "2")
      c:close()
      local d = connect(port)
      T.eq(get(d, "http://t/echo?long=" .. long), 414)
      T.ok(closed(d), "closed after 414")
      srv:close()
    end },
    { "a handler that raises for a path holding %d gets 500 with its own error logged; the request behind it is answered", function()
      local r = exec.run({ host, "run", tests_dir, "--entry", "fixtures.http_app:fail_pipelined" }, { timeout = 60 })
      T.eq(r.code, 0, "the second host: " .. r.stderr)
      T.match(r.stdout, "statuses: 500 200\n", "the 500, then the pipelined request's answer")
      T.ok(r.stderr:find("handler failed for GET /fail%d", 1, true), "the request in the log: " .. r.stderr)
      T.ok(r.stderr:find("the handler of /fail%d raised on purpose", 1, true), "the handler's own error logged")
    end },
    { "only the process that made a server can close it: another is denied and the server goes on", function()
      local srv, port = serve()
      process.spawn_monitored("fixtures.http_app:close_other", process.pid(), srv.id)
      local m = assert(process.receive(5))
      T.eq(m.payload.ok, false, "the close was refused")
      T.match(m.payload.err, "^denied: ")
      T.next_event("exit")
      local c = connect(port)
      T.eq(get(c, "/who"), 200, "the server still serves")
      c:close()
      T.eq(srv:close(), true, "its owner closes it")
      T.eventually(function() return socket.connect("127.0.0.1", port) == nil end, 5, "the port closed")
    end },
    { "a client that pipelines 400 requests for 1 MB and never reads does not grow the host; others are served", function()
      local srv, port = serve()
      local c = connect(port)
      T.eq(get(c, "/big"), 200, "one read in full")  -- the handler loaded, its 1 MB made
      local before = rss_mb()
      assert(c:send(string.rep("GET /big HTTP/1.1\r\nHost: t\r\n\r\n", 400)))
      time.sleep(1.5)  -- the server writes what the kernel takes, then waits
      local grown = rss_mb() - before
      T.ok(grown < 64, string.format("the host grew by %.1f MB", grown))
      print(string.format("400 pipelined 1 MB requests never read: the host grew by %.1f MB", grown))
      local other = connect(port)
      T.eq(get(other, "/echo"), 200, "another client is served meanwhile")
      other:close()
      c:close()  -- unread data: a reset, which ends the writer
      srv:close()
    end },
    { "200 clients that leave while their handlers wait are noticed: processes and descriptors come back", function()
      local srv, port = serve()
      local base_fds = fds()
      local n = 200
      local cs = {}
      for i = 1, n do
        cs[i] = connect(port)
        assert(cs[i]:send("GET /slow?secs=60 HTTP/1.1\r\nHost: t\r\n\r\n"))
      end
      T.eventually(function() return T.count_processes("http.conn:serve") == n end, 10, n .. " handlers waiting")
      for i = 1, n do cs[i]:close() end
      local t0 = time.now()
      T.eventually(function() return T.count_processes("http.conn:serve") == 0 and fds() <= base_fds end, 10,
        "the processes ended and the descriptors closed")
      local took = time.now() - t0
      T.ok(took < 2, string.format("noticed in %.2f s", took))
      print(string.format("%d clients left: their processes and descriptors gone in %.2f s", n, took))
      local c = connect(port)
      T.eq(get(c, "/echo"), 200, "the server goes on")
      c:close()
      srv:close()
    end },
    { "a handler whose client left gets its cancel event, and req:closed() says so", function()
      local srv, port = serve()
      local name = "http_left_" .. tostring(process.pid()):gsub("%W", "_")
      assert(process.registry.register(name))
      local c = connect(port)
      assert(c:send("GET /left?to=" .. name .. " HTTP/1.1\r\nHost: t\r\n\r\n"))
      local m = assert(process.receive(5))
      T.eq(m.topic, "waiting")
      c:close()
      m = assert(process.receive(5))
      T.eq(m.topic, "left")
      T.eq(m.payload.kind, "cancel")
      T.eq(m.payload.reason, "client gone")
      T.eq(m.payload.before, false, "req:closed() while the client was there")
      T.eq(m.payload.after, true, "req:closed() once it left")
      process.registry.unregister(name)
      srv:close()
    end },
    { "while the server drains, a handler whose client leaves gets its cancel event, and req:closed() says so", function()
      local srv, port = serve()
      local name = "http_drain_left_" .. tostring(process.pid()):gsub("%W", "_")
      assert(process.registry.register(name))
      assert(process.spawn("fixtures.http_app:leave_after", port, name, 0.3))
      local m = assert(process.receive(5))
      T.eq(m.topic, "waiting")
      -- close waits for the handler, which ends only when its client's
      -- leaving is seen (close's own wait is far longer).
      local t0 = time.now()
      T.eq(srv:close(), true)
      local took = time.now() - t0
      T.ok(took < 3, "close took " .. took .. " s")
      m = assert(process.receive(5))
      T.eq(m.topic, "left")
      T.eq(m.payload.kind, "cancel")
      T.eq(m.payload.reason, "client gone")
      T.eq(m.payload.after, true, "req:closed() once it left")
      process.registry.unregister(name)
    end },
    { "a pipelining client the server drains is lingered on, not reset, when its next request is still to come", function()
      local srv, port = serve()
      local name = "http_drain_pipelined_" .. tostring(process.pid()):gsub("%W", "_")
      assert(process.registry.register(name))
      assert(process.spawn("fixtures.http_app:pipeline_then_more", port, name))
      local m = assert(process.receive(5))
      T.eq(m.topic, "sent")
      time.sleep(0.1)  -- the slow request is in its handler
      T.eq(srv:close(), true)
      m = assert(process.receive(5))
      T.eq(m.topic, "pipelined")
      T.eq(m.payload.status, 200); T.eq(m.payload.connection, "close")
      T.ok(m.payload.third, "the third request was sent")
      T.ok(m.payload.more, "bytes sent after the answer were taken, not reset: " .. tostring(m.payload.err))
      process.registry.unregister(name)
    end },
    { "with requests in flight, each connection holds one descriptor of the host's, the acceptor none", function()
      local srv, port = serve()
      local name = "http_fds_" .. tostring(process.pid()):gsub("%W", "_")
      assert(process.registry.register(name))
      local n = 8
      local base = fds()
      local clients = {}
      for i = 1, n do
        clients[i] = connect(port)
        assert(clients[i]:send("GET /left?to=" .. name .. " HTTP/1.1\r\nHost: t\r\n\r\n"))
      end
      for _ = 1, n do
        local m = assert(process.receive(5))
        T.eq(m.topic, "waiting")
      end
      -- Each request: the client's socket (this process's) and the
      -- connection's; a descriptor of the acceptor's would be a third.
      T.eq(fds() - base, 2 * n)
      for i = 1, n do clients[i]:close() end
      for _ = 1, n do
        local m = assert(process.receive(5))
        T.eq(m.topic, "left")
      end
      process.registry.unregister(name)
      srv:close()
    end },
    { "a connection process that fails after giving its connection back leaves the next one's request alone", function()
      local lst = assert(socket.tcp())
      assert(lst:bind("127.0.0.1", 0))
      assert(lst:listen(64))
      local _, port = lst:getsockname()
      -- The acceptor of http.serve, with connection processes that fail
      -- 0.3 s after their park.
      local conf = {
        request_timeout = 30, keepalive_timeout = 60, max_connections = 100, hibernate_after = 0.05,
        entry = APP, module = "fixtures.http_app", method = "handle", conn_entry = "fixtures.http_app:park_then_fail",
      }
      local acceptor = assert(process.spawn("http.server:accept", process.pid(), lst, conf))
      local c = connect(tonumber(port))
      T.eq(get(c, "/who"), 200)
      time.sleep(0.15)  -- its process parked the connection and fails while the next request is served
      local status, _, body = get(c, "/slow?secs=0.5")
      T.eq(status, 200); T.eq(body, "slow done")
      c:close()
      process.terminate(acceptor)
    end },
    { "no connection process is left behind", function()
      T.eventually(function() return T.count_processes("http.conn:serve") == 0 end, 5, "every connection process ended")
    end },
  }
end }

-- Hibernated HTTP connections (stdlib/http/server.lua, bindings/
-- http_conn.cpp's hibernate): a connection with no process is held by the
-- acceptor's track handle and watched, with no task and no timer of its
-- own. Each case checks one way such a wait ends: a request wakes it (many
-- at once, none lost), its deadline passes (408 or a close), the client
-- leaves, the server closes; and what one costs the acceptor.
local T = require("t")
local socket = require("socket")
local H = require("http_raw")
local serve, connect, read_response, get, closed = H.serve, H.connect, H.read_response, H.get, H.closed

local function all_hibernated()
  T.eventually(function() return T.count_processes("http.conn:serve") == 0 end, 10, "every connection hibernated")
end

return { main = function()
  return T.run {
    { "300 hibernated connections woken by requests at once: each answered, twice over", function()
      local srv, port = serve { hibernate_after = 0.05 }
      local conns = {}
      for i = 1, 300 do
        conns[i] = connect(port)
        T.eq(get(conns[i], "/who"), 200)
      end
      for round = 1, 2 do
        all_hibernated()
        for i = 1, 300 do assert(conns[i]:send("GET /who HTTP/1.1\r\nHost: t\r\n\r\n")) end
        for i = 1, 300 do
          local status, _, body = read_response(conns[i])
          T.eq(status, 200, "round " .. round .. ", connection " .. i)
          T.eq(body, "1", "a new process for the woken connection")
        end
      end
      for i = 1, 300 do conns[i]:close() end
      srv:close()
    end },
    { "a hibernated idle connection closes at keepalive_timeout; a new one that sends nothing gets 408", function()
      local srv, port = serve { hibernate_after = 0.05, keepalive_timeout = 0.5, request_timeout = 0.5 }
      local idle, fresh = connect(port), connect(port)
      T.eq(get(idle, "/who"), 200)
      local t0 = time.now()
      all_hibernated()
      T.eq(read_response(fresh), 408, "the new connection's request_timeout")
      T.ok(closed(fresh))
      T.ok(closed(idle), "the idle connection closed")
      local waited = time.now() - t0
      T.ok(waited > 0.3 and waited < 3, "at keepalive_timeout (after " .. waited .. " s)")
      srv:close()
    end },
    { "a new connection that sends nothing to a server with nothing else to do gets 408 at request_timeout", function()
      -- The acceptor waits with no deadline when the connection comes:
      -- the new deadline must wake it.
      local srv, port = serve { request_timeout = 0.3 }
      time.sleep(0.1)
      local t0 = time.now()
      local fresh = connect(port)
      fresh:settimeout(3)
      T.eq(read_response(fresh), 408)
      T.ok(closed(fresh))
      local waited = time.now() - t0
      T.ok(waited > 0.2 and waited < 2, "at request_timeout (after " .. waited .. " s)")
      srv:close()
    end },
    { "a client that leaves while hibernated frees its place at once", function()
      local srv, port = serve { hibernate_after = 0.05, max_connections = 2 }
      local a, b = connect(port), connect(port)
      T.eq(get(a, "/who"), 200)
      all_hibernated()  -- a idle, b new: both hibernated
      a:close()
      b:close()
      T.eventually(function()
        local c = connect(port)
        local ok = get(c, "/who") == 200
        c:close()
        return ok
      end, 3, "served: the two places came back long before keepalive_timeout")
      srv:close()
    end },
    { "close() closes hibernated connections at once, new and idle", function()
      local srv, port = serve { hibernate_after = 0.05 }
      local conns = {}
      for i = 1, 20 do
        conns[i] = connect(port)
        if i % 2 == 0 then T.eq(get(conns[i], "/who"), 200) end
      end
      all_hibernated()
      local t0 = time.now()
      T.eq(srv:close(), true)
      T.ok(time.now() - t0 < 1, "close returned at once")
      for i = 1, 20 do T.ok(closed(conns[i]), "connection " .. i .. " closed") end
    end },
    { "https: a TLS connection hibernates and is woken, its session kept; then closes at keepalive_timeout", function()
      local certs = require("certs").make()
      local srv, port = serve {
        hibernate_after = 0.05, keepalive_timeout = 1.5, tls = { cert = certs.cert, key = certs.key },
      }
      local raw = connect(port)
      local c = assert(require("ssl").wrap(raw, { mode = "client", verify = "peer", cafile = certs.ca }))
      assert(c:dohandshake())
      local _, _, first = get(c, "/who")
      T.eq(first, "1")
      all_hibernated()
      local status, _, again = get(c, "/who")
      T.eq(status, 200, "woken over the same session")
      T.eq(again, "1", "by a new process")
      all_hibernated()
      local t0 = time.now()
      T.ok(closed(c), "the idle TLS connection closed")
      T.ok(time.now() - t0 < 4, "at keepalive_timeout")
      srv:close()
      os.execute("rm -rf " .. certs.dir)
    end },
    { "hibernate gives a socket whose bytes came already straight back; one with none it holds until they come", function()
      -- The acceptor's handle used directly (host.http): a new client whose
      -- request came with its connection is served with no message between.
      local hc = require("host.http")
      local lst = assert(socket.tcp())
      assert(lst:bind("127.0.0.1", 0))
      assert(lst:listen(8))
      local _, port = lst:getsockname()
      local c = connect(port)
      assert(c:send("GET /who HTTP/1.1\r\nHost: t\r\n\r\n"))
      local s = assert(lst:accept())
      time.sleep(0.05)  -- the bytes are in its queue
      local h = assert(hc.track(s, false))
      local back = h:hibernate(s)
      T.eq(type(back), "userdata", "the socket back at once")
      T.eq(select(2, s:receive(1)), "closed", "the object given is spent")
      T.eq(back:dirty(), true, "its bytes read into its buffer: its process reads no more for them")
      back:settimeout(5)
      T.eq(back:receive("*l"), "GET /who HTTP/1.1", "nothing taken from it")
      back:close()
      h:untrack(false)
      local c2 = connect(port)
      local s2 = assert(lst:accept())
      local h2, id2 = assert(hc.track(s2, false))
      T.eq(h2:hibernate(s2), true, "held while nothing came")
      T.eq(process.receive(0.1), nil, "no message while nothing came")
      assert(c2:send("GET /who HTTP/1.1\r\nHost: t\r\n\r\n"))
      local m = process.receive(5)
      T.eq(m and m.topic, "readable"); T.eq(m and m.payload, id2)
      local woken = assert(h2:wake())
      T.eq(woken:dirty(), true, "the bytes that woke it read into its buffer")
      woken:settimeout(5)
      T.eq(woken:receive("*l"), "GET /who HTTP/1.1")
      woken:close()
      h2:untrack(false)
      c:close(); c2:close(); lst:close()
    end },
    { "a request read in part by the acceptor is served whole, and two sent with the connection both", function()
      -- The acceptor reads what came with the connection into its socket's
      -- buffer (hibernate): its process parses from there, then reads on.
      local srv, port = serve { hibernate_after = 0.05 }
      local c = connect(port)
      assert(c:send("GET /who HTTP/1.1\r\nHo"))
      time.sleep(0.1)
      assert(c:send("st: t\r\nConnection: close\r\n\r\n"))
      local status, _, body = read_response(c)
      T.eq(status, 200)
      T.eq(body, "1")
      T.ok(closed(c), "closed after the response")
      c:close()
      c = connect(port)
      assert(c:send("GET /who HTTP/1.1\r\nHost: t\r\n\r\nGET /who HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"))
      T.eq(select(3, read_response(c)), "1")
      T.eq(select(3, read_response(c)), "2")
      T.ok(closed(c), "closed after the second")
      c:close()
      -- A keep-alive connection hibernated, then woken by a request in two parts.
      c = connect(port)
      T.eq(get(c, "/who"), 200)
      all_hibernated()
      assert(c:send("GET /who HTTP/1.1\r\n"))
      time.sleep(0.1)
      assert(c:send("Host: t\r\n\r\n"))
      T.eq(select(3, read_response(c)), "1", "a new process serves it")
      c:close()
      srv:close()
    end },
    { "a hibernated connection costs the acceptor's heap no task: under 1 KB each", function()
      local srv, port = serve { hibernate_after = 0.05 }
      local warm = {}
      for i = 1, 50 do
        warm[i] = connect(port)
        T.eq(get(warm[i], "/who"), 200)
      end
      all_hibernated()
      collectgarbage()
      local before = process.info(srv.id).memory
      local conns = {}
      for i = 1, 1000 do
        conns[i] = connect(port)
        T.eq(get(conns[i], "/who"), 200)
      end
      all_hibernated()
      -- What the acceptor has not collected yet (the parked sockets'
      -- objects, messages) goes at its next steps.
      local per
      T.eventually(function()
        per = (process.info(srv.id).memory - before) / 1000
        return per < 1024
      end, 10, "the acceptor's heap a hibernated connection")
      print(string.format("acceptor heap per hibernated connection: %.0f B", per))
      for i = 1, 1000 do conns[i]:close() end
      for i = 1, 50 do warm[i]:close() end
      srv:close()
    end },
  }
end }

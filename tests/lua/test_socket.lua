-- The socket module (SPEC section 7), through the host as a user runs it.
local T = require("t")
local socket = require("socket")

-- A listening server on a free loopback port, and its port.
local function listener()
  local srv = assert(socket.bind("127.0.0.1", 0))
  local _, port = srv:getsockname()
  return srv, port
end

-- A connected pair: the client and the server's side of it.
local function pair()
  local srv, port = listener()
  local accepted = channel.new(1)
  coroutine.spawn(function() accepted:send((assert(srv:accept()))) end)
  local c = assert(socket.connect("127.0.0.1", port))
  local s = accepted:receive()
  srv:close()
  return c, s
end

-- Waits until something listens on port (a peer the test started).
local function wait_port(port, secs)
  local deadline = time.now() + secs
  while time.now() < deadline do
    local c = socket.connect("127.0.0.1", port)
    if c then
      c:close()
      return true
    end
    time.sleep(0.05)
  end
  return false
end

local function free_port()
  local srv, port = listener()
  srv:close()
  return port
end

local function rss_kb()
  local status = fs.read("/proc/self/status")
  return tonumber(status:match("VmRSS:%s*(%d+)"))
end

return { main = function()
  return T.run {
    { "require('socket') is the host's module, socket.core the same", function()
      T.eq(require("socket.core"), socket)
      T.match(socket._VERSION, "^LuaSocket 3")
      T.eq(type(socket.tcp), "function")
    end },
    { "a TCP round trip: lines, counts, all, prefix", function()
      local c, s = pair()
      T.match(tostring(c), "^tcp{client}")
      T.eq(c:send("one\r\ntwo\nthree"), 14)
      T.eq(s:receive(), "one")
      T.eq(s:receive("*l"), "two")
      T.eq(s:receive(3), "thr")
      T.eq(s:receive(2, "pre-"), "pre-ee")
      T.eq(c:send("abcdef", 2, 4), 4, "send(data, i, j) returns j")
      T.eq(s:receive(3), "bcd")
      T.eq(c:send("xyz", -2), 3)
      T.eq(s:receive(2), "yz")
      c:send("the end")
      c:close()
      T.eq(s:receive("*a"), "the end")
      local v, err = s:receive()
      T.eq(v, nil)
      T.eq(err, "closed")
      s:close()
    end },
    { "a receive that times out returns nil, timeout and what came", function()
      local c, s = pair()
      c:send("partial line")
      s:settimeout(0.1)
      local t0 = time.now()
      local v, err, partial = s:receive()
      T.eq(v, nil)
      T.eq(err, "timeout")
      T.eq(partial, "partial line")
      T.ok(time.now() - t0 >= 0.09, "waited its timeout")
      s:settimeout(0)
      v, err, partial = s:receive(10)
      T.eq(err, "timeout", "timeout 0 never waits")
      T.eq(partial, "")
      c:send("0123456789")
      time.sleep(0.05)
      T.eq(s:receive(10), "0123456789", "timeout 0 takes what is there")
      s:settimeout(nil)
      coroutine.spawn(function() time.sleep(0.1); c:send("late\n") end)
      T.eq(s:receive(), "late", "nil waits for ever")
      s:settimeout(0.05, "t")
      v, err = s:receive()
      T.eq(err, "timeout", "total mode")
      c:close()
      s:close()
    end },
    { "receiveany returns what has come, waiting only while nothing has", function()
      local c, s = pair()
      coroutine.spawn(function() time.sleep(0.05); c:send("abc") end)
      T.eq(s:receiveany(10), "abc", "waited for the first bytes")
      c:send("0123456789")
      time.sleep(0.02)
      T.eq(s:receiveany(4), "0123")
      T.eq(s:receiveany(100), "456789")
      s:settimeout(0.05)
      local v, err = s:receiveany(10)
      T.eq(err, "timeout")
      c:close()
      s:settimeout(1)
      v, err = s:receiveany(10)
      T.eq(v, nil)
      T.eq(err, "closed")
      s:close()
    end },
    { "the peer closing mid-line gives closed with the partial data", function()
      local c, s = pair()
      c:send("no newline")
      c:close()
      local v, err, partial = s:receive()
      T.eq(v, nil)
      T.eq(err, "closed")
      T.eq(partial, "no newline")
      v, err, partial = s:receive(5, "x")
      T.eq(err, "closed")
      T.eq(partial, "x")
      s:close()
    end },
    { "sends keep their order when a large one waits and a small one follows at once", function()
      local c, s = pair()
      local big = ("a"):rep(200 * 1024)
      local done = channel.new(2)
      -- Both in one step: the first waits (too large for the buffer), the
      -- second would fit, but must go after it.
      coroutine.spawn(function() done:send(c:send(big)) end)
      coroutine.spawn(function() done:send(c:send("z")) end)
      T.eq(done:receive() + done:receive(), #big + 1)
      s:settimeout(5)
      local got = s:receive(#big + 1)
      T.eq(#got, #big + 1)
      T.eq(got:sub(-1), "z", "the small send came last")
      T.eq(got:sub(1, #big) == big, true)
      c:close()
      s:close()
    end },
    { "a socket object dropped without close is closed when collected", function()
      local c, s = pair()
      c = nil
      collectgarbage()
      collectgarbage()
      s:settimeout(5)
      local v, err = s:receive()
      T.eq(v, nil)
      T.eq(err, "closed")
      s:close()
    end },
    { "a peer that resets the connection: closed, and the other sockets go on", function()
      local c, s = pair()
      local c2, s2 = pair()
      c:setoption("linger", { on = true, timeout = 0 })  -- close sends a reset
      c:send("before the reset\n")
      time.sleep(0.02)
      c:close()
      T.eq(s:receive(), "before the reset")
      local v, err = s:receive()
      T.eq(v, nil)
      T.eq(err, "closed")
      v, err = s:send("into the void")
      for _ = 1, 20 do  -- the kernel reports the reset by the second write at the latest
        if not v then break end
        time.sleep(0.01)
        v, err = s:send("into the void")
      end
      T.eq(v, nil)
      T.eq(err, "closed")
      s:close()
      c2:send("still here\n")
      T.eq(s2:receive(), "still here")
      c2:close()
      s2:close()
    end },
    { "a closed socket answers closed, and a second close is fine", function()
      local c, s = pair()
      c:close()
      T.eq(c:close(), 1)
      local v, err = c:send("x")
      T.eq(v, nil)
      T.eq(err, "closed")
      v, err = c:receive()
      T.eq(err, "closed")
      s:close()
    end },
    { "one task receives while another sends on the same socket", function()
      local c, s = pair()
      local got = channel.new(1)
      coroutine.spawn(function() got:send(c:receive(5)) end)
      time.sleep(0.02)
      T.eq(c:send("ping\n"), 5, "send while a receive waits")
      T.eq(s:receive(), "ping")
      s:send("pong!")
      T.eq(got:receive(), "pong!")
      c:close()
      s:close()
    end },
    { "refused, unresolvable and taken addresses answer LuaSocket's words", function()
      local v, err = socket.connect("127.0.0.1", free_port())
      T.eq(v, nil)
      T.eq(err, "connection refused")
      v, err = socket.connect("no-such-host.invalid", 80)
      T.eq(err, "host not found")
      local srv, port = listener()
      v, err = socket.bind("127.0.0.1", port)
      T.eq(v, nil)
      T.eq(err, "address already in use")
      srv:close()
      local s2 = assert(socket.bind("127.0.0.1", port), "the port is free again once closed")
      s2:close()
    end },
    { "a connect that times out returns timeout", function()
      -- A loopback server that never accepts, its backlog full: further
      -- handshakes are not answered, and a connect waits until its timeout.
      local m = assert(socket.tcp())
      assert(m:bind("127.0.0.1", 0))
      assert(m:listen(1))
      local _, port = m:getsockname()
      local held, timed_out = {}, false
      for _ = 1, 64 do
        local c = socket.tcp()
        c:settimeout(0.2)
        local t0 = time.now()
        local ok, err = c:connect("127.0.0.1", port)
        if ok then
          held[#held + 1] = c
        else
          T.eq(err, "timeout")
          T.ok(time.now() - t0 < 2, "at the timeout")
          timed_out = true
          c:close()
          break
        end
      end
      T.ok(timed_out, "a connect to a full backlog timed out")
      for _, c in ipairs(held) do c:close() end
      m:close()
    end },
    { "an accept that times out, and accept with timeout 0", function()
      local srv = listener()
      srv:settimeout(0.05)
      local v, err = srv:accept()
      T.eq(v, nil)
      T.eq(err, "timeout")
      srv:settimeout(0)
      v, err = srv:accept()
      T.eq(err, "timeout")
      srv:close()
    end },
    { "names, options, stats and dirty", function()
      local c, s = pair()
      local ip, port, family = c:getpeername()
      T.eq(ip, "127.0.0.1")
      T.eq(family, "inet")
      local sip, sport = s:getsockname()
      T.eq(sport, port)
      T.eq(sip, "127.0.0.1")
      T.eq(c:setoption("tcp-nodelay", true), 1)
      T.eq(c:getoption("tcp-nodelay"), true)
      T.eq(c:setoption("keepalive", true), 1)
      T.eq(c:setoption("linger", { on = true, timeout = 0 }), 1)
      T.eq(c:getoption("linger").on, true)
      T.eq(c:setoption("reuseaddr", true), 1)
      local ok, err = c:setoption("no-such-option", 1)
      T.eq(ok, nil)
      T.match(err, "unsupported option")
      c:send("12345")
      T.eq(s:receive(2), "12")
      T.eq(s:dirty(), true, "three bytes are buffered")
      local received, sent, age = s:getstats()
      T.eq(received, 5)
      T.eq(sent, 0)
      T.ok(age >= 0)
      T.eq(c:getstats() ~= nil, true)
      T.ok(c:getfd() >= 0)
      c:close()
      s:close()
    end },
    { "shutdown('send') lets the peer read to the end", function()
      local c, s = pair()
      c:send("last words")
      T.eq(c:shutdown("send"), 1)
      T.eq(s:receive("*a"), "last words")
      s:send("reply\n")
      T.eq(c:receive(), "reply", "the other direction still works")
      c:close()
      s:close()
    end },
    { "a master binds, listens and becomes a server", function()
      local m = assert(socket.tcp())
      T.match(tostring(m), "^tcp{master}")
      T.eq(m:bind("127.0.0.1", 0), 1)
      T.eq(m:listen(), 1)
      T.match(tostring(m), "^tcp{server}")
      m:close()
    end },
    { "UDP: sendto/receivefrom, and a connected peer", function()
      local a = assert(socket.udp())
      T.match(tostring(a), "^udp{unconnected}")
      T.eq(a:setsockname("127.0.0.1", 0), 1)
      local aip, aport = a:getsockname()
      local b = assert(socket.udp())
      T.eq(b:sendto("hello", aip, aport), 5)
      local data, ip, port = a:receivefrom()
      T.eq(data, "hello")
      T.eq(ip, "127.0.0.1")
      T.eq(b:setpeername(ip, aport), 1)
      T.match(tostring(b), "^udp{connected}")
      T.eq(b:send("again"), 5)
      T.eq(a:receive(3), "aga", "a datagram longer than asked is cut")
      a:sendto("back", b:getsockname())
      T.eq(b:receive(), "back")
      a:settimeout(0.05)
      local v, err = a:receive()
      T.eq(v, nil)
      T.eq(err, "timeout")
      a:close()
      b:close()
    end },
    { "dns: toip, tohostname, getaddrinfo, gethostname", function()
      local ip, info = socket.dns.toip("localhost")
      T.eq(ip, "127.0.0.1")
      T.eq(type(info.ip), "table")
      T.eq(socket.dns.toip("127.0.0.1"), "127.0.0.1")
      local v, err = socket.dns.toip("no-such-host.invalid")
      T.eq(v, nil)
      T.eq(err, "host not found")
      local name = socket.dns.tohostname("127.0.0.1")
      T.eq(type(name), "string")
      local addrs = socket.dns.getaddrinfo("localhost")
      T.ok(#addrs >= 1)
      T.match(addrs[1].family, "^inet")
      T.eq(type(socket.dns.gethostname()), "string")
    end },
    { "gettime, sleep, skip, try, protect; select is not supported", function()
      local t = socket.gettime()
      T.ok(math.abs(t - os.time()) < 5, "seconds since the epoch")
      local t0 = time.now()
      socket.sleep(0.05)
      T.ok(time.now() - t0 >= 0.045)
      T.eq(socket.skip(1, "a", "b", "c"), "b")
      local f = socket.protect(function(x)
        local v = socket.try(x, "the failure")
        return v * 2
      end)
      T.eq(f(21), 42)
      local v, err = f(nil)
      T.eq(v, nil)
      T.eq(err, "the failure")
      local cleaned = false
      local try = socket.newtry(function() cleaned = true end)
      v, err = socket.protect(function() try(nil, "oops") end)()
      T.eq(err, "oops")
      T.eq(cleaned, true)
      T.raises(function() socket.protect(function() error("plain") end)() end, "plain")
      T.raises(function() socket.select({}, {}, 0) end, "not supported: select")
    end },
    { "wrong argument types raise, naming the argument", function()
      local s = socket.tcp()
      T.raises(function() s:connect(1, 2) end, "bad argument #1 to 'connect'")
      T.raises(function() s:bind("127.0.0.1", "x") end, "bad argument #2 to 'bind'")
      T.raises(function() s:settimeout("x") end, "bad argument #1 to 'settimeout'")
      s:close()
      local c, peer = pair()
      T.raises(function() c:receive("*x") end, "invalid receive pattern")
      T.raises(function() c:send({}) end, "bad argument #1 to 'send'")
      c:close()
      peer:close()
    end },
    { "a process's sockets close when it ends, before its monitors hear", function()
      local port = free_port()
      local pid = assert(process.spawn_monitored("fixtures.socket_owner:listen_and_return", port))
      local ev = T.next_event("exit", 5)
      T.eq(ev.from, pid)
      T.eq(ev.result, true)
      local again = assert(socket.bind("127.0.0.1", port), "its port is free by the time its exit comes")
      again:close()
      -- A terminated one too; its peer sees the connection close.
      local srv, p2 = listener()
      local pid2 = assert(process.spawn_monitored("fixtures.socket_owner:connect_and_wait", p2))
      local conn = assert(srv:accept())
      process.terminate(pid2)
      ev = T.next_event("exit", 5)
      T.match(ev.error, "terminated")
      conn:settimeout(5)
      local v, err = conn:receive()
      T.eq(err, "closed")
      conn:close()
      srv:close()
    end },
    { "many processes talk through sockets on any number of workers", function()
      local srv, port = listener()
      local n = 50
      for i = 1, n do assert(process.spawn("fixtures.socket_owner:echo_client", port, i, process.pid())) end
      for _ = 1, n do
        local c = assert(srv:accept())
        coroutine.spawn(function()
          while true do
            local line = c:receive()
            if not line then break end
            c:send(line .. "\n")
          end
          c:close()
        end)
      end
      srv:close()
      local ok = 0
      for _ = 1, n do
        local m = assert(process.receive(10), "an echo client did not report")
        if m.payload == true then ok = ok + 1 end
      end
      T.eq(ok, n)
    end },
    { "a socket moves to the process it is spawned with, one process a connection", function()
      local srv, port = listener()
      local clients = {}
      for i = 1, 5 do clients[i] = assert(socket.connect("127.0.0.1", port)) end
      for _ = 1, 5 do
        local conn = assert(srv:accept())
        assert(process.spawn("fixtures.socket_owner:echo_handler", conn))
        local v, err = conn:send("x")
        T.eq(v, nil)
        T.eq(err, "closed", "the sender's object answers closed")
        T.eq(conn:close(), 1, "closing the given-away object does not touch the socket")
      end
      for i, c in ipairs(clients) do
        c:send("hello " .. i .. "\n")
        T.eq(c:receive(), "echo hello " .. i)
        c:close()
      end
      srv:close()
    end },
    { "every socket handed to a new process at once arrives open (200 in a row)", function()
      -- The receiver claims the socket in its Init, before it is alive:
      -- the claim must not take it for a process that has ended.
      local srv, port = listener()
      local bad = 0
      for i = 1, 200 do
        local c = assert(socket.connect("127.0.0.1", port))
        assert(process.spawn("fixtures.socket_owner:echo_handler", (assert(srv:accept()))))
        c:send(i .. "\n")
        c:settimeout(5)
        if c:receive() ~= "echo " .. i then bad = bad + 1 end
        c:close()
      end
      T.eq(bad, 0, "connections closed on the way")
      srv:close()
    end },
    { "a socket sent in a message arrives although its sender ended first", function()
      local srv, port = listener()
      local receiver = assert(process.spawn("fixtures.socket_owner:echo_by_message", 0.3))
      local c = assert(socket.connect("127.0.0.1", port))
      local giver = assert(process.spawn_monitored("fixtures.socket_owner:give_and_end", (assert(srv:accept())), receiver))
      T.eq(T.next_event("exit", 5).from, giver)
      c:settimeout(5)
      T.eq(c:receive(), "got tcp{client} ended")
      c:send("still open\n")
      T.eq(c:receive(), "echo still open")
      c:close()
      srv:close()
    end },
    { "what a process sent just before it closed or ended still arrives", function()
      -- The sender fills the kernel's buffers and the host's, then ends;
      -- only then does the reader read: the host's part must still come.
      local srv, port = listener()
      for _, close in ipairs { true, false } do
        local c = assert(socket.connect("127.0.0.1", port))
        local sender = assert(process.spawn_monitored("fixtures.socket_owner:fill_and_end", (assert(srv:accept())), close))
        local ev = T.next_event("exit", 10)
        T.eq(ev.from, sender)
        T.ok(type(ev.result) == "number", tostring(ev.error))
        c:settimeout(10)
        local all, err = c:receive("*a")
        T.eq(err, nil)
        T.eq(#all, ev.result, "every byte the sends took, then the close")
        c:close()
      end
      srv:close()
    end },
    { "a socket moves in a message, inside a table, to a waiting or a busy receiver", function()
      local srv, port = listener()
      for _, note in ipairs { "waiting", "busy" } do
        local receiver = assert(process.spawn("fixtures.socket_owner:echo_by_message"))
        if note == "waiting" then time.sleep(0.05) end  -- it waits in receive: the hand-over
        local c = assert(socket.connect("127.0.0.1", port))
        local conn = assert(srv:accept())
        T.eq(process.send(receiver, "conn", { conn = conn, note = note }), true)
        T.eq(c:receive(), "got tcp{client} " .. note)
        c:send("again\n")
        T.eq(c:receive(), "echo again")
        c:close()
      end
      srv:close()
    end },
    { "100 MB sent to a peer that never reads: the sender waits, memory stays bounded", function()
      -- In 1 MB sends (the tests' heap limit is 64 MB); the kernel's buffers
      -- fill, then a send waits, and its timeout ends it.
      local c, s = pair()
      local before = rss_kb()
      local chunk = ("x"):rep(1024 * 1024)
      c:settimeout(0.5)
      local total, err, last = 0, nil, nil
      for _ = 1, 100 do
        local n
        n, err, last = c:send(chunk)
        if not n then break end
        total = total + n
      end
      T.eq(err, "timeout")
      T.ok(total + (last or 0) < 100 * #chunk, "only part of it went: " .. total)
      local grew = rss_kb() - before
      T.ok(grew < 48 * 1024, "the host did not buffer the rest: grew " .. grew .. " KB")
      c:close()
      s:close()
    end },
    { "LuaSocket's socket.http fetches from python's http.server", function()
      local port = free_port()
      local dir = T.tmpdir()
      fs.write(dir .. "/hello.txt", "hello over http\n")
      local py = assert(exec.start({ "python3", "-m", "http.server", tostring(port), "--bind", "127.0.0.1" }, { cwd = dir }))
      T.ok(wait_port(port, 10), "python's http.server started")
      local http = require("socket.http")
      local body, code, headers = http.request("http://127.0.0.1:" .. port .. "/hello.txt")
      T.eq(code, 200)
      T.eq(body, "hello over http\n")
      T.eq(headers["content-length"], "16")
      local _, missing = http.request("http://127.0.0.1:" .. port .. "/missing")
      T.eq(missing, 404)
      py:kill()
      py:wait()
      os.execute("rm -rf " .. dir)
    end },
    { "redis-lua talks to redis-server", function()
      local port = free_port()
      local rs = assert(exec.start { "redis-server", "--port", tostring(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no" })
      T.ok(wait_port(port, 10), "redis-server started")
      local redis = require("redis")
      local client = redis.connect("127.0.0.1", port)
      T.eq(client:ping(), true)
      T.eq(client:set("greeting", "hi"), true)
      T.eq(client:get("greeting"), "hi")
      local big = ("v"):rep(200000)
      client:set("big", big)
      T.eq(client:get("big"), big)
      T.eq(client:incr("n"), 1)
      T.eq(client:incr("n"), 2)
      client:quit()
      rs:kill()
      rs:wait()
    end },
  }
end }

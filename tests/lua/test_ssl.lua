-- The ssl module (LuaSec's API on the host's sockets),
-- against python's ssl module and against itself, with a CA and a server
-- certificate for localhost/127.0.0.1 made here with the openssl program.
local T = require("t")
local socket = require("socket")
local ssl = require("ssl")

-- The test's own CA and server certificate, in a directory of its own.
local dir, ca, cert, key, other_ca
local function make_certificates()
  local c = require("certs").make()
  dir, ca, cert, key, other_ca = c.dir, c.ca, c.cert, c.key, c.other_ca
end

-- A TLS echo server in python (its ssl module): echoes what each
-- connection sends until it closes. Returns the program and its port.
local PY_ECHO = [[
import socket, ssl, sys, threading
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 0))
srv.listen(16)
print(srv.getsockname()[1], flush=True)
def serve(c):
    try:
        with ctx.wrap_socket(c, server_side=True) as t:
            while True:
                d = t.recv(65536)
                if not d:
                    break
                t.sendall(d)
    except Exception:
        pass
while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
]]
local py, py_port
local function start_python()
  assert(fs.write(dir .. "/echo.py", PY_ECHO))
  py = assert(exec.start { "python3", dir .. "/echo.py", cert, key })
  py_port = tonumber(assert(py.stdout:receive()))
end

-- A TLS client of port: the connected, wrapped socket (not handshaken).
local function client(port, params)
  local c = assert(socket.connect("127.0.0.1", port))
  c:settimeout(10)
  return assert(ssl.wrap(c, params))
end

-- A listening plain server on a free loopback port, and its port.
local function listener()
  local srv = assert(socket.bind("127.0.0.1", 0))
  local _, port = srv:getsockname()
  return srv, port
end

-- A TLS pair of the host's own: the client's connection and the server's,
-- both handshaken.
local function tls_pair()
  local srv, port = listener()
  local accepted = channel.new(1)
  coroutine.spawn(function()
    local s = assert(srv:accept())
    local conn = assert(ssl.wrap(s, { mode = "server", certificate = cert, key = key }))
    conn:settimeout(10)
    local ok, err = conn:dohandshake()
    accepted:send({ conn = conn, ok = ok, err = err })
  end)
  local c = client(port, { mode = "client", verify = "peer", cafile = ca })
  c:sni("localhost")
  assert(c:dohandshake())
  local r = accepted:receive()
  srv:close()
  assert(r.ok, r.err)
  return c, r.conn
end

local function open_fds()
  return #assert(fs.list("/proc/self/fd"))
end

local cases = {
  { "a round trip with python's ssl, verified against the test's CA", function()
    local conn = client(py_port, { mode = "client", protocol = "any", verify = "peer", cafile = ca })
    T.match(tostring(conn), "^tls{connection}")
    T.eq(conn:sni("localhost"), 1)
    T.eq(conn:dohandshake(), true)
    T.eq(conn:dohandshake(), true, "a second handshake call")
    local info = conn:info()
    T.match(info.protocol, "^TLSv1")
    T.eq(type(info.cipher), "string")
    T.eq(conn:info("protocol"), info.protocol)
    T.eq(conn:send("hello\r\nworld\n"), 13)
    T.eq(conn:receive(), "hello")
    T.eq(conn:receive("*l"), "world")
    conn:send("abcdef")
    T.eq(conn:receive(3), "abc")
    T.eq(conn:receive(3, "pre-"), "pre-def")
    local ip, port = conn:getpeername()
    T.eq(ip, "127.0.0.1")
    T.eq(port, py_port)
    T.eq(conn:getsockname(), "127.0.0.1")
    T.ok(conn:getfd() >= 0)
    T.eq(conn:close(), 1)
    local v, err = conn:receive()
    T.eq(v, nil)
    T.eq(err, "closed")
  end },
  { "the IP address is checked against the certificate too", function()
    local conn = client(py_port, { mode = "client", verify = "peer", cafile = ca })
    T.eq(conn:sni("127.0.0.1"), 1)
    T.eq(conn:dohandshake(), true)
    conn:close()
  end },
  { "the system's CA store does not know the test's CA: certificate verify failed", function()
    local conn = client(py_port, { mode = "client", verify = "peer" })
    conn:sni("localhost")
    local ok, err = conn:dohandshake()
    T.eq(ok, nil)
    T.match(err, "^certificate verify failed: ")
    local v, rerr = conn:receive()
    T.eq(v, nil)
    T.match(rerr, "certificate verify failed")
    conn:close()
  end },
  { "another CA, or the default verify, fails too", function()
    local conn = client(py_port, { mode = "client", cafile = other_ca })
    local ok, err = conn:dohandshake()
    T.eq(ok, nil)
    T.match(err, "^certificate verify failed: ")
    conn:close()
  end },
  { "a host name the certificate does not name fails with verify peer", function()
    local conn = client(py_port, { mode = "client", verify = { "peer", "fail_if_no_peer_cert" }, cafile = ca })
    conn:sni("wrong.example")
    local ok, err = conn:dohandshake()
    T.eq(ok, nil)
    T.match(err, "^certificate verify failed: .*hostname mismatch")
    conn:close()
  end },
  { "verify none accepts any certificate and name", function()
    local conn = client(py_port, { mode = "client", verify = "none", protocol = "tlsv1_2" })
    conn:sni("wrong.example")
    T.eq(conn:dohandshake(), true)
    T.eq(conn:info("protocol"), "TLSv1.2")
    conn:send("plain enough\n")
    T.eq(conn:receive(), "plain enough")
    conn:close()
  end },
  { "a context from ssl.newcontext wraps as its parameters do", function()
    local ctx = assert(ssl.newcontext { mode = "client", verify = "peer", cafile = ca, protocol = "tlsv1_3",
                                       options = { "all" } })
    local c = assert(socket.connect("127.0.0.1", py_port))
    local conn = assert(ssl.wrap(c, ctx))
    conn:sni("localhost")
    T.eq(conn:dohandshake(), true)
    T.eq(conn:info("protocol"), "TLSv1.3")
    conn:close()
  end },
  { "1 MB each way through python's echo", function()
    local conn = client(py_port, { mode = "client", cafile = ca })
    conn:sni("localhost")
    assert(conn:dohandshake())
    local blob = {}
    for i = 1, 1024 * 1024 / 16 do blob[i] = string.format("%015d\n", i) end
    blob = table.concat(blob)
    local sent = channel.new(1)
    coroutine.spawn(function() sent:send({ conn:send(blob) }) end)
    local back, err = conn:receive(#blob)
    T.eq(err, nil)
    T.eq(#back, #blob)
    T.ok(back == blob, "the echo is the data")
    T.eq(sent:receive()[1], #blob)
    conn:close()
  end },
  { "the host serves TLS to itself: lines, all, and 1 MB each way at once", function()
    local c, s = tls_pair()
    c:send("from client\n")
    T.eq(s:receive(), "from client")
    s:send("from server\n")
    T.eq(c:receive(), "from server")
    local blob = ("0123456789abcdef"):rep(64 * 1024)
    local done = channel.new(2)
    coroutine.spawn(function() done:send(c:send(blob)) end)
    coroutine.spawn(function() done:send(s:send(blob:upper())) end)
    T.eq(s:receive(#blob) == blob, true, "the server got the client's MB")
    T.eq(c:receive(#blob) == blob:upper(), true, "the client got the server's MB")
    T.eq(done:receive(), #blob)
    T.eq(done:receive(), #blob)
    s:send("the end")
    s:close()
    T.eq(c:receive("*a"), "the end", "all until the peer's close_notify")
    c:close()
  end },
  { "a send and a receive before dohandshake start the handshake and wait for it", function()
    local conn = client(py_port, { mode = "client", cafile = ca })
    conn:sni("localhost")
    T.eq(conn:send("early\n"), 6)
    T.eq(conn:receive(), "early")
    T.eq(conn:dohandshake(), true)
    conn:close()
  end },
  { "a server with verify peer asks for a client certificate", function()
    local srv, port = listener()
    local results = channel.new(2)
    coroutine.spawn(function()
      for _ = 1, 2 do
        local s = assert(srv:accept())
        local conn = assert(ssl.wrap(s, { mode = "server", certificate = cert, key = key, verify = "peer",
                                          cafile = ca }))
        conn:settimeout(10)
        local ok, err = conn:dohandshake()
        results:send(ok or err)
        if ok then conn:send("welcome\n") end
        conn:close()
      end
    end)
    local bare = client(port, { mode = "client", cafile = ca })
    bare:dohandshake()  -- TLS 1.3 ends the client's side before the server looks
    T.match(results:receive(), "^handshake failed: ")
    bare:close()
    local known = client(port, { mode = "client", cafile = ca, certificate = cert, key = key })
    T.eq(known:dohandshake(), true)
    T.eq(results:receive(), true)
    T.eq(known:receive(), "welcome")
    known:close()
    srv:close()
  end },
  { "a receive on TLS times out with its partial data", function()
    local c, s = tls_pair()
    c:send("partial")
    s:settimeout(0.1)
    local v, err, partial = s:receive()
    T.eq(v, nil)
    T.eq(err, "timeout")
    T.eq(partial, "partial")
    c:close()
    s:close()
  end },
  { "a peer that closes mid-handshake: closed", function()
    local srv, port = listener()
    coroutine.spawn(function()
      local s = assert(srv:accept())
      s:receive(5)  -- a piece of the ClientHello
      s:close()
    end)
    local conn = client(port, { mode = "client", verify = "none" })
    local ok, err = conn:dohandshake()
    T.eq(ok, nil)
    T.eq(err, "closed")
    conn:close()
    srv:close()
  end },
  { "a peer that is not TLS: the handshake fails, naming why", function()
    local srv, port = listener()
    coroutine.spawn(function()
      local s = assert(srv:accept())
      s:send("HTTP/1.0 400 Bad Request\r\n\r\nnot tls at all\r\n")
      s:receive("*a")
      s:close()
    end)
    local conn = client(port, { mode = "client", verify = "none" })
    local ok, err = conn:dohandshake()
    T.eq(ok, nil)
    T.match(err, "^handshake failed: ")
    conn:close()
    srv:close()
  end },
  { "a handshake nobody answers times out", function()
    local srv, port = listener()
    local conn = client(port, { mode = "client", verify = "none" })
    local peer = assert(srv:accept())
    conn:settimeout(0.1)
    local ok, err = conn:dohandshake()
    T.eq(ok, nil)
    T.eq(err, "timeout")
    conn:close()
    peer:close()
    srv:close()
  end },
  { "a TLS connection moves to another process, handshake and all", function()
    local c, s = tls_pair()
    assert(process.spawn("fixtures.tls_owner:echo_moved", s))
    local v, err = s:receive()
    T.eq(v, nil)
    T.eq(err, "closed", "the sender's object is given away")
    c:send("over there\n")
    T.eq(c:receive(), "moved over there")
    c:close()
  end },
  { "a process that ends holding a TLS connection leaks nothing", function()
    local before_fds = open_fds()
    local srv, port = listener()
    local served = channel.new(4)
    local function serve_one()
      local s = assert(srv:accept())
      local conn = assert(ssl.wrap(s, { mode = "server", certificate = cert, key = key }))
      conn:settimeout(10)
      assert(conn:dohandshake())
      local line, err = conn:receive()
      served:send({ line = line, err = err })
      local _, end_err = conn:receive()
      served:send(end_err)
      conn:close()
    end
    -- One returns: its connection is closed (after what it sent).
    coroutine.spawn(serve_one)
    local pid = assert(process.spawn_monitored("fixtures.tls_owner:connect_and_return", port))
    local r = served:receive()
    T.eq(r.line, "bye")
    T.eq(served:receive(), "closed")
    local ev = T.next_event("exit", 10)
    T.eq(ev.from, pid)
    -- One is terminated while it holds its connection.
    coroutine.spawn(serve_one)
    local pid2 = assert(process.spawn_monitored("fixtures.tls_owner:connect_and_wait", port, process.pid()))
    T.eq(process.receive(10).topic, "ready")
    process.terminate(pid2)
    ev = T.next_event("exit", 10)
    T.match(ev.error, "terminated")
    r = served:receive()
    T.eq(r.line, nil)
    T.eq(r.err, "closed")
    served:receive()
    srv:close()
    -- Every descriptor is closed again (fewer: an earlier case's lingering
    -- close may end meanwhile). Memory: the sanitizers' builds check it.
    for _ = 1, 50 do
      if open_fds() <= before_fds then break end
      time.sleep(0.02)
    end
    T.ok(open_fds() <= before_fds, "open descriptors: " .. open_fds() .. " after, " .. before_fds .. " before")
  end },
  { "bad parameters raise, naming them; missing files answer nil, err", function()
    local c = assert(socket.connect("127.0.0.1", py_port))
    T.raises(function() ssl.wrap(c) end, "bad argument #2 to 'wrap' %(table expected")
    T.raises(function() ssl.wrap(c, { mode = "both" }) end, "mode: 'client' or 'server' expected")
    T.raises(function() ssl.wrap(c, { mode = "client", protocol = "sslv3" }) end, "unknown protocol 'sslv3'")
    T.raises(function() ssl.wrap(c, { mode = "client", verify = "sometimes" }) end, "unknown verify option")
    T.raises(function() ssl.wrap(c, { mode = "client", cafile = 5 }) end, "cafile: string expected")
    T.raises(function() ssl.wrap(c, { mode = "server" }) end, "a server needs a certificate and a key")
    T.raises(function() ssl.wrap("x", { mode = "client" }) end, "bad argument #1 to 'wrap'")
    T.raises(function() ssl.newcontext(nil) end, "bad argument #1 to 'newcontext'")
    local v, err = ssl.wrap(c, { mode = "client", cafile = dir .. "/missing.pem" })
    T.eq(v, nil)
    T.match(err, "^not_found: CA file .*missing.pem")
    v, err = ssl.wrap(c, { mode = "client", cafile = dir .. "/ext.cnf" })
    T.eq(v, nil)
    T.match(err, "^invalid: CA file")
    local m = assert(socket.tcp())
    T.raises(function() ssl.wrap(m, { mode = "client" }) end, "a connected tcp socket expected")
    m:close()
    local conn = assert(ssl.wrap(c, { mode = "client", verify = "none" }))
    local again, aerr = ssl.wrap(conn, { mode = "client" })
    T.eq(again, nil)
    T.eq(aerr, "already wrapped")
    T.raises(function() conn:sni(5) end, "bad argument #1 to 'sni'")
    T.raises(function() conn:getpeercertificate() end, "not supported: getpeercertificate")
    conn:close()
    local s2 = assert(socket.connect("127.0.0.1", py_port))
    v, err = ssl.wrap(s2, { mode = "server", certificate = cert, key = ca })
    T.eq(v, nil)
    T.match(err, "^invalid: key file")
    s2:close()
  end },
  { "a FIFO as cafile is refused by its own wrap while another socket's echo goes on", function()
    local fifo = dir .. "/ca.fifo"
    T.eq(exec.run({ "mkfifo", fifo }).code, 0)
    -- Should the FIFO's open block, a writer opens it after 4 s (a shell
    -- of its own: exec's programs run on the I/O thread being tested).
    os.execute("(sleep 4; : > " .. fifo .. ") >/dev/null 2>&1 &")
    local srv, port = listener()
    coroutine.spawn(function()
      local s = assert(srv:accept())
      s:settimeout(10)
      while true do
        local line = s:receive()
        if not line then break end
        s:send(line .. "\n")
      end
      s:close()
    end)
    local echo = assert(socket.connect("127.0.0.1", port))
    echo:settimeout(10)
    local wrapped = channel.new(1)
    coroutine.spawn(function()
      local c = assert(socket.connect("127.0.0.1", py_port))
      local v, err = ssl.wrap(c, { mode = "client", cafile = fifo })
      c:close()
      wrapped:send({ v = v, err = err })
    end)
    time.sleep(0.1)
    local t0 = time.now()
    for i = 1, 5 do
      assert(echo:send("ping " .. i .. "\n"))
      T.eq(echo:receive(), "ping " .. i)
    end
    T.ok(time.now() - t0 < 2, "the echo went on (" .. (time.now() - t0) .. " s)")
    local r = channel.select { wrapped:case_receive(), timeout = 10 }
    T.eq(r.timeout, nil, "wrap answered")
    T.eq(r.value.v, nil)
    T.eq(r.value.err, "invalid: CA file " .. fifo .. ": not a regular file")
    echo:close()
    srv:close()
  end },
  { "a NUL byte in a file parameter is refused, naming it", function()
    local c = assert(socket.connect("127.0.0.1", py_port))
    T.eq(select(2, ssl.wrap(c, { mode = "client", cafile = ca .. "\0.txt" })), "invalid: cafile contains a NUL byte")
    T.eq(select(2, ssl.wrap(c, { mode = "client", verify = "none", certificate = cert .. "\0", key = key })),
      "invalid: certificate contains a NUL byte")
    T.eq(select(2, ssl.wrap(c, { mode = "client", verify = "none", certificate = cert, key = key .. "\0" })),
      "invalid: key contains a NUL byte")
    c:close()
  end },
}

return { main = function()
  -- The directory and the python program go whatever fails.
  local ok, err = pcall(function()
    make_certificates()
    start_python()
    T.run(cases)
  end)
  if py then
    py:kill()
    py:wait()
  end
  if dir then os.execute("rm -rf " .. dir) end
  if not ok then error(err, 0) end
  return true
end }

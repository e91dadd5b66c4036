-- A socket joins the poller's epoll set at its first wait, not when it is
-- made (docs/ARCHITECTURE.md, "Sockets on the workers"): many connections
-- whose first read must wait, their clients pausing a random 0-5 ms
-- before they send, so that the bytes come before, during or after the
-- registration. A wakeup lost there shows as a client whose echo never
-- comes (its receive times out). The sockets are served where they were
-- accepted, in a process of their own, or moved by message before their
-- first wait, and some moved again after it.
local T = require("t")
local H = require("http_raw")
local socket = require("socket")

local M = {}

local function pause()
  time.sleep(math.random() * 0.005)
end

-- Sends two lines, each after a pause, and checks both echoes; tells
-- reply_to whether all came back.
function M.client(port, i, reply_to)
  local c = socket.connect("127.0.0.1", port)
  if not c then return process.send(reply_to, "done", false) end
  c:settimeout(10)
  local ok = true
  for n = 1, 2 do
    pause()
    local line = i .. ":" .. n
    c:send(line .. "\n")
    if c:receive() ~= "echo " .. line then ok = false end
  end
  c:close()
  process.send(reply_to, "done", ok)
end

-- One line read and echoed: the read's first wait is where the socket
-- registers.
local function echo_line(conn)
  local line = conn:receive()
  if line then conn:send("echo " .. line .. "\n") end
  return line ~= nil
end

-- A connection's own process (the socket its spawn argument).
function M.own(conn)
  echo_line(conn)
  echo_line(conn)
  conn:close()
end

-- Serves the sockets messages bring, each in a task of its own, so that
-- many wait in one process at once; `lines` of each are echoed here.
function M.pool()
  while true do
    local m = process.receive()
    local conn, lines = m.payload.conn, m.payload.lines
    coroutine.spawn(function()
      for _ = 1, lines do echo_line(conn) end
      conn:close()
    end)
  end
end

-- Passes the sockets on to the pool, unread: a second move before the
-- first wait.
function M.relay(pool)
  while true do
    local m = process.receive()
    process.send(pool, "conn", m.payload)
  end
end

local function clients(port, n)
  for i = 1, n do assert(process.spawn("test_socket_first_wait:client", port, i, process.pid())) end
  local ok = 0
  for _ = 1, n do
    if T.expect("done", 60) then ok = ok + 1 end
  end
  return ok
end

return { main = function()
  local n = 300
  return T.run {
    { n .. " connections whose first read waits, served by their acceptor, their own process, or moved first", function()
      local server = assert(socket.bind("127.0.0.1", 0, 1024))
      local _, port = server:getsockname()
      local pools = {}
      for k = 1, 4 do pools[k] = assert(process.spawn("test_socket_first_wait:pool")) end
      local relay = assert(process.spawn("test_socket_first_wait:relay", pools[1]))
      coroutine.spawn(function()
        local k = 0
        while true do
          local conn, err = server:accept()
          if err == "closed" then break end
          if conn then
            k = k + 1
            local mode = k % 5
            if mode == 0 then  -- waits in the process that accepted it
              coroutine.spawn(function()
                echo_line(conn)
                echo_line(conn)
                conn:close()
              end)
            elseif mode == 1 then  -- its own process, the socket its spawn argument
              assert(process.spawn("test_socket_first_wait:own", conn))
            elseif mode == 2 then  -- moved before its first wait
              process.send(pools[1 + k % #pools], "conn", { conn = conn, lines = 2 })
            elseif mode == 3 then  -- moved twice before its first wait
              process.send(relay, "conn", { conn = conn, lines = 2 })
            else  -- registered here, then moved: its second wait is the receiver's
              coroutine.spawn(function()
                if echo_line(conn) then process.send(pools[1 + k % #pools], "conn", { conn = conn, lines = 1 })
                else conn:close() end
              end)
            end
          end
        end
      end)
      T.eq(clients(port, n), n, "echoes back")
      server:close()
      for _, p in ipairs(pools) do process.terminate(p) end
      process.terminate(relay)
    end },
    { "HTTP: clients that connect, pause, then send their request", function()
      local srv, port = H.serve()
      local done = channel.new(100)
      for i = 1, 100 do
        coroutine.spawn(function()
          local c = socket.connect("127.0.0.1", port)
          if not c then return done:send(false) end
          c:settimeout(10)
          pause()
          c:send("GET /who HTTP/1.1\r\nHost: t\r\n")
          pause()
          c:send(i % 2 == 0 and "Connection: close\r\n\r\n" or "\r\n")
          done:send(H.read_response(c) == 200)
          c:close()
        end)
      end
      local answered = 0
      for _ = 1, 100 do
        if done:receive() then answered = answered + 1 end
      end
      T.eq(answered, 100, "answered")
      srv:close()
    end },
  }
end, client = M.client, own = M.own, pool = M.pool, relay = M.relay }

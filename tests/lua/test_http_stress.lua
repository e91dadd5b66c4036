-- The HTTP server under load (a stress test, run under the sanitizers in
-- CI too): many clients at once, each on keep-alive connections that
-- pipeline, some closing in the middle of a response or of a request,
-- with connections hibernating between bursts. Every answered request
-- must get its own response, in order, exactly once; afterwards no
-- connection process and no descriptor is left.
local T = require("t")
local json = require("json")
local H = require("http_raw")
local socket = require("socket")

return { main = function(clients, rounds)
  clients = tonumber(clients) or 100
  rounds = tonumber(rounds) or 20
  return T.run {
    { clients .. " clients x " .. rounds .. " rounds of pipelined requests, some cut off", function()
      local srv, port = H.serve { hibernate_after = 0.05 }
      local base_fds = H.fds() - 1  -- the I/O threads are up; the listener closes at the end
      local done = channel.new(clients)
      local answered, cut = 0, 0
      for client = 1, clients do
        coroutine.spawn(function()
          local ok, err = pcall(function()
            local c = H.connect(port)
            c:settimeout(30)
            for round = 1, rounds do
              local burst = 1 + (client + round) % 3
              local reqs = {}
              for k = 1, burst do
                reqs[k] = string.format("GET /echo?c=%d&r=%d&k=%d HTTP/1.1\r\nHost: t\r\n\r\n", client, round, k)
              end
              -- Every seventh round ends mid-request on a fresh connection.
              if (client * rounds + round) % 7 == 0 then
                local half = H.connect(port)
                assert(half:send(reqs[1]:sub(1, 20)))
                half:close()
                cut = cut + 1
              end
              assert(c:send(table.concat(reqs)))
              for k = 1, burst do
                local status, _, body = H.read_response(c)
                assert(status == 200, "client " .. client .. " round " .. round .. ": " .. tostring(body))
                local q = json.decode(body).query
                assert(tonumber(q.c) == client and tonumber(q.r) == round and tonumber(q.k) == k,
                  "a response out of order or not its own: " .. body)
                answered = answered + 1
              end
              if round % 5 == 0 then time.sleep(0.06) end  -- past hibernate_after: a new process next
            end
            c:close()
          end)
          done:send(ok or err)
        end)
      end
      for _ = 1, clients do
        local r = done:receive()
        if r ~= true then error(r, 0) end
      end
      local want = 0
      for client = 1, clients do
        for round = 1, rounds do want = want + 1 + (client + round) % 3 end
      end
      T.eq(answered, want, "responses")
      srv:close()
      local deadline = time.now() + 20
      while time.now() < deadline and (T.count_processes("http.conn:serve") > 0 or H.fds() > base_fds) do time.sleep(0.05) end
      T.eq(T.count_processes("http.conn:serve"), 0, "connection processes left")
      T.eq(H.fds(), base_fds, "descriptors left open")
      print(string.format("%d requests answered, %d connections cut mid-request", answered, cut))
    end },
    { clients .. " clients whose connections' processes fail or succeed, the server closed in the middle", function()
      -- Each request is answered exactly once, in full: 500 where its
      -- process terminates itself (its connection's finalizer writes it),
      -- 200 otherwise; after a 500 or a Connection: close the connection
      -- ends with nothing more. Once the close began, a request may find
      -- its connection closed (nothing of a response read), the port
      -- shut, or be refused with 503 (accepted as the server closed).
      local srv, port = H.serve { hibernate_after = 0.05 }
      local base_fds = H.fds() - 1
      local done = channel.new(clients)
      local closing = false
      local ok200, ok500, cut_by_close = 0, 0, 0
      -- One response: status, its Connection header; or nil, err where
      -- the connection ended before any of it came.
      local function response(c)
        local line, err, partial = c:receive("*l")
        if not line then
          assert(partial == "", "a response cut off: " .. tostring(partial))
          return nil, err
        end
        local status = assert(tonumber(line:match("^HTTP/1%.1 (%d%d%d) ")), "status line: " .. line)
        local length, connection = 0, nil
        while true do
          local h = assert(c:receive("*l"))
          if h == "" then break end
          local k, v = h:match("^([^:]+):%s*(.*)$")
          k = k:lower()
          if k == "content-length" then length = tonumber(v) end
          if k == "connection" then connection = v:lower() end
        end
        if length > 0 then assert(c:receive(length)) end
        return status, connection
      end
      for client = 1, clients do
        coroutine.spawn(function()
          local ok, err = pcall(function()
            local c
            for i = 1, rounds * 2 do
              if not c then
                local cerr
                c, cerr = require("socket").connect("127.0.0.1", port)
                if not c then
                  assert(closing, "connect before the close: " .. tostring(cerr))
                  return
                end
                c:settimeout(30)
              end
              local path = (client + i) % 4 == 0 and "/terminate" or (client + i) % 4 == 1 and "/slow?secs=0.01" or "/who"
              local extra = client % 3 == 0 and "Connection: close\r\n" or ""
              local sent = c:send("GET " .. path .. " HTTP/1.1\r\nHost: t\r\n" .. extra .. "\r\n")
              local status, connection = nil, "close"
              if sent then status, connection = response(c) end
              if not status then
                assert(closing, "no response before the close: " .. tostring(connection))
                cut_by_close = cut_by_close + 1
              elseif status == 503 then
                -- Accepted in the turn the server closed: refused at once.
                assert(closing, path .. " got 503 before the close")
                assert(connection == "close", "a 503 without Connection: close")
                cut_by_close = cut_by_close + 1
              elseif path == "/terminate" then
                assert(status == 500, "a failed process's request got " .. status)
                ok500 = ok500 + 1
              else
                assert(status == 200, path .. " got " .. status)
                ok200 = ok200 + 1
              end
              if status == 500 or status == 503 or connection == "close" then
                local ended, rest = H.closed(c)
                assert(ended and rest == "", "more after the last response: " .. tostring(rest))
              end
              if not status or status == 500 or status == 503 or connection == "close" then
                c:close()
                c = nil
              end
            end
            if c then c:close() end
          end)
          done:send(ok or err)
        end)
      end
      T.eventually(function() return ok200 + ok500 >= clients * 3 end, 30, "requests answered before the close")
      closing = true
      T.eq(srv:close(), true)
      for _ = 1, clients do
        local r = done:receive()
        if r ~= true then error(r, 0) end
      end
      T.ok(ok500 > 0 and ok200 > 0, "both kinds answered")
      local deadline = time.now() + 20
      while time.now() < deadline and (T.count_processes("http.conn:serve") > 0 or H.fds() > base_fds) do time.sleep(0.05) end
      T.eq(T.count_processes("http.conn:serve"), 0, "connection processes left")
      T.eq(H.fds(), base_fds, "descriptors left open")
      print(string.format("%d answered 200, %d answered 500 (a failed process), %d requests cut by the close",
        ok200, ok500, cut_by_close))
    end },
    { "servers made and closed while their clients come: each connection served as its own server says", function()
      local base_fds = H.fds()
      local pad = string.rep("x", 1500)
      local request = "GET /echo HTTP/1.1\r\nHost: t\r\nX-Pad: " .. pad .. "\r\nConnection: close\r\n\r\n"
      local counts = { [200] = 0, [431] = 0, late_closed = 0 }
      -- One client: the small server (a 1 KB head limit) must refuse the
      -- padded head with 431, the large one serve it; a late one may find
      -- its server gone (refused, or closed unanswered).
      local function client(port, to_small, late)
        local c, cerr = socket.connect("127.0.0.1", port)
        if not c then
          assert(late, "connect: " .. tostring(cerr))
          counts.late_closed = counts.late_closed + 1
          return
        end
        c:settimeout(30)
        local status = c:send(request) and H.read_response(c)
        c:close()
        if not status then
          assert(late, "an early client got no answer")
          counts.late_closed = counts.late_closed + 1
          return
        end
        assert(status == (to_small and 431 or 200),
          (to_small and "the small" or "the large") .. " server answered " .. tostring(status))
        counts[status] = counts[status] + 1
      end
      local function spawn_clients(n, small, large, late, done)
        for i = 1, n do
          coroutine.spawn(function()
            local ok, err = pcall(client, i % 2 == 0 and small or large, i % 2 == 0, late)
            done:send(ok or err)
          end)
        end
      end
      for _ = 1, 6 do
        local small_srv, small = H.serve { max_header_bytes = 1024 }
        local large_srv, large = H.serve { max_header_bytes = 8192 }
        local done = channel.new(32)
        spawn_clients(16, small, large, false, done)
        for _ = 1, 16 do
          local r = done:receive()
          if r ~= true then error(r, 0) end
        end
        -- Late clients while both servers close.
        spawn_clients(8, small, large, true, done)
        time.sleep(0.002)
        coroutine.spawn(function() small_srv:close() end)
        large_srv:close()
        for _ = 1, 8 do
          local r = done:receive()
          if r ~= true then error(r, 0) end
        end
        small_srv:close()
      end
      T.ok(counts[200] >= 48 and counts[431] >= 48, "the early clients answered by their own servers")
      local deadline = time.now() + 20
      while time.now() < deadline and (T.count_processes("http.conn:serve") > 0 or H.fds() > base_fds) do time.sleep(0.05) end
      T.eq(T.count_processes("http.conn:serve"), 0, "connection processes left")
      T.eq(H.fds(), base_fds, "descriptors left open")
      print(string.format("%d served, %d refused 431, %d late ones closed", counts[200], counts[431], counts.late_closed))
    end },
    { "an acceptor that ends while its connections' processes fail: each request in flight gets one 500", function()
      local name = "http_stress_fail_" .. tostring(process.pid()):gsub("%W", "_")
      assert(process.registry.register(name))
      -- The two race: a double 500 shows in some rounds, not every one.
      for _ = 1, 10 do
        local srv, port = H.serve()
        local n = 30
        local conns = {}
        for i = 1, n do
          conns[i] = H.connect(port)
          assert(conns[i]:send("GET /hang?to=" .. name .. " HTTP/1.1\r\nHost: t\r\n\r\n"))
        end
        local pids = {}
        for i = 1, n do pids[i] = assert(process.receive(5)).payload end
        -- Both answer a request left in flight: the connection's
        -- finalizer, and the acceptor's end for what it still tracks.
        process.terminate(srv.id)
        for i = 1, n do process.terminate(pids[i]) end
        for i = 1, n do
          local all, err, partial = conns[i]:receive("*a")
          local got = all or partial
          local _, fives = got:gsub("HTTP/1%.1 500", "")
          T.eq(fives, 1, "500s written to one connection (" .. tostring(err) .. ")")
          conns[i]:close()
        end
      end
      process.registry.unregister(name)
    end },
    { "acceptors terminated while their clients come: each client answered or closed, nothing left", function()
      -- A process spawned just before its acceptor ends is served (the
      -- socket carries the configuration); one whose request was in the
      -- middle gets 500 (the acceptor's end), a hibernated one is closed.
      local base_fds = H.fds()
      local counts = { [200] = 0, [500] = 0, closed = 0 }
      local request = "GET /who HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
      local function client(port)
        local c = socket.connect("127.0.0.1", port)
        if not c then counts.closed = counts.closed + 1 return end
        c:settimeout(30)
        local status = c:send(request) and H.read_response(c)
        c:close()
        if not status then counts.closed = counts.closed + 1 return end
        assert(status == 200 or status == 500, "answered " .. tostring(status))
        counts[status] = counts[status] + 1
      end
      for round = 1, 8 do
        local srv, port = H.serve()
        local done = channel.new(32)
        for _ = 1, 24 do
          coroutine.spawn(function() done:send(pcall(client, port) or "a client failed") end)
        end
        if round > 1 then time.sleep(0.0003 * round) end  -- the end at different points of the burst
        process.terminate(srv.id)
        for _ = 1, 24 do
          local r = done:receive()
          if r ~= true then error(r, 0) end
        end
      end
      T.ok(counts[200] > 0, "some clients served")
      local deadline = time.now() + 20
      while time.now() < deadline and (T.count_processes("http.conn:serve") > 0 or H.fds() > base_fds) do time.sleep(0.05) end
      T.eq(T.count_processes("http.conn:serve"), 0, "connection processes left")
      T.eq(T.count_processes("http.server:accept"), 0, "acceptors left")
      T.eq(H.fds(), base_fds, "descriptors left open")
      print(string.format("acceptors terminated: %d served, %d answered 500, %d closed", counts[200], counts[500], counts.closed))
    end },
  }
end }

-- The inspector (--inspect): a second host program runs
-- fixtures/inspected.lua under --inspect; this test reads its /metrics and
-- /api/processes with curl, terminates through it, drives its page in
-- headless Chromium (tests/browser/inspector_page.py), and checks that it
-- answers under a spawn storm.
local T = require("t")
local json = require("json")
local socket = require("socket")

local function curl(args)
  local argv = { "curl", "-sS", "--max-time", "30" }
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  return exec.run(argv)
end

-- The value of a metric in Prometheus' text.
local function metric(text, name)
  return tonumber(text:match("\n" .. name .. " (%d+)\n") or text:match("^" .. name .. " (%d+)\n"))
end

return { main = function(host, storm)
  storm = tonumber(storm) or 100000
  local tests_dir = debug.getinfo(1, "S").source:match("^@(.*)/[^/]+$")
  local n = 6

  -- A host under --inspect; its base URL and its handle.
  local function start(count, extra)
    local port = T.free_port()
    local argv = { host, "run", tests_dir, "--entry", "fixtures.inspected", "--inspect", "127.0.0.1:" .. port }
    for _, a in ipairs(extra or {}) do argv[#argv + 1] = a end
    argv[#argv + 1] = "--"
    argv[#argv + 1] = tostring(count)
    local p = assert(exec.start(argv))
    T.ok(T.wait_port(port, 30), "the inspector listens")
    return "http://127.0.0.1:" .. port, p
  end
  local function stop(p)
    p:kill("TERM")
    local st = p:wait(20)
    T.ok(st, "the host ended after SIGTERM")
  end

  local url, p = start(n)
  local ok, err = pcall(function()
    T.run {
      { "/metrics: Prometheus text with the live processes and the counters", function()
        local r = curl { "-i", url .. "/metrics" }
        T.eq(r.code, 0, r.stderr)
        T.match(r.stdout, "[Cc]ontent%-[Tt]ype: text/plain; version=0%.0%.4")
        local body = r.stdout:match("\r\n\r\n(.*)$")
        T.eq(metric(body, "host_processes"), n + 1, "the root and its n processes, not the inspector's own")
        T.match(body, "# TYPE host_processes gauge")
        for _, name in ipairs { "host_messages_total", "host_steps_total", "host_spawns_total", "host_failures_total" } do
          T.ok(metric(body, name), name .. " is there")
          T.match(body, "# TYPE " .. name .. " counter")
        end
        T.ok(metric(body, "host_spawns_total") >= n + 1, "spawns counted")
        T.ok(metric(body, "host_steps_total") >= n + 1, "steps counted")
      end },
      { "/api/processes: each live process with its facts and relations", function()
        local r = curl { url .. "/api/processes" }
        local data = assert(json.decode(r.stdout))
        T.eq(data.total, n + 1)
        T.eq(#data.processes, n + 1)
        local root
        for _, row in ipairs(data.processes) do
          if row.names[1] == "inspected.root" then root = row end
          T.match(row.pid, "^<%d+%.%d+%.%d+>$")
          T.ok(row.status == "idle" or row.status == "waiting", "status " .. row.status)
        end
        T.ok(root, "the root is listed with its name")
        T.eq(root.entry, "fixtures.inspected:main")
        for _, row in ipairs(data.processes) do
          if row ~= root then T.eq(row.parent, root.pid, "spawned by the root: " .. row.pid) end
        end
        T.eq(#root.monitors, 1, "the root monitors one")
        T.eq(#root.links, 1, "and is linked to one")
        local f = assert(json.decode(curl { url .. "/api/processes?filter=inspected.root" }.stdout))
        T.eq(f.matched, 1, "the filter")
        local page = curl { "-i", url .. "/" }
        T.match(page.stdout, "^HTTP/1%.1 200")
        T.match(page.stdout, "<title>host inspector</title>")
        T.match(curl { "-i", url .. "/nothing" }.stdout, "^HTTP/1%.1 404")
      end },
      { "terminate: a live PID 200, then 404; a malformed one 400; GET 405", function()
        local rows = assert(json.decode(curl { url .. "/api/processes?filter=inspected:idle" }.stdout)).processes
        local victim = rows[#rows].pid
        local r = curl { "-i", "-X", "POST", url .. "/api/terminate?pid=" .. victim }
        T.match(r.stdout, "^HTTP/1%.1 200")
        T.eventually(function()
          return metric(curl { url .. "/metrics" }.stdout, "host_processes") == n
        end, 10, "the terminated process gone from the count")
        T.match(curl { "-i", "-X", "POST", url .. "/api/terminate?pid=" .. victim }.stdout, "^HTTP/1%.1 404")
        T.match(curl { "-i", "-X", "POST", url .. "/api/terminate?pid=nonsense" }.stdout, "^HTTP/1%.1 400")
        T.match(curl { "-i", url .. "/api/terminate?pid=" .. victim }.stdout, "^HTTP/1%.1 405")
        n = n - 1
      end },
      { "cross-site requests get 403: a Host that is not the inspector's, a POST from another origin", function()
        local port = url:match(":(%d+)$")
        local function status(args)
          local r = curl(args)
          return tonumber(r.stdout:match("^HTTP/1%.1 (%d+)")), r.stdout
        end
        -- A page elsewhere (DNS rebinding: its own name, the inspector's address).
        for _, host in ipairs { "evil.example:" .. port, "evil.example", "localhost:1", "127.0.0.2:" .. port } do
          T.eq(status { "-i", "-H", "Host: " .. host, url .. "/api/processes" }, 403, "Host " .. host)
          T.eq(status { "-i", "-H", "Host: " .. host, url .. "/metrics" }, 403, "/metrics for Host " .. host)
          T.eq(status { "-i", "-H", "Host: " .. host, url .. "/" }, 403, "the page for Host " .. host)
        end
        -- A page elsewhere posting to it (a no-cors fetch sends its Origin).
        local rows = assert(json.decode(curl { url .. "/api/processes?filter=inspected:idle" }.stdout)).processes
        local victim = rows[#rows].pid
        for _, origin in ipairs { "http://evil.example", "null", "http://evil.example:" .. port, "https://127.0.0.1:" .. port } do
          T.eq(status { "-i", "-X", "POST", "-H", "Origin: " .. origin, url .. "/api/terminate?pid=" .. victim }, 403,
            "Origin " .. origin)
        end
        T.eq(metric(curl { url .. "/metrics" }.stdout, "host_processes"), n + 1, "nothing was terminated")
        -- Its own address and the loopback names, with its port, are served;
        -- a POST from its own page (or with no Origin, as curl) goes through.
        for _, host in ipairs { "127.0.0.1:" .. port, "localhost:" .. port, "LocalHost:" .. port, "[::1]:" .. port } do
          T.eq(status { "-i", "-H", "Host: " .. host, url .. "/api/processes" }, 200, "Host " .. host)
          T.eq(status { "-i", "-H", "Host: " .. host, url .. "/metrics" }, 200, "/metrics for Host " .. host)
        end
        T.eq(status { "-i", "-X", "POST", "-H", "Origin: http://127.0.0.1:" .. port, url .. "/api/terminate?pid=nonsense" },
          400, "the page's own origin reaches the pid's check")
        T.eq(status { "-i", "-X", "POST", "-H", "Origin: http://localhost:" .. port, "-H", "Host: localhost:" .. port,
          url .. "/api/terminate?pid=nonsense" }, 400, "by its loopback name")
      end },
      { "the page in headless Chromium: rows match the processes; terminate clicked", function()
        local script = tests_dir .. "/../browser/inspector_page.py"
        local r = exec.run({ "python3", script, url .. "/", tostring(n + 1), "inspected.root" })
        if r.code == 77 and os.getenv("CI") ~= "true" then
          print("skipped: " .. r.stdout)
          return
        end
        T.eq(r.code, 0, "the browser check: " .. r.stdout .. r.stderr)
        local victim = r.stdout:match("VICTIM (%S+)")
        T.ok(victim, "it named the process it terminated")
        T.eventually(function()
          return metric(curl { url .. "/metrics" }.stdout, "host_processes") == n
        end, 10, "the process terminated from the page gone")
      end },
    }
  end)
  stop(p)
  if not ok then error(err, 0) end

  return T.run {
    { "bad --inspect addresses are usage errors", function()
      local r = exec.run { host, "run", tests_dir, "--entry", "fixtures.inspected", "--inspect", "nonsense" }
      T.eq(r.code, 2); T.match(r.stderr, "%-%-inspect needs an address")
      local busy = assert(socket.bind("127.0.0.1", 0))
      local _, port = busy:getsockname()
      local r2 = exec.run { host, "run", tests_dir, "--entry", "fixtures.inspected", "--inspect", "127.0.0.1:" .. port,
        "--", "1" }
      T.eq(r2.code, 2); T.match(r2.stderr, "address already in use")
      busy:close()
    end },
    { "the inspector answers under a spawn storm of " .. storm .. " processes", function()
      local surl, sp = start(storm, { "--max-processes", tostring(storm + 100) })
      local done, serr = pcall(function()
        T.eventually(function()
          return metric(curl { surl .. "/metrics" }.stdout, "host_processes") == storm + 1
        end, 120, "every process spawned")
        local t0 = time.now()
        local r = curl { surl .. "/api/processes?limit=500" }
        local data = assert(json.decode(r.stdout), r.stdout)
        T.eq(data.matched, storm + 1)
        T.eq(#data.processes, 500, "rows bounded")
        print(string.format("/api/processes over %d processes: %.2f s", storm + 1, time.now() - t0))
        local page = curl { "-i", surl .. "/" }
        T.match(page.stdout, "^HTTP/1%.1 200")
      end)
      stop(sp)
      if not done then error(serr, 0) end
    end },
  }
end }

-- Many connections at once (issue 43's stress test), and descriptors
-- running out. The clients run in a second host program (its own
-- descriptor limit): `host run tests/lua --entry test_socket_stress --
-- HOST_BINARY CONNECTIONS [sanitized]` (CMakeLists.txt passes them).
local T = require("t")
local socket = require("socket")

return { main = function(host, n, sanitized)
  n = tonumber(n) or 10000
  local tests_dir = debug.getinfo(1, "S").source:match("^@(.*)/[^/]+$")
  local server = assert(socket.bind("127.0.0.1", 0, 4096))
  local _, port = server:getsockname()
  coroutine.spawn(function()
    while true do
      local conn = server:accept()
      if conn then assert(process.spawn("fixtures.socket_owner:echo_handler", conn)) end
    end
  end)
  return T.run {
    { n .. " connections at once, each its own process on both ends, echo", function()
      local r = assert(exec.run({ host, "run", tests_dir, "--entry", "fixtures.stress_client", "--max-processes", "100000",
        "--", tostring(port), tostring(n) }, { timeout = 240 }))
      io.stderr:write(r.stderr)
      T.eq(r.code, 0, "the client program")
      T.match(r.stderr, "stress: " .. n .. " ok")
    end },
    { "descriptors running out answer 'too many open files', and the host goes on", function()
      -- Not under a sanitizer: its own checks need descriptors (UBSan's
      -- check of a vptr opens a pipe to probe memory, and with none left
      -- reports a false error).
      if sanitized then
        print("skipped under a sanitizer")
        return
      end
      local r = assert(exec.run({ "sh", "-c", 'ulimit -n 256 && exec "$0" "$@"', host, "run", tests_dir,
        "--entry", "fixtures.stress_client:fd_hog", "--", tostring(port) }, { timeout = 60 }))
      io.stderr:write(r.stderr)
      T.eq(r.code, 0, "the hog program")
      T.match(r.stderr, "the host went on")
    end },
  }
end }

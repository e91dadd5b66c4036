-- What node b's scripts of the transport and the benchmark (flow.lua,
-- bench.lua) begin with, against tests/cluster/serve.lua on node a: a line
-- said on stdout at once (the test and tests/bench/cluster.sh read it
-- while the node still runs), and the wait until a's echo answers.
local M = {}

-- Also what the other scripts here say with: each value as tostring makes it.
function M.say(...)
  local parts = {}
  for i = 1, select("#", ...) do parts[i] = tostring((select(i, ...))) end
  io.stdout:write(table.concat(parts, " "), "\n")
  io.stdout:flush()
end

-- Node a is connected and its root has registered "echo" (a send to a
-- name nobody holds there is dropped: ask until it answers). Returns the
-- echo's PID.
function M.wait_for_echo()
  for _ = 1, 400 do
    for _, n in ipairs(process.nodes()) do
      if n == "a" then
        assert(process.send({ "echo", "a" }, "hello", 0))
        local r = process.receive(0.25)
        if r then return r.from end
      end
    end
    time.sleep(0.05)
  end
  error("node a's echo never answered")
end

return M

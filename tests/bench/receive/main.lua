-- The host's side of tests/bench/receive.sh: connects to the data server
-- at PORT, takes COUNT items with receive(PATTERN) ("*l" or a byte count),
-- and prints the time each receive took, in nanoseconds, once all came.
local socket = require("socket")

local M = {}

function M.main(port, count, pattern)
  count = tonumber(count)
  pattern = tonumber(pattern) or pattern
  local c = assert(socket.connect("127.0.0.1", tonumber(port)))
  local receive = c.receive
  assert(receive(c, pattern))  -- the first, so that the data is flowing
  local t0 = time.now()
  for _ = 2, count do
    local item, err = receive(c, pattern)
    if not item then error("receive: " .. tostring(err)) end
  end
  local ns = (time.now() - t0) * 1e9 / (count - 1)
  c:close()
  io.stdout:write(string.format("RECEIVE_NS %.1f\n", ns))
  return true
end

return M

-- idle_memory_slept: has slept once (time.sleep, which a process sends
-- and receives around, as workers with a delay do), then waits as
-- nodes.idle does.
local idle = require("nodes.idle")
local M = {}

function M.main()
  time.sleep(0.001)
  return idle.main()
end

return M

-- A test-only module's Lua half (tests/test_module_registry.cpp), written
-- as every module's is: the chunk gets the waiting call, its command and
-- the wall clock, and returns the module's table.
local call, CMD, wall_time = ...

local M = {}

-- Its arguments back, upper-cased, by the service (tests/modules/echo_service.hpp).
function M.shout(...)
  return call(CMD, 0, ...)
end

-- Marks the calling process as holding something the service frees when it ends.
function M.hold()
  return call(CMD, 0, "hold")
end

M.has_clock = type(wall_time) == "function"

return M

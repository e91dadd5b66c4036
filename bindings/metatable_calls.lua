-- getmetatable and setmetatable over the base library's, for the globals
-- a process has not named yet (bindings/lua_process_env.cpp, plain_globals,
-- says why). Lua, not C: LuaJIT compiles these into the caller's trace
-- with the originals inline (a C wrapper made setmetatable in a compiled
-- loop 150 times slower). Their arguments pass on as given (...), so that
-- a missing one is the originals' error, not a nil.
--
-- Called with the originals, the process's globals table, type and
-- plain(v), which makes _G plain or installs the strings' metatable;
-- returns the two wrappers.
local getmetatable, setmetatable, G, type, plain = ...

return function(...)
  local v = ...
  if v == G or type(v) == "string" then plain(v) end
  return getmetatable(...)
end, function(...)
  local t = ...
  if t == G then plain(t) end
  return setmetatable(...)
end

-- The host's side of tests/bench/receive.sh's redis table: redis-lua
-- (LuaSocket underneath, so the host's sockets) against the redis-server
-- at PORT: COUNT PINGs one after another, then HGETALL of the hash KEY
-- ROUNDS times; prints microseconds a call for each.
local M = {}

function M.main(port, count, key, rounds)
  local redis = require("redis")
  local client = assert(redis.connect("127.0.0.1", tonumber(port)))
  count, rounds = tonumber(count), tonumber(rounds)
  client:ping()
  local t0 = time.now()
  for _ = 1, count do client:ping() end
  local ping = (time.now() - t0) * 1e6 / count
  local fields = 0
  t0 = time.now()
  for _ = 1, rounds do
    local all = client:hgetall(key)
    fields = 0
    for _ in pairs(all) do fields = fields + 1 end
  end
  local hgetall = (time.now() - t0) * 1e6 / rounds
  io.stdout:write(string.format("PING_US %.2f\nHGETALL_US %.1f\nFIELDS %d\n", ping, hgetall, fields))
  return true
end

return M

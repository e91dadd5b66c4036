-- The HTTP benchmark's host side (tests/bench/http.sh): hello world and a
-- small JSON endpoint, a process a connection.
--   host run scripts/httpbench [-- PORT [memory]]
-- With "memory", each second it writes to stderr the acceptor's Lua heap
-- and the most processes alive at once so far (sampled every 50 ms): where
-- an idle connection's bytes go (BENCHMARKS.md, "Hibernated HTTP
-- connections").
local function main(port, report)
  local http = require("http")
  local srv = assert(http.serve("127.0.0.1:" .. (tonumber(port) or 8080), "api:handle"))
  log.info("httpbench: listening on %s", srv.address)
  if report ~= "memory" then
    while true do process.receive() end
  end
  local peak, ticks = 0, 0
  while true do
    time.sleep(0.05)
    peak = math.max(peak, #process.list())
    ticks = ticks + 1
    if ticks % 20 == 0 then
      io.stderr:write(string.format("acceptor heap %d B, peak processes %d\n", process.info(srv.id).memory, peak))
    end
  end
end

return { main = main }

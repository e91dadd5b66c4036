-- Hot reload: run with --watch, then edit greeting.lua while it runs.
--   host run scripts/reload --watch
-- The ticker process prints the greeting every second. When greeting.lua
-- changes on disk it gets a reload event and upgrades itself onto the new
-- code, keeping its PID and mailbox. A version that does not compile is
-- reported once and the running code carries on.
local function ticker(count)
  local greeting = require("greeting")
  local events = process.events()
  local tick = time.ticker("1s")
  count = count or 0
  while true do
    local r = channel.select { tick.channel:case_receive(), events:case_receive() }
    if r.channel == events and r.value.kind == "reload" then
      log.info("modules changed: %s; upgrading", table.concat(r.value.modules, ", "))
      tick.stop()
      process.upgrade("main:ticker", count)
    elseif r.channel == events and r.value.kind == "cancel" then
      return count
    elseif r.channel == tick.channel then
      count = count + 1
      log.info("[%d] %s", count, greeting.text())
    end
  end
end

local function main(seconds)
  local pid = assert(process.spawn_linked("main:ticker"))
  log.info("ticker %s running; edit scripts/reload/greeting.lua (Ctrl-C to stop)", pid)
  time.sleep(tonumber(seconds) or 3600)
end

return { main = main, ticker = ticker }

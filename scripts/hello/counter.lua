-- Keeps a count; a "crash" message makes it fail, to show supervision.
local request = require("request")

return function()
  local count = 0
  while true do
    local m = process.receive()
    if m.topic == "crash" then error("the counter crashed on purpose") end
    if request.is_call(m) then
      if m.topic == "add" then count = count + m.payload.value end
      request.reply(m, count)
    end
  end
end

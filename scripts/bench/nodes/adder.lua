-- request: answers each request.call with its value plus one.
local request = require("request")

return function()
  while true do
    local m = process.receive()
    if m.topic == "stop" then return end
    request.reply(m, m.payload.value + 1)
  end
end

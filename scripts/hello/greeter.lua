-- Answers greet calls.
local request = require("request")

return function()
  while true do
    local m = process.receive()
    if request.is_call(m) and m.topic == "greet" then
      request.reply(m, "Hello, " .. tostring(m.payload.value) .. "!")
    end
  end
end

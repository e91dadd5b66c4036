-- pingpong_strings' partner: answers each message with its payload, on
-- its topic, waiting in process.receive.
return function()
  while true do
    local m = process.receive()
    if m.topic == "stop" then return end
    process.send(m.from, m.topic, m.payload)
  end
end

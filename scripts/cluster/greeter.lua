-- Started on node b by ping.lua's process.spawn_on.
return function(reply_to)
  process.send(reply_to, "hello", "hello from " .. process.node())
end

-- fj_create: returns the payload of its one message.
return { main = function() return process.receive().payload end }

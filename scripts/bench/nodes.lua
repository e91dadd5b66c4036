-- The processes the benchmarks spawn.
local N = {}

function N.noop(i) return i end

function N.idle()
  while true do
    local m = process.receive()
    if m.topic == "stop" then return end
    if m.topic == "heap" then process.send(m.from, "heap", process.memory()) end
  end
end

function N.pong()
  local inbox = process.inbox()
  while true do
    local m = inbox:receive()
    if m.topic == "stop" then return end
    process.send(m.from, "pong", m.payload)
  end
end

function N.ring_node(report_to)
  local next_pid
  while true do
    local m = process.receive()
    if m.topic == "next" then next_pid = m.payload
    elseif m.topic == "token" then
      if m.payload == 0 then process.send(report_to, "done", 0)
      else process.send(next_pid, "token", m.payload - 1) end
    elseif m.topic == "stop" then return end
  end
end

function N.sink(report_to, n)
  local bytes = 0
  for _ = 1, n do bytes = bytes + #process.receive().payload end
  process.send(report_to, "done", bytes)
end

function N.counter()
  local total = 0
  while true do
    local m = process.receive()
    if m.topic == "inc" then total = total + 1
    else process.send(m.from, "total", total); return end
  end
end

function N.once() return process.receive().payload end

-- One process per call of naive fib: spawn two children, sum their replies.
function N.fib(n, parent)
  if n < 2 then process.send(parent, "fib", n); return end
  local me = process.pid()
  assert(process.spawn("nodes:fib", n - 1, me))
  assert(process.spawn("nodes:fib", n - 2, me))
  local a = process.receive().payload
  local b = process.receive().payload
  process.send(parent, "fib", a + b)
end

return N

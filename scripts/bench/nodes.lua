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

function N.fj_worker(report_to, n)
  local x = 0
  for _ = 1, n do
    process.receive()
    for k = 1, 10 do x = x + math.sqrt(k) * math.sin(k) end  -- the "small compute"
  end
  process.send(report_to, "done", n)
  return x
end

function N.big_worker(report_to, n, index)
  -- Pings from faster peers may come first: wait for the peer list by topic.
  local peers = process.listen("peers"):receive().payload
  local me = process.pid()
  local sent, rng = 0, index * 7919
  local function ping()
    rng = (rng * 1103515245 + 12345) % 2147483648
    local j = rng % #peers + 1
    if peers[j] == me then j = j % #peers + 1 end
    process.send(peers[j], "ping", nil)
    sent = sent + 1
  end
  ping()
  while true do
    local m = process.receive()
    if m.topic == "ping" then process.send(m.from, "pong", nil)
    elseif m.topic == "pong" then
      if sent < n then ping() else process.send(report_to, "done", sent) end
    elseif m.topic == "stop" then return end
  end
end

local COMPLEMENT = { blue = { blue = "blue", red = "yellow", yellow = "red" },
  red = { blue = "yellow", red = "red", yellow = "blue" },
  yellow = { blue = "red", red = "blue", yellow = "yellow" } }

function N.creature(mall, color)
  local met = 0
  while true do
    process.send(mall, "meet", color)
    local m = process.receive()
    if m.topic == "stop" then process.send(mall, "met", met); return end
    color = COMPLEMENT[color][m.payload]
    met = met + 1
  end
end

function N.mall(report_to, creatures, meetings)
  local colors = { "blue", "red", "yellow" }
  for i = 1, creatures do assert(process.spawn("nodes:creature", process.pid(), colors[(i - 1) % 3 + 1])) end
  local waiting, waiting_color, done, stopped, total = nil, nil, 0, 0, 0
  while stopped < creatures do
    local m = process.receive()
    if m.topic == "meet" then
      if done >= meetings then
        process.send(m.from, "stop", nil)
      elseif waiting then
        process.send(waiting, "mate", m.payload)
        process.send(m.from, "mate", waiting_color)
        waiting, done = nil, done + 1
      else
        waiting, waiting_color = m.from, m.payload
      end
    elseif m.topic == "met" then
      stopped, total = stopped + 1, total + m.payload
    end
    if done >= meetings and waiting then process.send(waiting, "stop", nil); waiting = nil end
  end
  process.send(report_to, "meetings", total)
end

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

-- chameneos: the mall and its creatures.
local COMPLEMENT = { blue = { blue = "blue", red = "yellow", yellow = "red" },
  red = { blue = "yellow", red = "red", yellow = "blue" },
  yellow = { blue = "red", red = "blue", yellow = "yellow" } }

local M = {}

function M.creature(mall, color)
  local met = 0
  while true do
    process.send(mall, "meet", color)
    local m = process.receive()
    if m.topic == "stop" then process.send(mall, "met", met); return end
    color = COMPLEMENT[color][m.payload]
    met = met + 1
  end
end

function M.mall(report_to, creatures, meetings)
  local colors = { "blue", "red", "yellow" }
  for i = 1, creatures do assert(process.spawn("nodes.chameneos:creature", process.pid(), colors[(i - 1) % 3 + 1])) end
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

return M

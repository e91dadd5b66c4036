-- counting: counts "inc" messages and answers any other with the total.
local M = {}

function M.main()
  local total = 0
  while true do
    local m = process.receive()
    if m.topic == "inc" then total = total + 1
    else process.send(m.from, "total", total); return end
  end
end

return M

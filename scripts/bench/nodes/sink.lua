-- send_1k, send_tables: adds up the lengths of N messages' payloads (bytes, or array items), then reports.
local M = {}

function M.main(report_to, n)
  local bytes = 0
  for _ = 1, n do bytes = bytes + #process.receive().payload end
  process.send(report_to, "done", bytes)
end

return M

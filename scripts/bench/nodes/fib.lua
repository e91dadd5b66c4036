-- fib: one process per call of naive fib: spawns two children, sums their
-- replies.
local M = {}

function M.main(n, parent)
  if n < 2 then process.send(parent, "fib", n); return end
  local me = process.pid()
  assert(process.spawn("nodes.fib", n - 1, me))
  assert(process.spawn("nodes.fib", n - 2, me))
  local a = process.receive().payload
  local b = process.receive().payload
  process.send(parent, "fib", a + b)
end

return M

-- shared_mix's worker: n calls on a shared table, 19 gets to 1 set, over
-- 1000 keys; tells the parent when done.
local function main(parent, name, n)
  local t = require("shared").table(name)
  local v = "small value"
  for i = 1, n do
    local k = i % 1000
    if i % 20 == 0 then t:set(k, v) else t:get(k) end
  end
  process.send(parent, "done", n)
end

return { main = main }

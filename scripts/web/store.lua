-- The items store: one process, registered as "store" by its supervisor,
-- answering request.call("store", op, value). State lives here, not in
-- the HTTP handlers, whose processes come and go with connections.
local request = require("request")

local function main()
  local items, next_id = {}, 1
  local ops = {}
  function ops.list()
    local out = {}
    for _, item in pairs(items) do out[#out + 1] = item end
    table.sort(out, function(a, b) return a.id < b.id end)
    return out
  end
  function ops.get(id) return items[id] or false end
  function ops.create(fields)
    local item = { id = next_id, name = fields.name, qty = fields.qty or 0 }
    items[next_id] = item
    next_id = next_id + 1
    return item
  end
  function ops.delete(id)
    local had = items[id] ~= nil
    items[id] = nil
    return had
  end
  while true do
    local msg = process.receive()
    if request.is_call(msg) then
      local op = ops[msg.topic]
      if op then request.reply(msg, op(msg.payload.value)) else request.fail(msg, "invalid: no op " .. msg.topic) end
    end
  end
end

return { main = main }

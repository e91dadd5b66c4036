-- The items store: a server (require("server")) that main's supervisor runs
-- under the name "store". The items live here, not in the HTTP handlers,
-- whose processes come and go with connections.
--
-- The shared table "web.items" is a cache of single items in front of it:
-- the handlers read it before they call the store, and only the store writes
-- it (an item a handler asked for goes in; a deleted one comes out), so a
-- handler never reads an item the store no longer has.
local shared = require("shared")

local ops = {}

function ops.list(state)
  local out = {}
  for _, item in pairs(state.items) do out[#out + 1] = item end
  table.sort(out, function(a, b) return a.id < b.id end)
  return out
end

function ops.get(state, id)
  local item = state.items[id]
  if item then state.cache:set(id, item) end  -- the next GET of it is served from the cache
  return item or false
end

function ops.create(state, fields)
  local item = { id = state.next_id, name = fields.name, qty = fields.qty or 0 }
  state.items[item.id] = item
  state.next_id = state.next_id + 1
  return item
end

function ops.delete(state, id)
  state.cache:delete(id)
  local had = state.items[id] ~= nil
  state.items[id] = nil
  return had
end

return {
  init = function()
    local cache = assert(shared.table("web.items"))
    cache:flush()  -- a restarted store starts empty: what the cache holds is gone too
    return { items = {}, next_id = 1, cache = cache }
  end,
  -- server.call("store", { op = "get", value = 3 })
  handle_call = function(req, _, state)
    local op = ops[req.op]
    if not op then error("invalid: the store has no op " .. tostring(req.op)) end
    return op(state, req.value), state
  end,
}

-- The HTTP handler: called in each connection's process with a request,
-- returns status, headers, body. It keeps no state of its own; it asks the
-- store.
local json = require("json")
local request = require("request")

local JSON = { ["content-type"] = "application/json" }

local function reply(status, value) return status, JSON, json.encode(value) end

local function store(op, value)
  local result, err = request.call("store", op, value, 2)
  if result == nil then error("store: " .. tostring(err)) end  -- the client gets a 500
  return result
end

local function handle(req)
  if req.path == "/items" then
    if req.method == "GET" then
      local items = store("list")
      return reply(200, #items > 0 and items or json.empty_array)
    elseif req.method == "POST" then
      local fields, err = json.decode(req.body)
      if type(fields) ~= "table" or type(fields.name) ~= "string" then
        return reply(400, { error = err or "invalid: a JSON object with a string name" })
      end
      return reply(201, store("create", { name = fields.name, qty = tonumber(fields.qty) }))
    end
    return 405, { allow = "GET, POST" }, ""
  end
  local id = tonumber(req.path:match("^/items/(%d+)$"))
  if id then
    if req.method == "GET" then
      local item = store("get", id)
      if not item then return reply(404, { error = "not_found: item " .. id }) end
      return reply(200, item)
    elseif req.method == "DELETE" then
      if not store("delete", id) then return reply(404, { error = "not_found: item " .. id }) end
      return 204, {}, nil
    end
    return 405, { allow = "GET, DELETE" }, ""
  end
  return reply(404, { error = "not_found: " .. req.path })
end

return { handle = handle }

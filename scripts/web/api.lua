-- The HTTP handler: called in each connection's process with a request,
-- returns status, headers, body. It keeps no state of its own: it reads
-- single items from the shared table "web.items" and asks the store for
-- the rest (a miss there fills the table; see store.lua).
local json = require("json")
local server = require("server")
local shared = require("shared")

local JSON = { ["content-type"] = "application/json" }

local function reply(status, value, headers) return status, headers or JSON, json.encode(value) end

local function store(op, value)
  local result, err = server.call("store", { op = op, value = value }, 2)
  if result == nil then error("store: " .. tostring(err)) end  -- the client gets a 500
  return result
end

-- Opened on the first request a connection's process serves, not as the
-- module loads: a module's top level is kept free of side effects.
local cache
local function cached(id)
  cache = cache or assert(shared.table("web.items"))
  return cache:get(id)
end

local HIT = { ["content-type"] = "application/json", ["x-cache"] = "hit" }
local MISS = { ["content-type"] = "application/json", ["x-cache"] = "miss" }

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
      local item = cached(id)
      if item then return reply(200, item, HIT) end
      item = store("get", id)
      if not item then return reply(404, { error = "not_found: item " .. id }) end
      return reply(200, item, MISS)
    elseif req.method == "DELETE" then
      if not store("delete", id) then return reply(404, { error = "not_found: item " .. id }) end
      return 204, {}, nil
    end
    return 405, { allow = "GET, DELETE" }, ""
  end
  return reply(404, { error = "not_found: " .. req.path })
end

return { handle = handle }

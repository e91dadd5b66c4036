-- json's encoder and decoder (stdlib/json.lua is the module): loaded by
-- json's first encode, decode or json.null, so that a module that
-- requires json but never uses it in a process (an HTTP handler's module,
-- for a request that sends no JSON) does not load this code in every
-- connection's process (its bytecode's load and its top-level run were
-- about a tenth of a new HTTP connection's cost).
local type, pcall, pairs, next, error, tostring = type, pcall, pairs, next, error, tostring
local getmetatable, setmetatable, rawset, rawget = getmetatable, setmetatable, rawset, rawget
local cjson, strict
local find, gsub, sub, byte, concat
-- Decodes our own marked text (below), whose placeholders are NaN
-- literals: made by the first text with an empty array.
local marking = nil

-- json's own table (stdlib/json.lua, loaded before this): its marks are
-- read from it, and null is put in it once cjson opens.
local M = require("json")

local function open_cjson()
  cjson = require("cjson")
  find, gsub, sub, byte, concat = string.find, string.gsub, string.sub, string.byte, table.concat
  strict = cjson.new()
  strict.decode_invalid_numbers(false)
  strict.encode_number_precision(14)
  rawset(M, "null", cjson.null)
end

local codec = {}

-- json.null, the first time it is named.
function codec.null()
  if not strict then open_cjson() end
  return cjson.null
end

-- Whether t is an empty table to write as [].
local function is_empty_array(t)
  return next(t) == nil and (t == M.empty_array or getmetatable(t) == M.array_mt)
end

-- cjson's message without its own prefixes, after the kind.
local function invalid(msg)
  return "invalid: " .. gsub(tostring(msg), "^[^:]*:%d+: ", "")
end

-- Whether the tables under t (not yet in `on`, the path from the root)
-- hold a cycle: asked only after cjson gave up on a too deep nesting, to
-- say which it was.
local function has_cycle(t, on)
  on[t] = true
  for k, v in pairs(t) do
    if (type(v) == "table" and (on[v] or has_cycle(v, on))) or (type(k) == "table" and (on[k] or has_cycle(k, on))) then
      return true
    end
  end
  on[t] = nil
  return false
end

-- The empty arrays under t (t included) into `found`.
local function find_empty_arrays(t, found)
  if is_empty_array(t) then
    found[#found + 1] = t
    return
  end
  for _, v in pairs(t) do
    if type(v) == "table" then find_empty_arrays(v, found) end
  end
end

function codec.encode(value)
  if not strict then open_cjson() end
  local ok, text = pcall(strict.encode, value)
  if not ok then
    if type(value) == "table" and find(text, "excessive nesting", 1, true) and has_cycle(value, {}) then
      return nil, "invalid: cannot encode a table with a cycle"
    end
    return nil, invalid(text)
  end
  -- Every empty table came out as {}; without one there is nothing to fix.
  if type(value) ~= "table" or not find(text, "{}", 1, true) then return text end
  local found = {}
  find_empty_arrays(value, found)
  if #found == 0 then return text end
  -- Each empty array, for a moment, holds one string that the text does
  -- not hold yet: written as ["that string"], then replaced by [].
  local mark, written = "\1json.empty_array", nil
  repeat
    mark = mark .. "\1"
    written = '["' .. gsub(mark, "\1", "\\u0001") .. '"]'
  until not find(text, written, 1, true)
  for i = 1, #found do rawset(found[i], 1, mark) end
  ok, text = pcall(strict.encode, value)
  for i = 1, #found do rawset(found[i], 1, nil) end
  if not ok then return nil, invalid(text) end
  return (gsub(text, gsub(written, "%p", "%%%0"), "[]"))
end

-- The text with each empty array outside its strings written as [nan]
-- (which no strict text can decode to), or nil when it has none.
local function mark_empty_arrays(text)
  local parts, n, pos, len, changed = {}, 0, 1, #text, false
  while pos <= len do
    local q = find(text, '"', pos, true) or len + 1
    local part, count = gsub(sub(text, pos, q - 1), "%[[ \t\n\r]*%]", "[nan]")
    changed = changed or count > 0
    n = n + 1
    parts[n] = part
    if q > len then break end
    -- The string from q to its closing quote (the text is valid JSON).
    local e = q + 1
    while true do
      local s = find(text, '["\\]', e)
      if not s then
        e = len + 1
        break
      end
      if byte(text, s) == 92 then
        e = s + 2
      else
        e = s + 1
        break
      end
    end
    n = n + 1
    parts[n] = sub(text, q, e - 1)
    pos = e
  end
  return changed and concat(parts) or nil
end

-- Whether t is a placeholder of mark_empty_arrays ({ NaN }).
local function is_placeholder(t)
  local v = rawget(t, 1)
  return v ~= v and next(t, 1) == nil
end

-- Replaces the placeholders under t by empty arrays; returns t or its
-- replacement.
local function unmark(t)
  if is_placeholder(t) then return setmetatable({}, M.array_mt) end
  for k, v in pairs(t) do
    if type(v) == "table" then t[k] = unmark(v) end
  end
  return t
end

function codec.decode(text)
  if type(text) ~= "string" then
    error("bad argument #1 to 'decode' (string expected, got " .. type(text) .. ")", 2)
  end
  if not strict then open_cjson() end
  local ok, value = pcall(strict.decode, text)
  if not ok then return nil, invalid(value) end
  -- Most texts have no empty array: one search says so. Those that do
  -- are decoded once more, marked, which the strict decode has checked.
  if type(value) ~= "table" or not find(text, "%[[ \t\n\r]*%]") then return value end
  local marked = mark_empty_arrays(text)
  if not marked then return value end
  if not marking then
    marking = cjson.new()
    marking.decode_invalid_numbers(true)
  end
  return unmark(marking.decode(marked))
end

return codec

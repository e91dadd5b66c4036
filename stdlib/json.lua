-- json: lua-cjson from the distribution (OpenResty's choice), with the
-- the host's error convention (docs/LUA_API.md, stdlib: json).
--
--   local json = require("json")
--   local text = json.encode({ ok = true, items = { 1, 2 } })
--   local value, err = json.decode(text)   -- nil, "invalid: ..." on bad text
--
-- encode(value) and decode(text) are cjson's, but bad input returns
-- nil, "invalid: <what was wrong>" instead of raising: text that is not
-- JSON (cjson names the position), a value that cannot be written (a
-- function, a table with a cycle, NaN or inf, an excessively sparse array).
-- A text argument that is not a string is a programming error and raises.
--
-- Conventions:
-- - null is json.null (cjson.null, the NULL light userdata). It crosses
--   between processes as itself (bindings/codec.hpp, kNullPointer): a
--   decoded document with nulls can be sent as it is.
-- - An empty table encodes as {}. An empty table whose metatable is
--   json.array_mt, or json.empty_array itself, encodes as []; decode gives
--   [] that metatable, so [] round-trips as []. A metatable stays behind
--   when a table is sent to another process: there it is a plain empty
--   table again (which encodes as {}) until given json.array_mt.
-- - Text is decoded strictly: NaN, Infinity and hexadecimal numbers are
--   invalid, as in the JSON standard.
-- - Numbers are written with 14 significant digits (lua-cjson 2.1's
--   most): integers up to 10^14 exactly; send larger identifiers as strings.
--
-- Each process gets instances of its own (cjson.new), so a script that
-- changes require("cjson")'s settings does not change json's.
-- cjson, and this module's encoder and decoder (stdlib/json/codec.lua),
-- are loaded on first use: a module that requires json for one endpoint
-- makes every process that loads it pay nothing until it encodes or
-- decodes (cjson's instance, and lua_close for its buffers, were a fifth
-- of a new HTTP connection's cost; the codec's load a tenth).
local type, error, setmetatable = type, error, setmetatable

local M = {}

M.array_mt = { __name = "json.array" }
M.empty_array = setmetatable({}, {
  __newindex = function() error("json.empty_array is read-only", 2) end,
  __metatable = false,
})

-- The encoder and decoder, loaded at the first call (stdlib/json/codec.lua).
local codec
local function load_codec()
  codec = require("json.codec")
  return codec
end

function M.encode(value) return (codec or load_codec()).encode(value) end

function M.decode(text)
  if type(text) ~= "string" then
    error("bad argument #1 to 'decode' (string expected, got " .. type(text) .. ")", 2)
  end
  return (codec or load_codec()).decode(text)
end

-- json.null loads cjson the first time it is named (the codec puts it in M).
setmetatable(M, {
  __index = function(_, k)
    if k == "null" then return (codec or load_codec()).null() end
  end,
})

return M

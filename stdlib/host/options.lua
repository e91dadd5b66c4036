-- host.options: the one check of an options table's names, shared by
-- every call that takes one (fs, exec, supervisor, http, ...), so that a
-- misspelt option is an error at the caller's line rather than a
-- setting silently ignored.
--
--   local options = require("host.options")
--   options.check(opts, { cwd = true, timeout = true }, 2)
local type, error, pairs, tostring, format = type, error, pairs, tostring, string.format

local M = {}

-- Raises "invalid: unknown option 'NAME'" for the first key of opts that
-- known does not have. level is what the caller would give error() to
-- blame its own caller (2 for the function the user called).
function M.check(opts, known, level)
  for k in pairs(opts) do
    if known[k] == nil then
      local name = type(k) == "string" and k or tostring(k)
      error(format("invalid: unknown option '%s'", name), (level or 2) + 1)
    end
  end
  return opts
end

-- "invalid: ..." at the same level, for an option's bad value.
function M.fail(msg, level)
  error("invalid: " .. msg, (level or 2) + 1)
end

return M

-- host.tls_files: the certificate, key and CA files a TLS context is made
-- from, read by the calling process through the fs command (on the
-- blocking pool), so that the I/O threads that make the contexts never
-- open a file: one that blocks (a FIFO) would stop every socket of its
-- thread. Only regular files are taken, and a FIFO's open does not wait.
local call = require("host.call")
local FS = require("host.commands").fs
local type, tostring, collectgarbage = type, tostring, collectgarbage

local M = {}

-- The bytes of the file at path, or nil, err: param names the parameter
-- (for a NUL byte in it), what the file in other errors ("CA file").
function M.read(path, param, what)
  if path:find("\0", 1, true) then return nil, "invalid: " .. param .. " contains a NUL byte" end
  local pem, err = call(FS, 0, "read", path, collectgarbage("count") * 1024, true)
  if type(pem) == "string" then return pem end
  local kind, rest = tostring(err):match("^([%a_]+): (.*)$")
  if not kind then return nil, err end
  return nil, kind .. ": " .. what .. " " .. rest
end

return M

-- Certificates for the TLS tests, made with the openssl program in a new
-- directory: a CA, a server certificate it signed for localhost and
-- 127.0.0.1, and a second, unrelated CA.
--   local c = require("certs").make()   -- { dir, ca, cert, key, other_ca }
local T = require("t")

local M = {}

function M.make()
  local dir = T.tmpdir()
  local function run(argv)
    local r = assert(exec.run(argv, { cwd = dir, timeout = 60 }))
    if r.code ~= 0 then error(table.concat(argv, " ") .. ": " .. r.stderr, 2) end
  end
  local function self_signed(name, subject)
    run { "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", name .. ".key",
          "-out", name .. ".pem", "-days", "2", "-subj", subject }
  end
  self_signed("ca", "/CN=host test CA")
  self_signed("other", "/CN=another CA")
  run { "openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
        "-subj", "/CN=localhost" }
  assert(fs.write(dir .. "/ext.cnf", "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"))
  run { "openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf" }
  return { dir = dir, ca = dir .. "/ca.pem", cert = dir .. "/server.pem", key = dir .. "/server.key",
           other_ca = dir .. "/other.pem" }
end

return M

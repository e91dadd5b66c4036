-- Run by tests/check_install.sh with an installed host: prints the file a
-- stdlib module was loaded from, which must be under the install prefix.
local supervisor = require("supervisor")
return function()
  print("stdlib from " .. debug.getinfo(supervisor.start, "S").source:sub(2))
end

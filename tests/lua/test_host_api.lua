-- host.call, host.commands and host.stats (docs/LUA_API.md), through the
-- host as a user runs it.
local T = require("t")

-- A command nothing registers: the host's own end below io_cmd::kFirstEmbedder.
local UNUSED = 200

return { main = function()
  return T.run {
    { "host.call, host.commands and host.stats are require'd, not globals", function()
      T.eq(rawget(_G, "host"), nil)
      T.eq(host, nil)
      T.eq(type(require("host.call")), "function")
      T.eq(type(require("host.commands")), "table")
      T.eq(type(require("host.stats")), "function")
    end },
    { "host.commands names the command of every module that has one", function()
      local commands = require("host.commands")
      local seen = {}
      for _, name in ipairs({ "fs", "exec", "socket" }) do
        local id = commands[name]
        T.eq(type(id), "number", name)
        T.ok(id >= 64 and id < 96, name .. "'s command is the host's own")
        T.eq(seen[id], nil, name .. "'s command is its own")
        seen[id] = true
      end
      local n = 0
      for _ in pairs(commands) do n = n + 1 end
      T.eq(n, 3, "the host's modules with commands, and no others (http runs on the workers: none)")
    end },
    { "host.call of a command nothing handles returns nil and invalid: unknown command N", function()
      local call = require("host.call")
      local v, err = call(UNUSED, 0, "x")
      T.eq(v, nil)
      T.eq(err, "invalid: unknown command " .. UNUSED)
    end },
    { "host.call refuses a command id that is not one, before starting anything", function()
      local call = require("host.call")
      T.raises(function() call(3) end, "not a command id")
      T.raises(function() call(64.5) end, "not a command id")
      T.raises(function() call(2 ^ 24) end, "not a command id")
    end },
    { "host.call refuses an argument that cannot be sent", function()
      local call = require("host.call")
      T.raises(function() call(UNUSED, 0, function() end) end, "invalid: cannot send function")
    end },
    { "host.call raises where no task can wait", function()
      local call = require("host.call")
      T.raises(function()
        table.sort({ 2, 1 }, function(a, b) call(UNUSED) return a < b end)
      end, "blocking call inside a C function boundary")
    end },
    { "host.stats gives the documented counters, and spawns counts a spawn", function()
      local stats = require("host.stats")
      local before = stats()
      for _, k in ipairs({ "processes", "messages", "steps", "spawns", "failures", "steals", "parks", "wakes" }) do
        T.eq(type(before[k]), "number", k)
      end
      T.ok(before.processes >= 1, "this process is live")
      local pid = assert(process.spawn("test_host_api:idle"))
      local after = stats()
      T.ok(after.spawns >= before.spawns + 1, "spawns grew")
      T.ok(after ~= before, "a new table each call")
      process.terminate(pid)
    end },
  }
end, idle = function() time.sleep(60) end }

-- The cluster's calls on a host run without --cluster (SPEC section 12,
-- its last point): no node, no peers, and every other node not connected.
-- The cluster itself is tests/test_cluster.cpp's (two hosts over NATS).
local T = require("t")

return { main = function()
  return T.run {
    { "process.node() is nil and process.nodes() is empty without --cluster", function()
      T.eq(process.node(), nil)
      T.eq(type(process.nodes()), "table")
      T.eq(#process.nodes(), 0)
    end },
    { "a send to { name, node } and spawn_on answer not_found at once without --cluster", function()
      local ok, err = process.send({ "echo", "b" }, "ping", 1)
      T.eq(ok, nil)
      T.match(err, "^not_found: node b is not connected")
      local pid, err2 = process.spawn_on("b", "fixtures.child")
      T.eq(pid, nil)
      T.match(err2, "^not_found: node b is not connected")
    end },
    { "a destination table that is not { name, node } is invalid; another type still raises", function()
      local ok, err = process.send({ 1, 2 }, "ping")
      T.eq(ok, nil)
      T.match(err, "^invalid: a destination table is { name, node }")
      T.raises(function() process.send(42, "ping") end, "string expected")
    end },
    { "a PID of another node is not_found without --cluster", function()
      local ok, err = process.send("<7.1.1>", "ping", 1)
      T.eq(ok, nil)
      T.match(err, "^not_found")
    end },
    { "monitor and server.call of { name, node } answer not_found at once without --cluster; link refuses a table",
      function()
      local ok, err = process.monitor({ "echo", "b" })
      T.eq(ok, nil)
      T.match(err, "^not_found: node b is not connected")
      local v, cerr = require("server").call({ "echo", "b" }, "ping", 5)
      T.eq(v, nil)
      T.match(cerr, "^not_found: node b is not connected")
      local linked, lerr = process.link({ "echo", "b" })
      T.eq(linked, nil)
      T.match(lerr, "^invalid: process.link takes a PID")
      T.raises(function() require("server").call({ 1, "b" }, "ping") end, "{ name, node } of two strings expected")
    end },
    { "pg stays per host and works as before without --cluster", function()
      local pg = require("pg")
      T.eq(pg.join("solo"), true)
      T.eq(#pg.members("solo"), 1)
      T.eq(pg.leave("solo"), true)
      T.eq(#pg.members("solo"), 0)
    end },
    { "monitor_node of any node says nodedown at once without --cluster", function()
      T.eq(process.monitor_node("b"), true)
      local ev = T.next_event("nodedown", 5)
      T.eq(ev.node, "b")
    end },
  }
end }

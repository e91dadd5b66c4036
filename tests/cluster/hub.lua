-- Node a's side of tests/test_cluster.cpp's names case: servers
-- registered as "counter" and "spare" (which node b stops), and two members of pg group "g" (this process,
-- registered as "hub", and one it spawns), all joined before node b
-- connects. A member answers "hi" with "got" and its node; "members"
-- answers pg.members of the group named, as this node sees it; "watchers"
-- how many monitor the process registered under the name given.
local server = require("server")
local pg = require("pg")

local M = {}

local function answer(msg)
  if msg.topic == "hi" then
    assert(process.send(msg.from, "got", process.node()))
  elseif msg.topic == "members" then
    assert(process.send(msg.from, "members", pg.members(msg.payload)))
  elseif msg.topic == "watchers" then
    local info = assert(process.info(msg.payload))
    assert(process.send(msg.from, "watchers", #info.monitored_by))
  end
end

function M.member()
  while true do answer(process.receive()) end
end

function M.main()
  assert(process.registry.register("hub"))
  assert(server.start("counter_server", 0, { name = "counter" }))
  assert(server.start("counter_server", 0, { name = "spare" }))
  assert(pg.join("g"))
  assert(pg.join("g", assert(process.spawn("hub:member"))))
  io.stdout:write("hub ready ", process.pid(), "\n")
  io.stdout:flush()
  while true do
    local msg = process.receive()
    if msg.topic == "stop" then return end
    answer(msg)
  end
end

return M

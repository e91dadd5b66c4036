-- The demo: spawn workers under a supervisor, talk to them, crash one and
-- watch the supervisor restart it. Run it with:  host run scripts/hello
local supervisor = require("supervisor")
local request = require("request")

local function main()
  log.info("hello from the root process %s", process.pid())

  supervisor.start {
    strategy = "one_for_one", intensity = 5, period = 10,
    children = {
      { id = "greeter", entry = "greeter", name = "greeter" },
      { id = "counter", entry = "counter", name = "counter" },
    },
  }

  -- Exchange messages with a worker found by its registered name.
  for _, who in ipairs({ "Ada", "Grace", "Linus" }) do
    log.info("greeter says: %s", assert(request.call("greeter", "greet", who)))
  end

  -- Count a little, then crash the counter on purpose.
  for _ = 1, 3 do request.call("counter", "add", 1) end
  local before = process.registry.lookup("counter")
  log.info("counter %s is at %d; now crashing it", before, request.call("counter", "get"))
  process.send("counter", "crash", nil)

  -- The supervisor restarts it under the same name, with fresh state.
  local after
  for _ = 1, 200 do
    time.sleep("10ms")
    after = process.registry.lookup("counter")
    if after and after ~= before then break end
  end
  assert(after and after ~= before, "the supervisor did not restart the counter")
  log.info("the supervisor restarted the counter as %s; it is at %d again", after, request.call("counter", "get"))
  log.info("bye")
end

return { main = main }

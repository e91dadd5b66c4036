-- The benchmark's two endpoints, the same as the peers' (tests/bench/peers).
local json = require("json")
local text = { ["content-type"] = "text/plain" }
local js = { ["content-type"] = "application/json" }

return {
  handle = function(req)
    if req.path == "/json" then
      return 200, js, json.encode({ message = "Hello, World!" })
    end
    return 200, text, "Hello, World!"
  end,
}

-- Counts primes in a range; a poisoned job makes it crash.
local request = require("request")

local function is_prime(n)
  if n < 2 then return false end
  if n % 2 == 0 then return n == 2 end
  for d = 3, math.floor(math.sqrt(n)), 2 do
    if n % d == 0 then return false end
  end
  return true
end

return function()
  while true do
    local m = process.receive()
    if request.is_call(m) then
      local job = m.payload.value
      if job.poison then error("poisoned job " .. job.from .. "-" .. job.to) end
      local n = 0
      for i = job.from, job.to do if is_prime(i) then n = n + 1 end end
      request.reply(m, n)
    end
  end
end

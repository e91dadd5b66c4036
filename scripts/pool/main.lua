-- A worker pool under a supervisor: N workers count primes in ranges
-- handed out by the root; one worker crashes on a poisoned job and is
-- restarted while the others go on.   host run scripts/pool -- 4
local supervisor = require("supervisor")
local request = require("request")

local function main(size)
  size = tonumber(size) or 4
  local children = {}
  for i = 1, size do
    children[i] = { id = "w" .. i, entry = "worker", name = "worker." .. i }
  end
  supervisor.start { strategy = "one_for_one", intensity = 10, period = 5, children = children }

  local jobs, results = {}, channel.new(64)
  for start = 1, 200000, 10000 do jobs[#jobs + 1] = { from = start, to = start + 9999 } end
  jobs[5].poison = true  -- this one crashes its worker; it is retried
  local next_job = 1
  for w = 1, size do
    coroutine.spawn(function()
      while next_job <= #jobs do
        local job = jobs[next_job]
        next_job = next_job + 1
        local n, err = request.call("worker." .. w, "count", job, 10)
        if not n then
          log.warn("job %d-%d failed on worker %d (%s); retrying it", job.from, job.to, w, err)
          job.poison = nil
          time.sleep("50ms")  -- the supervisor restarts the worker meanwhile
          n = assert(request.call("worker." .. w, "count", job, 10))
        end
        results:send(n)
      end
    end)
  end
  local total = 0
  for _ = 1, #jobs do total = total + results:receive() end
  log.info("%d primes below %d, counted by %d workers", total, jobs[#jobs].to + 1, size)
  assert(total == 17984, "wrong prime count")
end

return { main = main }

-- supervisor: keeps child processes running, the way Erlang/OTP's does.
--
--   local supervisor = require("supervisor")
--   local sup = supervisor.start {
--     strategy = "one_for_one",     -- or "one_for_all", "rest_for_one"
--     intensity = 3, period = 5,    -- more than 3 restarts in 5 s: give up
--     name = "workers",             -- optional registered name
--     children = {
--       { id = "db",  entry = "workers.db", args = { "x" }, restart = "permanent" },
--       { id = "job", entry = "workers.job:run", restart = "transient", name = "job" },
--     },
--   }
--
-- restart: "permanent" (always restarted), "transient" (restarted only when
-- it failed), "temporary" (never: once it has ended, or been stopped because
-- a sibling failed, it does not run again, as in OTP). Strategies:
-- one_for_one restarts the child that ended; one_for_all restarts all of
-- them; rest_for_one restarts it and the children listed after it.
-- Children are linked to the supervisor and monitored by it; start links
-- the supervisor to its caller, so if the supervisor gives up (restart
-- intensity exceeded) the failure reaches its parent; a child that does
-- not start at first makes start return nil, err instead. A cancel stops
-- the children (last first), then the supervisor.
--
-- After a hot reload, supervisor.restart_children(sup) restarts on the
-- newest code every child but a temporary one that has ended (new spawns
-- always use the newest code).
local request = require("request")

local M = {}

local STRATEGIES = { one_for_one = true, one_for_all = true, rest_for_one = true }
local RESTARTS = { permanent = true, transient = true, temporary = true }

local options = require("host.options")
local SPEC_OPTIONS = {
  strategy = true, intensity = true, period = true, children = true, name = true,
  start_timeout = true, shutdown_timeout = true, max_children = true,
}
local CHILD_OPTIONS = {
  id = true, entry = true, args = true, restart = true, name = true, shutdown = true, delay = true,
}

-- Raises at the line that called supervisor.start (level 3 from here,
-- plus `deeper` calls between).
local function bad_spec(msg, deeper) error("invalid: " .. msg, 4 + (deeper or 0)) end

-- Checks one child spec (the i-th of a start's list, or start_child's),
-- filling in its defaults; raises at the line that called the public
-- function, `deeper` calls further up than start_child's caller.
local function check_child(c, where, deeper)
  local function bad(msg) error("invalid: " .. msg, 4 + deeper) end
  if type(c) ~= "table" or type(c.entry) ~= "string" then bad(where .. " needs an entry string") end
  options.check(c, CHILD_OPTIONS, 3 + deeper)
  c.id = c.id or c.entry
  c.restart = c.restart or "permanent"
  if not RESTARTS[c.restart] then bad("child '" .. tostring(c.id) .. "': unknown restart '" .. tostring(c.restart) .. "'") end
  if c.shutdown == nil then c.shutdown = 5 end
  if c.shutdown ~= "brutal" and (type(c.shutdown) ~= "number" or not (c.shutdown >= 0)) then
    bad("child '" .. tostring(c.id) .. "': shutdown must be seconds or \"brutal\"")
  end
  c.delay = c.delay or 0
  if type(c.delay) ~= "number" or not (c.delay >= 0) then
    bad("child '" .. tostring(c.id) .. "': delay must be seconds")
  end
  return c
end

local function check_spec(spec)
  if type(spec) ~= "table" then bad_spec("supervisor spec must be a table") end
  options.check(spec, SPEC_OPTIONS, 3)
  spec.strategy = spec.strategy or "one_for_one"
  if not STRATEGIES[spec.strategy] then bad_spec("unknown supervisor strategy '" .. tostring(spec.strategy) .. "'") end
  spec.intensity = spec.intensity or 3
  spec.period = spec.period or 5
  spec.children = spec.children or {}
  if type(spec.children) ~= "table" then bad_spec("supervisor spec's children must be a list") end
  if spec.max_children ~= nil and (type(spec.max_children) ~= "number" or not (spec.max_children >= 0)) then
    bad_spec("max_children must be a number")
  end
  local ids = {}
  for i, c in ipairs(spec.children) do
    check_child(c, "child #" .. i, 1)
    if ids[c.id] then bad_spec("duplicate child id '" .. tostring(c.id) .. "'") end
    ids[c.id] = true
  end
  return spec
end

-- Starts a supervisor linked to the caller and returns its PID once every
-- child has started, or nil, err at the first child that does not start
-- (the supervisor then unlinks from the caller and fails: the caller
-- learns of it only from that return, never over the link).
function M.start(spec)
  local pid, err = process.spawn_linked("supervisor:run", check_spec(spec), process.pid())
  if not pid then return nil, err end
  -- The supervisor answers calls only after starting its children; one
  -- whose child did not start answers this first call with that error
  -- (waiting for it: it may have failed before the call was made).
  local ok, cerr = request.call(pid, "$supervisor", { op = "which_children" }, spec.start_timeout or 30)
  if not ok then return nil, cerr end
  return pid
end

-- Asks supervisor sup to do op, which is also the name of the public
-- function that asks (for its errors, raised at that function's caller).
local function call_supervisor(op, sup, timeout)
  if type(sup) ~= "string" then
    error("bad argument #1 to '" .. op .. "' (supervisor PID or name expected, got " .. type(sup) .. ")", 3)
  end
  local r, err = request.call(sup, "$supervisor", { op = op }, timeout)
  return r, err
end

-- { { id =, pid =, restart =, status = }, ... } in start order; status is
-- "running", "restarting" (waiting its delay) or "stopped" (pid nil: a
-- transient or temporary child that ended and stays ended).
function M.which_children(sup, timeout)
  local r, err = call_supervisor("which_children", sup, timeout)
  return r, err
end

-- { specs =, active = }: the children known, and those running.
function M.count_children(sup, timeout)
  local r, err = call_supervisor("count_children", sup, timeout)
  return r, err
end

-- Starts a child from spec (as in start's children list) and keeps it;
-- returns its PID, or nil, err (its start failed, max_children reached,
-- a duplicate id). A bad spec raises at the caller's line.
function M.start_child(sup, spec, timeout)
  if type(sup) ~= "string" then
    error("bad argument #1 to 'start_child' (supervisor PID or name expected, got " .. type(sup) .. ")", 2)
  end
  check_child(spec, "child spec", 0)
  return request.call(sup, "$supervisor", { op = "start_child", spec = spec }, timeout)
end

-- Stops the child (by id or PID) as its shutdown says and forgets it: it
-- is never restarted. Returns true, or nil, "not_found: ...".
function M.terminate_child(sup, child, timeout)
  if type(sup) ~= "string" then
    error("bad argument #1 to 'terminate_child' (supervisor PID or name expected, got " .. type(sup) .. ")", 2)
  end
  if child == nil then error("bad argument #2 to 'terminate_child' (child id or PID expected)", 2) end
  return request.call(sup, "$supervisor", { op = "terminate_child", child = child }, timeout)
end

-- Restarts every child but a temporary one that has ended (on the newest
-- code). Returns true or nil, err.
function M.restart_children(sup, timeout)
  local r, err = call_supervisor("restart_children", sup, timeout)
  return r, err
end

-- The supervisor process; starter is the process whose start waits for it.
function M.run(spec, starter)
  spec = check_spec(spec)
  process.set_options { trap_links = true }
  -- Opened first: a cancel that comes while the children start is then
  -- an event the loop below handles (it stops them), not an end that
  -- would leave them to their links.
  process.events()
  if spec.name then assert(process.registry.register(spec.name)) end
  -- In spec order: { spec = c, pid = pid or nil, ended = true once a
  -- temporary child is over for good }.
  local children = {}
  for i, c in ipairs(spec.children) do children[i] = { spec = c } end
  local by_pid = {}
  local restarts = {}

  local function start_child(i)
    local ch = children[i]
    local c = ch.spec
    local args = c.args or {}
    local pid, err = process.spawn_linked(c.entry, unpack(args, 1, table.maxn(args)))
    if not pid then return nil, err end
    -- Its name first: a name another process holds fails the child's
    -- start (sends to the name would reach that other process).
    if c.name then
      local named, nerr = process.registry.register(c.name, pid)
      if not named then
        process.unlink(pid)
        process.terminate(pid)
        return nil, nerr
      end
    end
    process.monitor(pid)
    ch.pid = pid
    by_pid[pid] = i
    return pid
  end

  -- Stops a child and waits until it is gone, so old and new children never
  -- run side by side: a cancel, up to its shutdown seconds for it to end,
  -- then terminate (at once for "brutal"). Terminate is forced, but takes
  -- effect at the child's next scheduling (a runaway takes until
  -- --time-limit).
  local function stop_child(i)
    local ch = children[i]
    ch.due = nil
    local pid = ch.pid
    if not pid then return end
    by_pid[pid] = nil  -- its exit event is expected: ignore it
    ch.pid = nil
    process.unlink(pid)
    local gone = process.watch(pid)
    if not gone then return end
    local shutdown = ch.spec.shutdown
    if shutdown ~= "brutal" and shutdown > 0 then
      process.cancel(pid, "shutdown")
      local r = channel.select { gone:case_receive(), timeout = shutdown }
      if r.channel == gone then return end
    end
    process.terminate(pid)
    local r = channel.select { gone:case_receive(), timeout = spec.shutdown_timeout or 15 }
    if r.channel ~= gone then log.error("supervisor: child '%s' (%s) did not stop", ch.spec.id, pid) end
  end

  local function stop_all()
    for i = #children, 1, -1 do stop_child(i) end
  end

  local function give_up(why)
    stop_all()
    error("supervisor: " .. why, 0)
  end

  -- Counts a restart; gives up past the intensity.
  local function note_restart()
    local now = time.now()
    local kept = {}
    for _, t in ipairs(restarts) do if now - t <= spec.period then kept[#kept + 1] = t end end
    kept[#kept + 1] = now
    restarts = kept
    if #restarts > spec.intensity then
      give_up(string.format("restart intensity exceeded (%d restarts in %g s)", #restarts, spec.period))
    end
  end

  -- A strategy stops the temporary children among from..to for good.
  local function end_temporaries(from, to)
    for j = from, to do
      if children[j].spec.restart == "temporary" then children[j].ended = true end
    end
  end

  local function start_range(from, to)
    for i = from, to do
      children[i].due = nil
      if children[i].pid == nil and not children[i].ended then
        local ok, err = start_child(i)
        if not ok then
          log.error("supervisor: child '%s' did not start: %s", children[i].spec.id, err)
          note_restart()
          return start_range(i, to)
        end
      end
    end
  end

  -- start's call, answered with why the first start failed. The call may
  -- not have come yet (start watches the supervisor first, and would only
  -- learn that it had gone), so it is awaited, unless the starter is gone
  -- (its watch: it is no longer linked) or the supervisor is canceled.
  local function fail_start_call(why)
    local inbox, events, deadline = process.inbox(), process.events(), time.after(spec.start_timeout or 30)
    local gone = process.watch(starter)
    while true do
      local r = channel.select { inbox:case_receive(), events:case_receive(), deadline:case_receive(), gone:case_receive() }
      local m = r.value
      if r.channel == deadline or r.channel == gone then return end
      if r.channel == events then
        if m.kind == "cancel" then return end
      elseif m.from == starter and m.topic == "$supervisor" and request.is_call(m) then
        request.fail(m, why)
        return
      end
    end
  end

  -- The first start, as in OTP: a child that does not start stops the
  -- ones started before it and the supervisor, with that child's error
  -- (no retries: a restart that fails is retried, within the intensity).
  for i = 1, #children do
    local ok, err = start_child(i)
    if not ok then
      stop_all()
      local why = string.format("supervisor: child '%s' did not start: %s", children[i].spec.id, err)
      if starter then
        -- start returns nil, err: its caller must not also fail over the
        -- link, which could reach it before the reply (or right after).
        process.unlink(starter)
        fail_start_call(why)
      end
      error(why, 0)
    end
  end

  local function reindex()
    by_pid = {}
    for j, ch in ipairs(children) do
      if ch.pid then by_pid[ch.pid] = j end
    end
  end

  local function find(child)
    for j, ch in ipairs(children) do
      if ch.spec.id == child or ch.pid == child then return j end
    end
  end

  local function status(ch)
    if ch.pid then return "running" end
    if ch.due then return "restarting" end
    return "stopped"
  end

  -- The restarts whose delay is over, in start order: one restart toward
  -- the intensity for the children a failure made wait together.
  local function start_due()
    local now, any = time.now(), false
    for j = 1, #children do
      local due = children[j].due
      if due and due <= now then
        if not any then
          note_restart()
          any = true
        end
        start_range(j, j)
      end
    end
  end

  local events, inbox = process.events(), process.inbox()
  local cases = { events:case_receive(), inbox:case_receive() }
  while true do
    local next_due
    for _, ch in ipairs(children) do
      if ch.due and (not next_due or ch.due < next_due) then next_due = ch.due end
    end
    cases.timeout = next_due and math.max(0, next_due - time.now()) or nil
    local r = channel.select(cases)
    local m = r.value
    if r.timeout then
      start_due()
    elseif r.channel == events then
      if m.kind == "exit" and by_pid[m.from] then
        local i = by_pid[m.from]
        by_pid[m.from] = nil
        local c = children[i].spec
        children[i].pid = nil
        local failed = m.error ~= nil
        -- The host's shutdown cancels every process: a child that never
        -- opened its events ends at once, maybe before this supervisor's
        -- own cancel comes. It is stopping, not failing: no restart.
        local shutdown = m.error == "canceled: shutdown"
        if failed and not shutdown then log.warn("supervisor: child '%s' (%s) failed: %s", c.id, m.from, m.error) end
        local restart = not shutdown and (c.restart == "permanent" or (c.restart == "transient" and failed))
        if c.restart == "temporary" then children[i].ended = true end
        if restart then
          -- The strategy stops the siblings it reaches now; the restart
          -- itself comes after the child's delay, and counts toward the
          -- intensity when it happens.
          local from, to = i, i
          if spec.strategy == "one_for_all" then
            end_temporaries(1, #children)
            stop_all()
            from, to = 1, #children
          elseif spec.strategy == "rest_for_one" then
            end_temporaries(i + 1, #children)
            for j = #children, i + 1, -1 do stop_child(j) end
            to = #children
          end
          if c.delay > 0 then
            local due = time.now() + c.delay
            for j = from, to do
              if not children[j].ended then children[j].due = due end
            end
          else
            note_restart()
            start_range(from, to)
          end
        end
      elseif m.kind == "cancel" then
        stop_all()
        return "stopped"
      end
      -- link_down: the monitor's exit event carries the same news.
    elseif m.topic == "$supervisor" and request.is_call(m) then
      local op = m.payload.value and m.payload.value.op
      if op == "which_children" then
        local list = {}
        for i, ch in ipairs(children) do
          list[i] = { id = ch.spec.id, pid = ch.pid, restart = ch.spec.restart, status = status(ch) }
        end
        request.reply(m, list)
      elseif op == "count_children" then
        local active = 0
        for _, ch in ipairs(children) do if ch.pid then active = active + 1 end end
        request.reply(m, { specs = #children, active = active })
      elseif op == "start_child" then
        local c = m.payload.value.spec
        if find(c.id) then
          request.fail(m, "exists: a child with id '" .. tostring(c.id) .. "'")
        elseif spec.max_children and #children >= spec.max_children then
          request.fail(m, "limit: max_children (" .. spec.max_children .. ") reached")
        else
          children[#children + 1] = { spec = c }
          local pid, err = start_child(#children)
          if pid then
            request.reply(m, pid)
          else
            children[#children] = nil
            request.fail(m, err)
          end
        end
      elseif op == "terminate_child" then
        local j = find(m.payload.value.child)
        if not j then
          request.fail(m, "not_found: no child " .. tostring(m.payload.value.child))
        else
          stop_child(j)
          table.remove(children, j)
          reindex()
          request.reply(m, true)
        end
      elseif op == "restart_children" then
        stop_all()
        start_range(1, #children)
        request.reply(m, true)
      else
        request.fail(m, "invalid: unknown supervisor operation '" .. tostring(op) .. "'")
      end
    end
  end
end

return M

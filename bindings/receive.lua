-- process.receive as a Lua function over the C kernel's receive, in two
-- forms (bindings/task_kernel.cpp, TaskKernel::push_receive says when and
-- why each).
--
-- Both call the C receive, which returns a message table, or nil,
-- "timeout", or, when the task waited and the kernel handed it a message
-- (or took a queued one that was waiting as its three values), the
-- message's from, topic and payload (from and topic strings: the kernel
-- hands over no message from the host, whose from is nil, that way): the
-- table is then made here, a template copy (TDUP) in the task's own code,
-- where calling a constructor from C costs a C-to-Lua call a message. A
-- handed-over table payload of a shape the process keeps receiving comes
-- as nil, its shape's constructor and true: the constructor makes the
-- whole message (bindings/shape_cache.hpp).
--
-- The draining form first takes a queued message itself when the inbox is
-- on the C kernel's fast paths (no listeners, senders or close), so that
-- LuaJIT compiles it into the caller's loop and a process draining a full
-- inbox runs no C call per message.
--
-- Called with the inbox (see kernel_ext.lua: { buf, recvq, sendq, closed,
-- slow, tables }; nil for the waiting form), the C receive and whether to
-- drain; returns process.receive.
local inbox, c_receive, draining = ...

-- (The C receive's results are turned into the message in each form's own
-- code: through a shared Lua function, Big took 1.7% more instructions.)
if not draining then
  return function(timeout)
    local a, b, c = c_receive(timeout)
    if b == nil then return a end     -- a message table
    if a == nil then
      if c then return b() end        -- its payload's shape's constructor
      return a, b                     -- nil, "timeout"
    end
    local m = { from = false, topic = false, payload = false }
    m.from, m.topic, m.payload = a, b, c
    return m
  end
end

local buf = inbox[1]
return function(timeout)
  local h = buf[1]
  if h <= buf[2] and not inbox[5] then
    if inbox[6] then  -- the buffer holds message tables
      local v = buf[h]
      buf[h] = nil
      if h == buf[2] then buf[1], buf[2] = 3, 2 else buf[1] = h + 1 end
      return v
    end
    -- Each message as its from, topic and payload (TaskKernel::flat_inbox_).
    local m = { from = false, topic = false, payload = false }
    m.from, m.topic, m.payload = buf[h], buf[h + 1], buf[h + 2]
    buf[h], buf[h + 1], buf[h + 2] = nil, nil, nil
    if h + 2 == buf[2] then buf[1], buf[2] = 3, 2 else buf[1] = h + 3 end
    return m
  end
  local a, b, c = c_receive(timeout)
  if b == nil then return a end
  if a == nil then
    if c then return b() end
    return a, b
  end
  local m = { from = false, topic = false, payload = false }
  m.from, m.topic, m.payload = a, b, c
  return m
end

-- process.receive's fast path: a message waits and the inbox is on the C
-- kernel's fast paths (no listeners, senders or close). It is Lua so that
-- LuaJIT compiles it into the caller's loop: a process draining a full inbox
-- then runs no C call per message. Everything else, blocking included, is
-- the C kernel's receive (bindings/task_kernel.cpp), reached by a tail call
-- so its errors name the script's line.
--
-- Called with the inbox (see kernel_ext.lua: { buf, recvq, sendq, closed,
-- slow }) and the C receive; returns process.receive.
local inbox, c_receive = ...
local buf = inbox[1]
return function(timeout)
  local h = buf[1]
  if h <= buf[2] and not inbox[5] then
    local v = buf[h]
    buf[h] = nil
    if h == buf[2] then buf[1], buf[2] = 3, 2 else buf[1] = h + 1 end
    return v
  end
  return c_receive(timeout)
end

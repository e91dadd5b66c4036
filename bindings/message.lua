-- The constructor of message tables, { from =, topic =, payload = }, that
-- the C kernel (TaskKernel::message) calls for each message once a process
-- has received a few: a table constructor of constants is one copy of a
-- template (LuaJIT's TDUP) with its keys in place, where building the table
-- through the C API creates it and inserts each key, about 400 instructions
-- more a message. Loading this chunk costs about what 10 messages save,
-- so it is loaded at the 16th (kMessagesBeforeCtor).
--
-- With buf (the inbox's buffer: { head, tail, messages... }, as in
-- task_kernel.cpp's QueueRef) it appends the message there instead of
-- returning it: the kernel's choice when nobody waits for it.
local function new(from, topic, payload, buf)
  local m = { from = false, topic = false, payload = false }
  m.from, m.topic, m.payload = from, topic, payload
  if buf then
    local tail = buf[2] + 1
    buf[tail] = m
    buf[2] = tail
    return
  end
  return m
end

-- Appends n messages, given as from, topic, payload after n, to buf: the
-- kernel's call for a run of messages that nobody waits for
-- (TaskKernel::begin_queue and end_queue), one call from C for the run
-- instead of one a message.
local function append(buf, n, ...)
  local v = { ... }
  local tail = buf[2]
  for i = 1, 3 * n, 3 do
    local m = { from = false, topic = false, payload = false }
    m.from, m.topic, m.payload = v[i], v[i + 1], v[i + 2]
    tail = tail + 1
    buf[tail] = m
  end
  buf[2] = tail
end

return new, append

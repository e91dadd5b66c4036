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
return function(from, topic, payload, buf)
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

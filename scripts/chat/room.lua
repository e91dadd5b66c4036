-- The room: who is in it, and each line said, relayed to every member.
-- Members join with their name and leave when they end (a monitor tells
-- the room, however they end).
local function main()
  local members = {}  -- pid -> name
  local function say(text, except)
    for pid in pairs(members) do
      if pid ~= except then process.send(pid, "line", text) end
    end
  end
  local inbox, events = process.inbox(), process.events()
  while true do
    local r = channel.select { inbox:case_receive(), events:case_receive() }
    local m = r.value
    if r.channel == events then
      -- It opened its events, so a cancel (Ctrl-C, the host's end) is an
      -- event here, not its end: it ends now, having nothing to save.
      if m.kind == "cancel" then return end
      if m.kind == "exit" and members[m.from] then
        say("* " .. members[m.from] .. " left")
        members[m.from] = nil
      end
    elseif m.topic == "join" then
      members[m.from] = m.payload
      process.monitor(m.from)
      local names = {}
      for _, name in pairs(members) do names[#names + 1] = name end
      table.sort(names)
      process.send(m.from, "line", "* in the room: " .. table.concat(names, ", "))
      say("* " .. m.payload .. " joined", m.from)
    elseif m.topic == "say" and members[m.from] then
      say(members[m.from] .. ": " .. m.payload, m.from)
    end
  end
end

return main

-- One echo connection's process (scripts/echo/main.lua spawns it with the
-- connection). A module of its own: a connection's process loads only this
-- function, not the listener's code, and so its heap stays within the
-- arena's first chunk (docs/ARCHITECTURE.md, "A Lua process").
return function(conn)
  conn:setoption("tcp-nodelay", true)
  while true do
    -- Whatever has come, up to 64 KB (receiveany, OpenResty's call): an
    -- echo waits for no line or count.
    local data = conn:receiveany(65536)
    if not data or not conn:send(data) then break end
  end
  conn:close()
end

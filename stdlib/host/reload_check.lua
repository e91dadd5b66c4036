-- The process `host run --watch` starts for a changed module that
-- compiles (host/program/reloader.cpp): it runs the module's new top-level code
-- once, as any process that loads the module would, under the time and
-- memory limits, and returns "" when it loaded, else its error. The
-- reloader keeps the last good version on an error. Not for scripts.
return function(name, bytecode)
  local chunk, err = load(bytecode)
  if chunk then
    local ok, raised = pcall(chunk, name)
    if ok then return "" end
    err = raised
  end
  return tostring(err)
end

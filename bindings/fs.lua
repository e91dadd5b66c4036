-- The fs module (docs/LUA_API.md, fs and exec): files and directories through waiting
-- calls (the host's blocking pool does the system calls: bindings/
-- fs_service.cpp), so a slow disk suspends only the calling task. The
-- chunk is called with the waiting call and the fs command, and returns
-- the module table, which becomes the global `fs` and require("fs").
local call, CMD = ...
local type, error, select, setmetatable, getmetatable, tostring, unpack =
  type, error, select, setmetatable, getmetatable, tostring, unpack
local format = string.format
local collectgarbage, require = collectgarbage, require

-- The bytes this process's heap holds: a read may add no more than its
-- memory limit leaves (the service answers "limit: memory ..." past it).
local function heap_bytes() return collectgarbage("count") * 1024 end

local function check(v, want, n, fname)
  if type(v) ~= want then
    error(format("bad argument #%d to '%s' (%s expected, got %s)", n, fname, want, type(v)), 3)
  end
end

-- A string, or a number as io.write takes it.
local function check_data(v, n, fname)
  if type(v) == "number" then return tostring(v) end
  check(v, "string", n, fname)
  return v
end

local fs = {}

function fs.read(path)
  check(path, "string", 1, "fs.read")
  return call(CMD, 0, "read", path, heap_bytes())
end

function fs.write(path, data)
  check(path, "string", 1, "fs.write")
  return call(CMD, 0, "write", path, check_data(data, 2, "fs.write"))
end

function fs.append(path, data)
  check(path, "string", 1, "fs.append")
  return call(CMD, 0, "append", path, check_data(data, 2, "fs.append"))
end

function fs.stat(path)
  check(path, "string", 1, "fs.stat")
  return call(CMD, 0, "stat", path)
end

function fs.list(dir)
  check(dir, "string", 1, "fs.list")
  return call(CMD, 0, "list", dir)
end

local MKDIR_OPTIONS = { parents = true }

function fs.mkdir(path, opts)
  check(path, "string", 1, "fs.mkdir")
  if opts ~= nil then
    check(opts, "table", 2, "fs.mkdir")
    require("host.options").check(opts, MKDIR_OPTIONS, 2)
  end
  return call(CMD, 0, "mkdir", path, opts ~= nil and opts.parents == true)
end

function fs.remove(path)
  check(path, "string", 1, "fs.remove")
  return call(CMD, 0, "remove", path)
end

function fs.rename(from, to)
  check(from, "string", 1, "fs.rename")
  check(to, "string", 2, "fs.rename")
  return call(CMD, 0, "rename", from, to)
end

---------------------------------------------------------------------------
-- Open files: io's file methods, each a waiting call. A file is closed
-- when its process ends, if the script did not close it.
local File = {}
File.__index = File
File.__tostring = function(f)
  if f.closed then return "file (closed)" end
  return format("file (%d)", f.id)
end

local function live(f, fname)
  if getmetatable(f) ~= File then
    error(format("bad argument #1 to '%s' (file expected, got %s)", fname, type(f)), 3)
  end
  if f.closed then error("attempt to use a closed file", 3) end
  return f.id
end

function fs.open(path, mode)
  check(path, "string", 1, "fs.open")
  if mode ~= nil then check(mode, "string", 2, "fs.open") end
  local id, err = call(CMD, 0, "open", path, mode or "r")
  if not id then return nil, err end
  return setmetatable({ id = id, closed = false }, File)
end

-- read(...): io's formats ("l", "L", "n", "a", a count; "*l" and the
-- other old spellings too), one result each; nil at the end of the file.
function File:read(...)
  return call(CMD, 0, "fread", live(self, "read"), heap_bytes(), ...)
end

-- write(...): strings and numbers; the file, or nil and the error.
function File:write(...)
  local id = live(self, "write")
  for i = 1, select("#", ...) do check_data((select(i, ...)), i, "write") end
  local ok, err = call(CMD, 0, "fwrite", id, ...)
  if not ok then return nil, err end
  return self
end

function File:lines(...)
  live(self, "lines")
  local n, formats = select("#", ...), { ... }
  return function()
    local v, err = call(CMD, 0, "fread", live(self, "lines"), heap_bytes(), unpack(formats, 1, n))
    if v == nil and err ~= nil then error(err, 2) end
    return v
  end
end

function File:seek(whence, offset)
  local id = live(self, "seek")
  if whence ~= nil then check(whence, "string", 1, "seek") end
  if offset ~= nil then check(offset, "number", 2, "seek") end
  return call(CMD, 0, "seek", id, whence or "cur", offset or 0)
end

function File:flush()
  local ok, err = call(CMD, 0, "flush", live(self, "flush"))
  if not ok then return nil, err end
  return self
end

function File:close()
  local id = live(self, "close")
  self.closed = true
  return call(CMD, 0, "close", id)
end

return fs

-- The exec module (docs/LUA_API.md, fs and exec): programs run without a shell, their
-- stdin, stdout and stderr as pipes. Starting, waiting for and killing a
-- program are waiting calls carried out on the I/O thread (host/io/
-- exec_service.cpp), so a program that runs long suspends only the
-- calling task; exec.start's pipes are objects whose methods read and
-- write them on the worker (bindings/exec_pipes.cpp). The chunk is called
-- with the waiting call, the exec command, the wall clock, the TCP
-- constructor and the pipes' maker, and returns the module table, which
-- becomes the global `exec` and require("exec").
local call, CMD, _, _, pipes = ...
local type, error, pairs, ipairs, setmetatable, getmetatable, tostring =
  type, error, pairs, ipairs, setmetatable, getmetatable, tostring
local format, upper = string.format, string.upper
local require = require

-- level: as error()'s, seen from bad's caller (3: the user called the
-- function that called bad; 4: one helper further in).
local function bad(n, fname, msg, level)
  error(format("bad argument #%d to '%s' (%s)", n, fname, msg), level or 3)
end

local function check_argv(argv, fname)
  if type(argv) ~= "table" then bad(1, fname, "table of strings expected, got " .. type(argv), 4) end
  if #argv == 0 then bad(1, fname, "argv is empty", 4) end
  for i, a in ipairs(argv) do
    if type(a) ~= "string" then bad(1, fname, format("argv[%d] is a %s, not a string", i, type(a)), 4) end
  end
end

local RUN_OPTIONS = { cwd = true, env = true, stdin = true, timeout = true }
local START_OPTIONS = { cwd = true, env = true, stdin = true, timeout = true }  -- stdin: refused below, with why

-- A number of seconds, neither negative nor NaN (which compares false to
-- everything, and would end the wait at once).
local function seconds(v, what, level)
  if type(v) ~= "number" or v ~= v or v < 0 then
    error(format("invalid: %s must be a number of seconds, 0 or more (got %s)", what, tostring(v)), level + 1)
  end
  return v
end

-- The options a program takes: cwd, env, stdin (run only), timeout.
local function check_opts(opts, fname, with_stdin)
  if opts == nil then return {} end
  if type(opts) ~= "table" then bad(2, fname, "table expected, got " .. type(opts), 4) end
  require("host.options").check(opts, with_stdin and RUN_OPTIONS or START_OPTIONS, 3)
  if opts.cwd ~= nil and type(opts.cwd) ~= "string" then bad(2, fname, "cwd must be a string", 4) end
  if opts.env ~= nil then
    if type(opts.env) ~= "table" then bad(2, fname, "env must be a table", 4) end
    for k, v in pairs(opts.env) do
      if type(k) ~= "string" or (type(v) ~= "string" and type(v) ~= "number") then
        bad(2, fname, "env must map names to strings", 4)
      end
    end
  end
  if opts.timeout ~= nil then seconds(opts.timeout, "timeout", 3) end
  if opts.stdin ~= nil then
    if not with_stdin then bad(2, fname, "stdin is for exec.run; send to the handle's stdin instead", 4) end
    if type(opts.stdin) ~= "string" then bad(2, fname, "stdin must be a string", 4) end
  end
  return { cwd = opts.cwd, env = opts.env, stdin = opts.stdin, timeout = opts.timeout }
end

local exec = {}

-- The bytes this process's heap holds: exec.run's output and what a
-- receive waits for may take at most half of what its memory limit
-- leaves (the service answers "limit: memory ..." past it).
local function heap_bytes() return collectgarbage("count") * 1024 end

-- exec.run(argv[, opts]) -> { code =, signal =, stdout =, stderr = } once
-- the program ends and both outputs are closed; nil, "timeout" when
-- opts.timeout passed first (the program is killed).
function exec.run(argv, opts)
  check_argv(argv, "exec.run")
  return call(CMD, 0, "run", argv, check_opts(opts, "exec.run", true), heap_bytes())
end

---------------------------------------------------------------------------
-- A started program: its process, and its pipes (stdin, stdout, stderr:
-- objects with send, receive and close, bindings/exec_pipes.cpp).
local Program = {}
Program.__index = Program
Program.__tostring = function(p) return format("program (%d)", p.pid) end

local signals = { HUP = 1, INT = 2, QUIT = 3, KILL = 9, USR1 = 10, USR2 = 12, TERM = 15, CONT = 18, STOP = 19 }

local function program(p, fname)
  if getmetatable(p) ~= Program then bad(1, fname, "program expected, got " .. type(p)) end
  return p
end

function exec.start(argv, opts)
  check_argv(argv, "exec.start")
  local o = check_opts(opts, "exec.start", false)
  local token, stdin, stdout, stderr = pipes()
  if not token then return nil, stdin end
  local id, pid = call(CMD, 0, "start", argv, o, token)
  if not id then
    stdin:close(); stdout:close(); stderr:close()
    return nil, pid
  end
  return setmetatable({ id = id, pid = pid, stdin = stdin, stdout = stdout, stderr = stderr }, Program)
end

-- wait([timeout]) -> { code =, signal = }, or nil, "timeout". While it
-- waits, the program's stdout and stderr are read ahead into their
-- buffers (up to 1 MiB each, exec_pipes.cpp), so that a program whose
-- output nobody has received yet is not stopped by its full pipe.
function Program:wait(timeout)
  program(self, "wait")
  if timeout ~= nil then seconds(timeout, "timeout", 2) end
  -- The same two objects at the end, whatever the fields hold by then;
  -- and the end is told however the call ends (one that raises too).
  local out, errs = self.stdout, self.stderr
  pipes(1, out, errs)
  local ok, r, err = pcall(call, CMD, 0, "wait", self.id, timeout)
  pipes(-1, out, errs)
  if not ok then error(r, 0) end
  return r, err
end

-- kill([signal]): a number, or a name ("TERM", "SIGKILL"); SIGTERM by
-- default.
function Program:kill(sig)
  program(self, "kill")
  if type(sig) == "string" then
    local name = upper(sig):gsub("^SIG", "")
    sig = signals[name]
    if not sig then bad(1, "kill", "unknown signal '" .. name .. "'") end
  elseif sig ~= nil and type(sig) ~= "number" then
    bad(1, "kill", "signal number or name expected")
  end
  return call(CMD, 0, "kill", self.id, sig or signals.TERM)
end

return exec

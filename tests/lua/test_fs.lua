-- The fs module, through the host as a user runs it.
local T = require("t")

local dir

local function path(name) return dir .. "/" .. name end

-- A field of the host's /proc/self/status, in KiB (VmRSS, VmHWM).
local function host_kib(field)
  return tonumber(fs.read("/proc/self/status"):match(field .. ":%s*(%d+)"))
end

return { main = function()
  dir = T.tmpdir()
  local result = T.run {
    { "fs is a global and require('fs') is the same table", function()
      T.eq(require("fs"), fs)
    end },
    { "write, read and append a whole file", function()
      T.eq(fs.write(path("a.txt"), "one\n"), true)
      T.eq(fs.append(path("a.txt"), "two\n"), true)
      T.eq(fs.read(path("a.txt")), "one\ntwo\n")
      T.eq(fs.write(path("a.txt"), "over"), true)
      T.eq(fs.read(path("a.txt")), "over")
    end },
    { "any bytes round-trip, a large file too", function()
      local bytes = {}
      for i = 0, 255 do bytes[#bytes + 1] = string.char(i) end
      local all = table.concat(bytes):rep(4096)  -- 1 MiB
      T.eq(fs.write(path("bin"), all), true)
      T.eq(fs.read(path("bin")) == all, true, "1 MiB of every byte read back")
      T.eq(fs.stat(path("bin")).size, #all)
    end },
    { "a missing file is not_found: PATH", function()
      local v, err = fs.read(path("missing"))
      T.eq(v, nil)
      T.eq(err, "not_found: " .. path("missing"))
      v, err = fs.write(path("no/such/dir/x"), "x")
      T.eq(v, nil)
      T.match(err, "^not_found: ")
      v, err = fs.stat(path("missing"))
      T.eq(err, "not_found: " .. path("missing"))
    end },
    { "reading a directory is an io error", function()
      local v, err = fs.read(dir)
      T.eq(v, nil)
      T.match(err, "^io: ")
    end },
    { "stat tells type, size, mtime and mode", function()
      fs.write(path("s.txt"), "12345")
      local st = fs.stat(path("s.txt"))
      T.eq(st.type, "file")
      T.eq(st.size, 5)
      T.ok(math.abs(st.mtime - os.time()) < 60, "mtime in seconds since the epoch")
      T.eq(type(st.mode), "number")
      T.eq(fs.stat(dir).type, "directory")
      os.execute("ln -s s.txt " .. path("link"))
      T.eq(fs.stat(path("link")).type, "link")
      T.eq(fs.stat("/dev/null").type, "other")
    end },
    { "list gives the names in a directory, sorted", function()
      local sub = path("list")
      fs.mkdir(sub)
      for _, n in ipairs { "c", "a", "b", "aa" } do fs.write(sub .. "/" .. n, n) end
      T.eq(table.concat(fs.list(sub), ","), "a,aa,b,c")
      local v, err = fs.list(path("nope"))
      T.eq(v, nil)
      T.match(err, "^not_found: ")
    end },
    { "mkdir, with parents, and an existing one", function()
      T.eq(fs.mkdir(path("p/q/r"), { parents = true }), true)
      T.eq(fs.stat(path("p/q/r")).type, "directory")
      T.eq(fs.mkdir(path("p/q/r"), { parents = true }), true, "parents: an existing directory is fine")
      local v, err = fs.mkdir(path("p"))
      T.eq(v, nil)
      T.eq(err, "exists: " .. path("p"))
      v, err = fs.mkdir(path("x/y"))
      T.match(err, "^not_found: ")
    end },
    { "remove a file and an empty directory; rename", function()
      fs.write(path("r1"), "r")
      T.eq(fs.rename(path("r1"), path("r2")), true)
      T.eq(fs.read(path("r2")), "r")
      T.eq(select(2, fs.read(path("r1"))), "not_found: " .. path("r1"))
      T.eq(fs.remove(path("r2")), true)
      fs.mkdir(path("empty"))
      T.eq(fs.remove(path("empty")), true)
      T.eq(fs.stat(path("empty")), nil)
      local v, err = fs.remove(path("r2"))
      T.eq(err, "not_found: " .. path("r2"))
    end },
    { "an open file reads with io's formats", function()
      fs.write(path("f.txt"), "first line\nsecond\r\n42 3.5\nrest of it")
      local f = assert(fs.open(path("f.txt")))
      T.eq(f:read(), "first line")
      T.eq(f:read("L"), "second\r\n")
      local a, b = f:read("n", "*n")
      T.eq(a, 42)
      T.eq(b, 3.5)
      T.eq(f:read(1), "\n")
      T.eq(f:read(4), "rest")
      T.eq(f:read("a"), " of it")
      T.eq(f:read("a"), "")
      T.eq(f:read("l"), nil)
      T.eq(f:read(0), nil)
      T.eq(f:close(), true)
      T.raises(function() f:read() end, "closed file")
    end },
    { "an open file writes, seeks and lines", function()
      local f = assert(fs.open(path("w.txt"), "w+"))
      T.eq(f:write("a", 1, "\n", "b\n"), f)
      T.eq(f:seek("set"), 0)
      local got = {}
      for l in f:lines() do got[#got + 1] = l end
      T.eq(table.concat(got, "|"), "a1|b")
      T.eq(f:seek("end"), 5)
      T.eq(f:seek("set", 1), 1)
      T.eq(f:read(2), "1\n")
      f:close()
      local a = assert(fs.open(path("w.txt"), "a"))
      a:write("c\n")
      a:close()
      T.eq(fs.read(path("w.txt")), "a1\nb\nc\n")
    end },
    { "a bad mode and a missing file fail open", function()
      local v, err = fs.open(path("w.txt"), "rw")
      T.eq(v, nil)
      T.match(err, "^invalid: ")
      v, err = fs.open(path("none"))
      T.eq(err, "not_found: " .. path("none"))
    end },
    { "wrong argument types raise, naming the argument", function()
      T.raises(function() fs.read(1) end, "bad argument #1 to 'fs.read'")
      T.raises(function() fs.write("x", {}) end, "bad argument #2 to 'fs.write'")
      T.raises(function() fs.mkdir("x", true) end, "bad argument #2 to 'fs.mkdir'")
    end },
    { "a slow file call suspends only its task", function()
      -- Another task keeps running while this one reads and writes.
      local ticks = 0
      local stop = false
      coroutine.spawn(function()
        while not stop do ticks = ticks + 1; time.sleep(0) end
      end)
      for i = 1, 50 do fs.write(path("t" .. i), ("x"):rep(10000)) end
      stop = true
      T.ok(ticks > 0, "the other task ran meanwhile")
    end },
    { "reading an endless file answers limit: memory soon, and the process goes on", function()
      local t0 = time.now()
      local v, err = fs.read("/dev/zero")
      T.eq(v, nil)
      T.match(err, "^limit: memory")
      T.ok(time.now() - t0 < 15, "answered within 15 s (never, unbounded)")
      T.eq(fs.read(path("a.txt")), "over", "the next read works")
      local f = assert(fs.open("/dev/zero"))
      v, err = f:read("a")
      T.eq(v, nil)
      T.match(err, "^limit: memory")
      v, err = f:read(1e12)
      T.eq(v, nil)
      T.match(err, "^limit: memory")
      f:close()
    end },
    { "read(n) of a count larger than the file costs only what the file gives", function()
      assert(fs.write(path("three"), "abc"))
      local before = host_kib("VmHWM")
      local f = assert(fs.open(path("three")))
      T.eq(f:read(1e9), "abc")
      T.eq(f:read(1e9), nil, "then the end")
      f:close()
      T.ok(host_kib("VmHWM") - before < 200 * 1024, "the host's peak memory grew by less than 200 MiB")
    end },
    { "a process terminated while it reads an endless file leaves the host's memory bounded", function()
      local before = host_kib("VmRSS")
      local pid = assert(process.spawn("fixtures.fs_reader:read_endless"))
      time.sleep(0.05)
      process.terminate(pid)
      time.sleep(1)
      T.ok(host_kib("VmRSS") - before < 200 * 1024, "the host's memory grew by less than 200 MiB")
    end },
    { "a NUL byte in a path is refused, naming the argument", function()
      assert(fs.write(path("server.key"), "secret"))
      local function refused(want, v, err)
        T.eq(v, nil, want)
        T.eq(err, "invalid: " .. want .. " contains a NUL byte")
      end
      local p = path("server.key\0.txt")
      refused("path", fs.read(p))
      refused("path", fs.write(p, "x"))
      refused("path", fs.append(p, "x"))
      refused("path", fs.stat(p))
      refused("path", fs.list(dir .. "\0"))
      refused("path", fs.mkdir(p))
      refused("path", fs.mkdir(p, { parents = true }))
      refused("path", fs.remove(p))
      refused("path", fs.open(p))
      refused("from", fs.rename(p, path("b")))
      refused("to", fs.rename(path("server.key"), p))
      T.eq(fs.read(path("server.key")), "secret", "the file is untouched")
    end },
    { "an unknown option raises at the caller's line", function()
      T.raises_here(function() fs.mkdir(path("unmade/q"), { parent = true }) end, "invalid: unknown option 'parent'")
      T.eq(fs.stat(path("unmade")), nil, "nothing was made")
    end },
  }
  os.execute("rm -rf " .. dir)
  return result
end }

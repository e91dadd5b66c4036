-- The fs module, through the host as a user runs it.
local T = require("t")

local dir

local function path(name) return dir .. "/" .. name end

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
  }
  os.execute("rm -rf " .. dir)
  return result
end }

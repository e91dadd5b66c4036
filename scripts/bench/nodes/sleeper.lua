-- sleepers: sleeps 1 ms, then answers its number.
return function(parent, i)
  time.sleep(0.001)
  process.send(parent, "done", i)
end

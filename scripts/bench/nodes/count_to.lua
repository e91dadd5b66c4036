-- pg_send: takes n messages, then reports to report_to.
return function(report_to, n)
  for _ = 1, n do process.receive() end
  process.send(report_to, "done", n)
end

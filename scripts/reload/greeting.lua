-- Edit me while `host run scripts/reload --watch` runs.
return {
  text = function() return "Hello, version 1" end,
}

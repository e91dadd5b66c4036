-- server_call: a server's callbacks; each call answers its request plus one.
return {
  init = function() return {} end,
  handle_call = function(n, _, state) return n + 1, state end,
}

-- spawn_seq, spawn_conc: returns its argument at once.
return { main = function(i) return i end }

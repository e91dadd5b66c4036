// Durations as the time calls take them: seconds as a number, or a string
// of number-unit pairs ("250ms", "5s", "1m", "1h30m", "10us"; units ns, us,
// ms, s, m, h). One parser for the C calls (time.sleep) and kernel_ext.lua's
// (H.duration); and the clock they count on. Threads: any.
#pragma once

struct lua_State;

namespace host::lua {

// The duration at stack index idx in seconds; raises "invalid duration:
// ..." or "bad duration: ..." with the position of the function `level`
// levels up (as Lua's error: 1 is the caller of the C function that
// calls this).
double check_duration(lua_State* L, int idx, int level);

// The monotonic clock in seconds: time.now's, and the deadlines durations
// make (a timed receive's).
double monotonic_seconds();

}  // namespace host::lua

// seam: whether this build has the LuaJIT private-layout seam, and whether
// its checks passed, for the code outside bindings/luajit/ that picks a
// path by it. The seam itself (luajit_private.hpp) is included only by
// bindings/luajit/. Threads: any.
#pragma once

#ifndef HOST_LUAJIT_PRIVATE
#define HOST_LUAJIT_PRIVATE 1
#endif

namespace host::lua::seam {

// Whether this build has the private paths at all (CMake's
// HOST_LUAJIT_PRIVATE). Without them none of bindings/luajit/'s private
// code is compiled (tests/check_seam_symbols.sh checks the objects).
inline constexpr bool kBuilt = HOST_LUAJIT_PRIVATE != 0;

#if HOST_LUAJIT_PRIVATE
namespace detail {
// Set by the checks as the program starts (a static initialiser: a plain
// load on the hot paths, where a function-local static cost a call and
// its guard). Read before that, it is false: the public paths.
extern const bool ok;
}  // namespace detail

// Whether the private operations may be used: the layout checks, run once
// as the program starts on states of their own, passed
// (luajit_private.cpp). False for good where any failed (another LuaJIT
// build): every user takes its public path.
inline bool available() { return detail::ok; }
// available(), for another static initialiser: runs the checks if they
// have not run yet (the order of initialisers across files is not fixed).
bool checked();
#else
inline constexpr bool available() { return false; }
inline constexpr bool checked() { return false; }
#endif

}  // namespace host::lua::seam

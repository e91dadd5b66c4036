// Durations: the one parser behind time.sleep (C) and kernel_ext.lua's
// time calls (H.duration).
#include "bindings/duration.hpp"

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include <lua.hpp>

namespace host::lua {
namespace {

[[noreturn]] void raise(lua_State* L, int level, const std::string& message) {
  luaL_where(L, level);
  lua_pushlstring(L, message.data(), message.size());
  lua_concat(L, 2);
  lua_error(L);
  __builtin_unreachable();
}

double unit_scale(const char* unit, std::size_t n) {
  static const struct {
    const char* name;
    double scale;
  } units[] = {{"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1}, {"m", 60}, {"h", 3600}};
  for (const auto& u : units)
    if (std::strlen(u.name) == n && std::memcmp(u.name, unit, n) == 0) return u.scale;
  return 0;
}

}  // namespace

double check_duration(lua_State* L, int idx, int level) {
  const int type = lua_type(L, idx);
  if (type == LUA_TNUMBER) {
    const double d = lua_tonumber(L, idx);
    if (d != d || d < 0) {
      lua_pushvalue(L, idx);
      const std::string text = lua_tostring(L, -1);
      raise(L, level, "invalid duration: " + text);
    }
    return d;
  }
  if (type != LUA_TSTRING)
    raise(L, level, std::string("bad duration: expected seconds or a string like \"250ms\", got ") +
                        (type == LUA_TNONE ? "nil" : luaL_typename(L, idx)));
  std::size_t n = 0;
  const char* s = lua_tolstring(L, idx, &n);
  if (n == 0) raise(L, level, "invalid duration: empty string");
  double total = 0;
  std::size_t pos = 0;
  while (pos < n) {
    // A number (digits, then an optional point and digits; or a point and
    // digits), then a unit of letters.
    const std::size_t start = pos;
    while (pos < n && std::isdigit(static_cast<unsigned char>(s[pos]))) ++pos;
    const bool whole = pos > start;
    if (pos < n && s[pos] == '.') {
      ++pos;
      const std::size_t frac = pos;
      while (pos < n && std::isdigit(static_cast<unsigned char>(s[pos]))) ++pos;
      if (!whole && pos == frac) pos = start;  // a point alone is no number
    }
    const std::size_t unit = pos;
    while (pos < n && std::isalpha(static_cast<unsigned char>(s[pos]))) ++pos;
    const double scale = pos > unit && unit > start ? unit_scale(s + unit, pos - unit) : 0;
    if (scale == 0) raise(L, level, "invalid duration: \"" + std::string(s, n) + "\"");
    total += std::strtod(std::string(s + start, unit - start).c_str(), nullptr) * scale;
  }
  return total;
}

double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace host::lua

// stack_args: the one-time check of the layout it reads.
#include "bindings/stack_args.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

namespace host::lua::stack_args {
namespace {

namespace LL = luajit_layout;

// Called with arguments of every type a script can pass: whether the
// layout's reads give what the C API gives for each, and for the slots
// past the last. The base and top pointers are checked against the
// argument count before anything is read through them: with another
// layout they would be other fields, and reading through those could
// fault.
int probe(lua_State* L) {
  const int n = lua_gettop(L);
  const unsigned char* base = LL::load_ptr(reinterpret_cast<const unsigned char*>(L) + LL::kStateBaseOffset);
  const unsigned char* top = LL::load_ptr(reinterpret_cast<const unsigned char*>(L) + LL::kStateTopOffset);
  bool ok = base != nullptr && top > base && reinterpret_cast<std::uintptr_t>(base) % 8 == 0 &&
            static_cast<std::size_t>(top - base) == static_cast<std::size_t>(n) * 8;
  // The stack's end: past the top, and within a sane distance of it.
  const unsigned char* max = LL::load_ptr(reinterpret_cast<const unsigned char*>(L) + LL::kStateMaxstackOffset);
  ok = ok && max > top && static_cast<std::size_t>(max - top) % 8 == 0 && max - top < (std::ptrdiff_t{1} << 24);
  for (int i = 1; ok && i <= n + 2; ++i) {
    const unsigned char* at = detail::slot(L, i);
    const int api_type = lua_type(L, i);
    const int raw_type = at ? detail::type_of(LL::load64(at)) : LUA_TNONE;
    ok = api_type == raw_type;
    if (!ok || !at) continue;
    std::uint64_t tv = LL::load64(at);
    if (api_type == LUA_TSTRING) {
      std::size_t len = 0;
      const char* bytes = lua_tolstring(L, i, &len);
      ok = LL::tag(tv) == LL::kTagStr && LL::object(tv) + LL::kStrBytes == reinterpret_cast<const unsigned char*>(bytes) &&
           LL::load32(LL::object(tv) + LL::kStrLenOffset) == len;
    } else if (api_type == LUA_TNUMBER) {
      ok = LL::number(tv) == lua_tonumber(L, i);
    } else if (api_type == LUA_TTABLE || api_type == LUA_TFUNCTION || api_type == LUA_TTHREAD) {
      // (A full userdata's lua_topointer is its block, past the object.)
      ok = LL::object(tv) == lua_topointer(L, i);
    }
    // push_object gives what the C API's copy of the slot gives.
    if (ok && (api_type == LUA_TSTRING || api_type == LUA_TTABLE || api_type == LUA_TFUNCTION)) {
      const int before = lua_gettop(L);
      ok = detail::push_raw(L, LL::object(tv), LL::tag(tv)) && lua_gettop(L) == before + 1 &&
           lua_type(L, -1) == api_type && lua_rawequal(L, -1, i);
      lua_settop(L, before);
    }
  }
  lua_pushboolean(L, ok);
  return 1;
}

// Pushes one argument of each kind (13 values).
void push_arguments(lua_State* L) {
  static int anchor;
  lua_pushnil(L);
  lua_pushboolean(L, 0);
  lua_pushboolean(L, 1);
  lua_pushnumber(L, 1.5);
  lua_pushnumber(L, -0.0);
  lua_pushliteral(L, "");
  lua_pushliteral(L, "inc");
  const std::string long_text(300, 'x');
  lua_pushlstring(L, long_text.data(), long_text.size());
  lua_createtable(L, 1, 1);
  lua_pushcfunction(L, probe);
  lua_newthread(L);
  lua_newuserdata(L, 16);
  lua_pushlightuserdata(L, &anchor);
}

// Calls probe with the arguments from C, then from Lua (with fewer
// arguments, on a stack grown first), and returns whether both agreed.
bool check() {
  const std::unique_ptr<lua_State, decltype(&lua_close)> state(luaL_newstate(), &lua_close);
  lua_State* L = state.get();
  if (!L) return false;
  lua_pushcfunction(L, probe);
  push_arguments(L);
  if (lua_pcall(L, 13, 1, 0) != 0 || !lua_toboolean(L, -1)) return false;
  lua_settop(L, 0);
  if (!lua_checkstack(L, 200)) return false;
  for (int i = 0; i < 150; ++i) lua_pushinteger(L, i);
  lua_settop(L, 0);
  if (luaL_loadstring(L, "local f, a, b, c = ... return f(a, b, nil, c, 'topic', 7)") != 0) return false;
  lua_pushcfunction(L, probe);
  lua_pushliteral(L, "<0.1.2>");
  lua_createtable(L, 0, 0);
  lua_pushboolean(L, 1);
  return lua_pcall(L, 4, 1, 0) == 0 && lua_toboolean(L, -1);
}

// A table's header and array part as pop_into_array reads and writes
// them, against the C API on a state of its own: the type byte and array
// size of a new table, values written and read back through lua_rawgeti
// (a string that only the table keeps surviving a full collection), a
// key past the array refused; and the black mark seen on the table, held
// by the stack, at some step of a collection (else pop_into_array would
// never be refused one, and owe barriers).
bool check_array_writes() {
  const std::unique_ptr<lua_State, decltype(&lua_close)> state(luaL_newstate(), &lua_close);
  lua_State* L = state.get();
  if (!L) return false;
  lua_createtable(L, 4, 0);  // keys 0 to 4 in its array part
  const auto* t = static_cast<const unsigned char*>(table(L, 1));
  if (!t || t[LL::kGctOffset] != LL::kGctTable || (t[LL::kMarkedOffset] & LL::kMarkBlack) != 0 ||
      LL::load32(t + LL::kAsizeOffset) != 5)
    return false;
  lua_pushnumber(L, 1.5);
  lua_pushfstring(L, "kept by the table alone %d", 7);
  lua_pushboolean(L, 1);
  if (!detail::pop_into_array_raw(L, 1, 2, 3) || lua_gettop(L) != 1) return false;
  lua_pushnumber(L, 2);
  if (detail::pop_into_array_raw(L, 1, 4, 2) || lua_gettop(L) != 2) return false;  // key 5: past the array
  lua_settop(L, 1);
  // Numbers and booleans as array_part's callers write them.
  unsigned char* array = const_cast<unsigned char*>(LL::load_ptr(t + LL::kArrayOffset));
  const std::uint64_t scalars[] = {LL::primitive(LL::kTagFalse), LL::number_tvalue(std::nan(""))};
  std::memcpy(array, scalars, sizeof scalars);  // keys 0 and 1
  lua_rawgeti(L, 1, 0);
  lua_rawgeti(L, 1, 1);
  const lua_Number nan = lua_tonumber(L, 3);
  if (lua_type(L, 2) != LUA_TBOOLEAN || lua_toboolean(L, 2) || lua_type(L, 3) != LUA_TNUMBER || nan == nan) return false;
  lua_settop(L, 1);
  lua_pushnil(L);
  lua_rawseti(L, 1, 0);
  lua_pushnil(L);
  lua_rawseti(L, 1, 1);
  lua_gc(L, LUA_GCCOLLECT, 0);
  lua_rawgeti(L, 1, 1);
  lua_rawgeti(L, 1, 2);
  lua_rawgeti(L, 1, 3);
  lua_rawgeti(L, 1, 4);
  const char* s = lua_tostring(L, 4);
  if (!lua_isnil(L, 2) || lua_tonumber(L, 3) != 1.5 || !s || std::string(s) != "kept by the table alone 7" ||
      lua_type(L, 5) != LUA_TBOOLEAN || !lua_toboolean(L, 5))
    return false;
  lua_settop(L, 1);
  for (int i = 0; i < 100000; ++i) {
    lua_gc(L, LUA_GCSTEP, 0);
    if ((t[LL::kMarkedOffset] & LL::kMarkBlack) != 0) return true;
  }
  return false;
}

}  // namespace

const bool detail::layout_ok = check();
const bool detail::array_writes_ok = layout_ok && check_array_writes();

}  // namespace host::lua::stack_args

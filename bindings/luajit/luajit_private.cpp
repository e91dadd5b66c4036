// luajit_private: the checks, run once as the program starts, that decide
// whether LuaJIT lays out its objects as luajit_private.hpp says. Each
// runs on a state of its own and compares what an operation reads or
// writes with what the C API gives. A pointer read through the layout is
// only followed once the fields it comes from have been checked against
// the C API, so that another layout fails a check instead of faulting.
// Threads: the static initialisers' (once, as the program starts).
// Compiled only with HOST_LUAJIT_PRIVATE (without it, seam.hpp's
// available() is a constant false).
#include "bindings/luajit/seam.hpp"

#if HOST_LUAJIT_PRIVATE
#include "bindings/luajit/luajit_private.hpp"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>

#include <lua.hpp>

namespace host::lua::luajit_private {
namespace {

namespace LL = layout;

using State = std::unique_ptr<lua_State, decltype(&lua_close)>;

// Called with arguments of every type a script can pass: whether the
// stack's reads give what the C API gives for each, and for the slots past
// the last; and whether a pushed copy of an object is what the C API's
// copy is. The base and top are checked against the argument count before
// anything is read through them.
int probe_stack(lua_State* L) {
  const int n = lua_gettop(L);
  const unsigned char* base = stack_base(L);
  const unsigned char* top = stack_top(L);
  bool ok = base != nullptr && top > base && reinterpret_cast<std::uintptr_t>(base) % 8 == 0 &&
            static_cast<std::size_t>(top - base) == static_cast<std::size_t>(n) * 8;
  const unsigned char* max = stack_end(L);
  ok = ok && max > top && static_cast<std::size_t>(max - top) % 8 == 0 && max - top < (std::ptrdiff_t{1} << 24);
  for (int i = 1; ok && i <= n + 2; ++i) {
    const unsigned char* at = stack_slot(L, i);
    const int api_type = lua_type(L, i);
    ok = api_type == (at ? type_of(Raw::load(at)) : LUA_TNONE);
    if (!ok || !at) continue;
    const RawValue tv = Raw::load(at);
    if (api_type == LUA_TSTRING) {
      std::size_t len = 0, raw_len = 0;
      const char* bytes = lua_tolstring(L, i, &len);
      ok = tag(tv) == kTagStr && string_bytes(object(tv), &raw_len) == bytes && raw_len == len &&
           string_value(bytes) == tv;
    } else if (api_type == LUA_TNUMBER) {
      ok = number(tv) == lua_tonumber(L, i);
    } else if (api_type == LUA_TTABLE || api_type == LUA_TFUNCTION || api_type == LUA_TTHREAD) {
      // (A full userdata's lua_topointer is its block, past the object.)
      ok = object(tv) == lua_topointer(L, i);
    }
    if (ok && (api_type == LUA_TSTRING || api_type == LUA_TTABLE || api_type == LUA_TFUNCTION)) {
      const int before = lua_gettop(L);
      ok = push_values(L, &tv, 1) && lua_gettop(L) == before + 1 && lua_type(L, -1) == api_type &&
           lua_rawequal(L, -1, i);
      lua_settop(L, before);
    }
  }
  lua_pushboolean(L, ok);
  return 1;
}

// probe_stack with one argument of each kind, from C, then from Lua (fewer
// arguments, on a stack grown first).
bool check_stack() {
  const State state(luaL_newstate(), &lua_close);
  lua_State* L = state.get();
  if (!L) return false;
  static int anchor;
  lua_pushcfunction(L, probe_stack);
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
  lua_pushcfunction(L, probe_stack);
  lua_newthread(L);
  lua_newuserdata(L, 16);
  lua_pushlightuserdata(L, &anchor);
  if (lua_pcall(L, 13, 1, 0) != 0 || !lua_toboolean(L, -1)) return false;
  lua_settop(L, 0);
  if (!lua_checkstack(L, 200)) return false;
  for (int i = 0; i < 150; ++i) lua_pushinteger(L, i);
  lua_settop(L, 0);
  if (luaL_loadstring(L, "local f, a, b, c = ... return f(a, b, nil, c, 'topic', 7)") != 0) return false;
  lua_pushcfunction(L, probe_stack);
  lua_pushliteral(L, "<0.1.2>");
  lua_createtable(L, 0, 0);
  lua_pushboolean(L, 1);
  return lua_pcall(L, 4, 1, 0) == 0 && lua_toboolean(L, -1);
}

// Strings' bytes and lengths; a new table's header, sizes and parts;
// values set through the C API found where table_parts says, and values
// written into the array part read back by lua_rawgeti (a string only the
// table keeps surviving a full collection); and the black mark seen on a
// table the stack holds, at some step of a collection.
bool check_tables() {
  const State state(luaL_newstate(), &lua_close);
  lua_State* L = state.get();
  if (!L) return false;
  for (std::size_t len : {0, 1, 5, 40, 300}) {
    std::string text(len, 'a');
    for (std::size_t i = 0; i < len; ++i) text[i] = static_cast<char>('a' + i % 26);
    lua_pushlstring(L, text.data(), len);
    const auto* s = static_cast<const unsigned char*>(lua_topointer(L, -1));
    std::size_t raw_len = 0;
    if (!s || string_bytes(s, &raw_len) != lua_tostring(L, -1) || raw_len != len) return false;
    lua_pop(L, 1);
  }
  lua_createtable(L, 5, 3);
  const auto* t = static_cast<const unsigned char*>(lua_topointer(L, -1));
  if (t[LL::kGctOffset] != LL::kGctTable || is_black(t)) return false;
  const TableParts p = table_parts(t);
  if (p.asize != 6 || p.hmask != 3 || p.array != t + LL::kTableBytes ||
      load_ptr(t + LL::kFreetopOffset) != p.node + hash_part_bytes(4) || array_slots(t) != p.array)
    return false;
  lua_pushnumber(L, 42.5);
  lua_rawseti(L, -2, 1);
  lua_pushboolean(L, 1);
  lua_rawseti(L, -2, 2);
  lua_pushliteral(L, "key");
  lua_pushliteral(L, "value");
  const void* key = lua_topointer(L, -2);
  const void* val = lua_topointer(L, -1);
  lua_rawset(L, -3);
  if (!is_number(array_value(p, 1)) || number(array_value(p, 1)) != 42.5 || tag(array_value(p, 2)) != kTagTrue ||
      !is_nil(array_value(p, 3)))
    return false;
  int found = 0;
  for (std::size_t i = 0; i <= p.hmask; ++i) {
    const RawValue v = node_value(p, i);
    const RawValue k = node_key(p, i);
    if (is_nil(v)) continue;
    if (tag(v) != kTagStr || object(v) != val || tag(k) != kTagStr || object(k) != key) return false;
    ++found;
  }
  if (found != 1) return false;
  // Written straight into the array part, read back through the C API.
  lua_pushfstring(L, "kept by the table alone %d", 7);
  const RawValue written[] = {primitive(kTagFalse), number_value(std::nan("")), string_value(lua_tostring(L, -1))};
  if (is_black(t)) return false;  // (a step ran: the write would owe a barrier)
  std::memcpy(array_slots(t) + 3 * 8, written, sizeof written);  // keys 3 to 5
  lua_pop(L, 1);
  lua_gc(L, LUA_GCCOLLECT, 0);
  lua_rawgeti(L, 1, 3);
  lua_rawgeti(L, 1, 4);
  lua_rawgeti(L, 1, 5);
  const lua_Number nan = lua_tonumber(L, 3);
  const char* s = lua_tostring(L, 4);
  if (lua_type(L, 2) != LUA_TBOOLEAN || lua_toboolean(L, 2) || lua_type(L, 3) != LUA_TNUMBER || nan == nan || !s ||
      std::string(s) != "kept by the table alone 7")
    return false;
  lua_settop(L, 1);
  // A hash part written back as it was read.
  const HashPart h = read_hash_part(t);
  write_hash_part(const_cast<unsigned char*>(t), h);
  lua_getfield(L, 1, "key");
  if (!lua_isstring(L, -1) || std::string(lua_tostring(L, -1)) != "value") return false;
  lua_settop(L, 1);
  for (int i = 0; i < 100000; ++i) {
    lua_gc(L, LUA_GCSTEP, 0);
    if (is_black(t)) return true;
  }
  return false;
}

std::uint64_t total_by_api(lua_State* L) {
  return static_cast<std::uint64_t>(lua_gc(L, LUA_GCCOUNT, 0)) * 1024 + static_cast<std::uint64_t>(lua_gc(L, LUA_GCCOUNTB, 0));
}

void* probe_allocate(void*, void* ptr, std::size_t, std::size_t nsize) {
  if (nsize == 0) {
    std::free(ptr);
    return nullptr;
  }
  return std::realloc(ptr, nsize);
}

// The global state is the one the allocator and its data name; the total,
// pause and stepmul read what the C API says; a full collection leaves the
// collector between cycles with the threshold LuaJIT sets then; a stopped
// collector's threshold is past any heap; and a threshold written below
// the total starts a cycle at the next allocation check.
bool check_collector() {
  int data = 0;
  const State state(lua_newstate(&probe_allocate, &data), &lua_close);
  lua_State* L = state.get();
  if (!L) return false;
  const unsigned char* g = global_state(L);
  const auto allocate_address = reinterpret_cast<std::uintptr_t>(&probe_allocate);
  if (!g || load64(g + LL::kGlobalAllocfOffset) != allocate_address || allocator_data(L) != &data) return false;
  if (gc_total(L) != total_by_api(L)) return false;
  lua_gc(L, LUA_GCSETPAUSE, 137);
  lua_gc(L, LUA_GCSETSTEPMUL, 211);
  if (load32(g + LL::kGcPauseOffset) != 137 || load32(g + LL::kGcStepmulOffset) != 211) return false;
  // Enough live tables that one step cannot finish a cycle (500 of them,
  // about 32 KB, where a step at this stepmul does about 2 KB of work),
  // and garbage.
  lua_createtable(L, 1000, 0);
  for (int i = 1; i <= 1000; ++i) {
    lua_createtable(L, 0, 0);
    if (i % 2 == 0) lua_rawseti(L, 1, i);
    else lua_pop(L, 1);
  }
  lua_gc(L, LUA_GCCOLLECT, 0);
  const std::uint64_t live = gc_estimate(L);
  const std::uint64_t total = gc_total(L);
  if (!gc_between_cycles(L) || total != total_by_api(L) || live == 0 || live > total ||
      gc_threshold(L) != (live / 100) * 137)
    return false;
  lua_gc(L, LUA_GCSTOP, 0);
  if (gc_threshold(L) < (std::uint64_t{1} << 46)) return false;
  lua_gc(L, LUA_GCRESTART, 0);
  set_gc_threshold(L, total);
  lua_createtable(L, 0, 0);  // checks the collector: a step runs
  return !gc_between_cycles(L);
}

// Records the first 2 KB block lua_newstate asks for: its string table.
void* probe_strings_allocate(void* ud, void* ptr, std::size_t, std::size_t nsize) {
  if (nsize == 0) {
    std::free(ptr);
    return nullptr;
  }
  void* out = std::realloc(ptr, nsize);
  auto** first = static_cast<void**>(ud);
  if (!ptr && nsize == 256 * 8 && !*first) *first = out;
  return out;
}

// The string table is where the layout says, 256 slots holding every
// string lua_newstate made, each in the chain its primary hash picks;
// halve_string_table into 128 slots keeps every string found (the same object
// interned again, from C and from the lexer), and LuaJIT then grows the
// table past 128 strings, collects and closes the state as usual.
bool check_strings() {
  void* first = nullptr;
  const State state(lua_newstate(&probe_strings_allocate, &first), &lua_close);
  lua_State* L = state.get();
  if (!L || !first) return false;
  unsigned char* g = global_state(L);
  const StringTable t = string_table_of(g);
  if (t.slots != first || t.mask != 255 || t.count == 0 || t.count >= 128) return false;
  std::uint32_t found = 0;
  for (std::uint32_t i = 0; i <= t.mask; ++i) {
    const unsigned char* s = load_ptr(t.slots + 8 * i);
    if (reinterpret_cast<std::uintptr_t>(s) % 8 != 0) return false;  // (a secondary-hash mark, or no pointer)
    for (; s; s = load_ptr(s + LL::kStrNextOffset)) {
      if (++found > t.count || s[LL::kGctOffset] != LL::kGctString || s[LL::kStrHashAlgOffset] != 0 ||
          (load32(s + LL::kStrHashOffset) & t.mask) != i)
        return false;
    }
  }
  if (found != t.count) return false;
  const char* const names[] = {"__index", "while", "function", "__gc", "kept through the move"};
  const char* before[std::size(names)];
  for (std::size_t i = 0; i < std::size(names); ++i) {
    lua_pushstring(L, names[i]);
    before[i] = lua_tostring(L, -1);
  }
  auto* slots = static_cast<unsigned char*>(std::malloc(128 * 8));
  if (!slots) return false;
  const std::uint64_t total = gc_total(L);
  halve_string_table(g, slots);
  set_gc_total(L, total - 128 * 8);
  std::free(first);
  const StringTable moved = string_table_of(g);
  if (moved.slots != slots || moved.mask != 127 || moved.count != t.count + 1 || total_by_api(L) != total - 128 * 8)
    return false;
  std::uint32_t kept = 0;
  for (std::uint32_t i = 0; i <= moved.mask; ++i)
    for (const unsigned char* s = load_ptr(moved.slots + 8 * i); s; s = load_ptr(s + LL::kStrNextOffset))
      if (++kept > moved.count || (load32(s + LL::kStrHashOffset) & moved.mask) != i) return false;
  if (kept != moved.count) return false;
  auto same = [&] {
    for (std::size_t i = 0; i < std::size(names); ++i) {
      lua_pushstring(L, names[i]);
      const bool ok = lua_tostring(L, -1) == before[i];
      lua_pop(L, 1);
      if (!ok) return false;
    }
    return true;
  };
  if (!same()) return false;
  if (luaL_loadstring(L, "local t = {} while false do end return 'kept through the move', t.__index") != 0 ||
      lua_pcall(L, 0, 1, 0) != 0 || lua_tostring(L, -1) != before[4])
    return false;
  lua_pop(L, 1);
  if (!lua_checkstack(L, 700)) return false;
  for (int i = 0; i < 600; ++i) lua_pushfstring(L, "string %d", i);  // grows the table twice
  lua_gc(L, LUA_GCCOLLECT, 0);
  lua_settop(L, std::size(names));
  lua_gc(L, LUA_GCCOLLECT, 0);
  return string_table_of(g).mask >= 511 && same();
}

}  // namespace

bool layout_holds() {
  static const bool ok = check_stack() && check_tables() && check_collector();
  return ok;
}

bool strings_layout_holds() {
  static const bool ok = layout_holds() && check_strings();
  return ok;
}

}  // namespace host::lua::luajit_private

namespace host::lua::seam {

bool checked() { return luajit_private::layout_holds(); }

const bool detail::ok = checked();

}  // namespace host::lua::seam
#endif

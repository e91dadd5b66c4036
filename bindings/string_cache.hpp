// StringCache: the short strings a process receives over and over (message
// topics, table keys, small words such as "red" or "ok"), kept as Lua strings
// in registry slots. lua_pushlstring hashes and interns its bytes each time
// (about a tenth of a message's delivery for its topic alone); a cached
// string costs a few compares and a registry read. The slots are searched
// in turn (a direct-mapped cache thrashed: "ping" and the key "n" shared a
// slot) and replaced round-robin. Made on the first string it keeps, so a
// process that never receives a message pays one pointer. One per process;
// not thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>

#include <lua.hpp>

namespace host::lua {

class StringCache {
 public:
  // What a slot holds at most: longer strings are rare as keys and topics.
  static constexpr std::size_t kMaxLength = 15;
  static constexpr std::size_t kSlots = 8;

  // Pushes the Lua string of s.
  void push(lua_State* L, std::string_view s) {
    if (s.size() > kMaxLength) {
      lua_pushlstring(L, s.data(), s.size());
      return;
    }
    if (slots_) {
      for (const Slot& slot : *slots_) {
        if (slot.ref != LUA_NOREF && slot.size == s.size() && std::memcmp(slot.text, s.data(), s.size()) == 0) {
          lua_rawgeti(L, LUA_REGISTRYINDEX, slot.ref);
          return;
        }
      }
    } else {
      slots_ = std::make_unique<Slots>();
    }
    lua_pushlstring(L, s.data(), s.size());
    Slot& slot = (*slots_)[next_];
    next_ = (next_ + 1) % kSlots;
    std::memcpy(slot.text, s.data(), s.size());
    slot.size = static_cast<std::uint8_t>(s.size());
    lua_pushvalue(L, -1);
    // A slot takes its registry index when first used: a process that
    // receives few strings adds few registry entries.
    if (slot.ref == LUA_NOREF) slot.ref = luaL_ref(L, LUA_REGISTRYINDEX);
    else lua_rawseti(L, LUA_REGISTRYINDEX, slot.ref);
  }

 private:
  struct Slot {
    char text[kMaxLength];
    std::uint8_t size = 0;
    int ref = LUA_NOREF;
  };
  using Slots = std::array<Slot, kSlots>;

  std::unique_ptr<Slots> slots_;
  std::size_t next_ = 0;  // the slot a miss replaces
};

}  // namespace host::lua

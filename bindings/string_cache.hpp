// StringCache: the short strings a process receives over and over (message
// topics, table keys, small words such as "red" or "ok"), kept as Lua strings
// in registry slots. lua_pushlstring hashes and interns its bytes each time
// (about a tenth of a message's delivery for its topic alone); a cached
// string costs a few compares and a registry read. The slots are searched
// in turn (a direct-mapped cache thrashed: "ping" and the key "n" shared a
// slot) and replaced round-robin. One per process; not thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <string_view>

#include <lua.hpp>

namespace host::lua {

class StringCache {
 public:
  // What a slot holds at most: longer strings are rare as keys and topics.
  static constexpr std::size_t kMaxLength = 15;
  static constexpr std::size_t kSlots = 8;

  // Gives every slot its registry index, taken by pin(L) from a value on top
  // of L (TaskKernel::pin); once per state, before any push.
  template <typename Pin>
  void init(lua_State* L, Pin&& pin) {
    for (Slot& s : slots_) {
      lua_pushliteral(L, "");  // what an unused slot matches: the empty string
      s.ref = pin(L);
      s.size = 0;
    }
  }

  // Pushes the Lua string of s.
  void push(lua_State* L, std::string_view s) {
    if (s.size() > kMaxLength) {
      lua_pushlstring(L, s.data(), s.size());
      return;
    }
    for (const Slot& slot : slots_) {
      if (slot.size == s.size() && std::memcmp(slot.text, s.data(), s.size()) == 0) {
        lua_rawgeti(L, LUA_REGISTRYINDEX, slot.ref);
        return;
      }
    }
    lua_pushlstring(L, s.data(), s.size());
    Slot& slot = slots_[next_];
    next_ = (next_ + 1) % kSlots;
    std::memcpy(slot.text, s.data(), s.size());
    slot.size = static_cast<std::uint8_t>(s.size());
    lua_pushvalue(L, -1);
    lua_rawseti(L, LUA_REGISTRYINDEX, slot.ref);
  }

 private:
  struct Slot {
    char text[kMaxLength];
    std::uint8_t size = 0;
    int ref = 0;
  };

  std::array<Slot, kSlots> slots_;
  std::size_t next_ = 0;  // the slot a miss replaces
};

}  // namespace host::lua

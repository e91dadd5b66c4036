// StringCache: the short strings a process receives over and over (message
// topics, table keys, small words such as "red" or "ok"), kept as Lua strings
// in registry slots. lua_pushlstring hashes and interns its bytes each time
// (about a tenth of a message's delivery for its topic alone); a cached
// string costs a few compares and a push of the object its slot keeps
// (stack_args::push_object). The slots are searched in turn (a
// direct-mapped cache thrashed: "ping" and the key "n" shared a slot) and
// replaced round-robin. Topics of 16 to 64 bytes have slots of their own
// (find_topic, push_topic). Made on the first string it keeps, so a
// process that never receives a message pays one pointer. One per process;
// not thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>

#include <lua.hpp>

#include "bindings/luajit/stack_args.hpp"

namespace host::lua {

class StringCache {
 public:
  // What a slot holds at most: longer strings are rare as keys and topics.
  static constexpr std::size_t kMaxLength = 15;
  static constexpr std::size_t kSlots = 8;

  // The bytes of the Lua string of s that a slot keeps (the string alive
  // as long as the slot holds it: until the next push that misses), or
  // nullptr. Makes nothing: for LuaProcess::hand_over, outside the step's
  // protected call.
  const char* find(std::string_view s) const {
    if (s.size() > kMaxLength || !slots_) return nullptr;
    const Key key = key_of(s);
    for (const Slot& slot : slots_->kept)
      if (slot.holds(key)) return slot.text;
    return nullptr;
  }

  // Whether a and b hold the same bytes: up to 16 by two loads from each
  // end, as the keys below are made, with no call; longer ones by memcmp.
  // (operator== calls memcmp for any length: a call on every
  // message where a run of messages compares each topic with the one
  // before.)
  static bool same(std::string_view a, std::string_view b) {
    const std::size_t n = a.size();
    if (n != b.size()) return false;
    const char* p = a.data();
    const char* q = b.data();
    if (n > 16) return std::memcmp(p, q, n) == 0;
    if (n >= 8) return same_ends<std::uint64_t>(p, q, n);
    if (n >= 4) return same_ends<std::uint32_t>(p, q, n);
    if (n >= 2) return same_ends<std::uint16_t>(p, q, n);
    return n == 0 || *p == *q;
  }

  // A message topic: find and push as above for one of up to kMaxLength
  // bytes; a longer one, up to kMaxTopicLength, is kept apart from them
  // (kTopicSlots of its own, so that long strings elsewhere in messages
  // never push a hot topic out, and a stream of new long topics never
  // pushes out a short string), matched by its key and then its bytes.
  // Topics such as "order_status_changed" (over 15 bytes) were made anew for
  // every message, and no message on them was handed over: a ring's hop
  // took more work on a 17-byte topic than on "token" (BENCHMARKS.md's source figures).
  const char* find_topic(std::string_view s) const {
    if (const char* kept = find(s)) return kept;
    if (s.size() <= kMaxLength) return nullptr;
    return find_long(s);
  }
  void push_topic(lua_State* L, std::string_view s) {
    if (s.size() <= kMaxLength) push(L, s);
    else push_long(L, s);
  }
  static constexpr std::size_t kMaxTopicLength = 64;
  static constexpr std::size_t kTopicSlots = 4;

  // Pushes the Lua string of s.
  void push(lua_State* L, std::string_view s) {
    if (s.size() > kMaxLength) {
      lua_pushlstring(L, s.data(), s.size());
      return;
    }
    const Key key = key_of(s);
    if (slots_) {
      for (const Slot& slot : slots_->kept) {
        if (slot.holds(key)) {
          stack_args::push_kept_string(L, slot.text, slot.ref);
          return;
        }
      }
    } else {
      slots_ = std::make_unique<Slots>();
    }
    keep(L, s, slots_->kept[next_]);
    next_ = (next_ + 1) % kSlots;
  }

 private:
  // A string of up to 15 bytes as two words and its length, equal exactly
  // when the strings are: the words are two loads of 8 bytes (or 4, 2, 1)
  // from its start and from its end, which overlap and so cover every
  // byte. A slot is then matched with three compares, where memcmp was
  // a call a slot (BENCHMARKS.md's source figures).
  struct Key {
    std::uint64_t head = 0, tail = 0;
    std::uint32_t size = 0;
  };
  template <typename Word>
  static std::uint64_t load(const char* p) {
    Word w;
    std::memcpy(&w, p, sizeof w);
    return w;
  }
  // Whether the first and last sizeof(Word) of n bytes are the same at p
  // and q (all n when n is at most twice that).
  template <typename Word>
  static bool same_ends(const char* p, const char* q, std::size_t n) {
    return load<Word>(p) == load<Word>(q) && load<Word>(p + n - sizeof(Word)) == load<Word>(q + n - sizeof(Word));
  }
  static Key key_of(std::string_view s) {
    const char* p = s.data();
    const std::size_t n = s.size();
    const auto size = static_cast<std::uint32_t>(n);
    if (n >= 8) return {load<std::uint64_t>(p), load<std::uint64_t>(p + n - 8), size};
    if (n >= 4) return {load<std::uint32_t>(p), load<std::uint32_t>(p + n - 4), size};
    if (n >= 2) return {load<std::uint16_t>(p), load<std::uint16_t>(p + n - 2), size};
    return {n ? load<std::uint8_t>(p) : 0, 0, size};
  }

  // The reference sits in the key's padding; text is the string's bytes
  // (stack_args::push_object pushes it without reading the slot).
  struct Slot {
    std::uint64_t head = 0, tail = 0;
    std::uint32_t size = 0;
    int ref = LUA_NOREF;
    const char* text = nullptr;
    bool holds(const Key& k) const { return head == k.head && tail == k.tail && size == k.size && ref != LUA_NOREF; }
  };
  using TopicSlots = std::array<Slot, kTopicSlots>;
  // Made on the first string kept; the long topics' slots on the first
  // long topic (the object stays two words: LuaProcess's size).
  struct Slots {
    std::array<Slot, kSlots> kept;
    std::unique_ptr<TopicSlots> topics;
    std::uint32_t next_topic = 0;
  };
  // Pushes the Lua string of s and keeps it in slot, in place of what the
  // slot kept.
  static void keep(lua_State* L, std::string_view s, Slot& slot) {
    const Key key = key_of(s);
    lua_pushlstring(L, s.data(), s.size());
    slot.head = key.head;
    slot.tail = key.tail;
    slot.size = key.size;
    slot.text = lua_tostring(L, -1);
    lua_pushvalue(L, -1);
    // A slot takes its registry index when first used: a process that
    // receives few strings adds few registry entries.
    if (slot.ref == LUA_NOREF) slot.ref = luaL_ref(L, LUA_REGISTRYINDEX);
    else lua_rawseti(L, LUA_REGISTRYINDEX, slot.ref);
  }

  // The long topics' slots: a key of more than 16 bytes leaves bytes
  // between its two words unread, so a match is checked against the kept
  // string's bytes too.
  const Slot* long_slot(std::string_view s) const {
    if (s.size() > kMaxTopicLength || !slots_ || !slots_->topics) return nullptr;
    const Key key = key_of(s);
    for (const Slot& slot : *slots_->topics)
      if (slot.holds(key) && std::memcmp(slot.text, s.data(), s.size()) == 0) return &slot;
    return nullptr;
  }
  [[gnu::noinline]] const char* find_long(std::string_view s) const {
    const Slot* slot = long_slot(s);
    return slot ? slot->text : nullptr;
  }
  [[gnu::noinline]] void push_long(lua_State* L, std::string_view s) {
    if (s.size() > kMaxTopicLength) {
      lua_pushlstring(L, s.data(), s.size());
      return;
    }
    if (const Slot* slot = long_slot(s)) {
      stack_args::push_kept_string(L, slot->text, slot->ref);
      return;
    }
    if (!slots_) slots_ = std::make_unique<Slots>();
    if (!slots_->topics) slots_->topics = std::make_unique<TopicSlots>();
    keep(L, s, (*slots_->topics)[slots_->next_topic]);
    slots_->next_topic = (slots_->next_topic + 1) % kTopicSlots;
  }

  std::unique_ptr<Slots> slots_;
  std::uint32_t next_ = 0;  // the slot a miss replaces
};

}  // namespace host::lua

// A process's waits whose completion a C continuation takes (io_wait,
// io_watch in lua_process.hpp), found by tag (the completion, the unwatch
// and the expiry that name one) and by owner (the close that drops all of
// an object's), each in constant time past a few: an HTTP acceptor holds
// one watch per hibernated connection, tens of thousands of them, and
// each event on one looks its wait up. Threads: the one running the process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "host/process.hpp"

struct lua_State;

namespace host::lua {

// A wait's continuation (io_wait, lua_process.hpp).
using IoContinuation = void (*)(lua_State* L, lua_State* co, void* owner, std::uint64_t tag, bool failed,
                               std::string_view payload);

class IoWaits {
 public:
  struct Wait {
    void* owner;
    IoContinuation cont;
    CommandId command;
    bool timer;  // a sleep of the same tag bounds it
    bool watch;  // no task waits (io_watch): its continuation gets no task
  };

  // Tags are unique among the waits held (a poller's tag names one wait
  // on its slot, a call tag one call).
  void add(std::uint64_t tag, const Wait& w) {
    if (!hashed_ && few_.size() < kFew) {
      few_.push_back(Entry{tag, w});
      return;
    }
    if (!hashed_) rehash();
    // Both or neither: a wait found by tag but not by owner would outlive
    // its owner's forget.
    auto it = by_tag_.emplace(tag, w).first;
    try {
      by_owner_.emplace(w.owner, tag);
    } catch (...) {
      by_tag_.erase(it);
      throw;
    }
  }

  // The wait of tag, or null; good until the next change.
  const Wait* find(std::uint64_t tag) const {
    if (!hashed_) {
      for (const Entry& e : few_)
        if (e.tag == tag) return &e.wait;
      return nullptr;
    }
    auto it = by_tag_.find(tag);
    return it == by_tag_.end() ? nullptr : &it->second;
  }

  // Takes the wait of tag out into *out; false where there is none.
  bool take(std::uint64_t tag, Wait* out) {
    if (!hashed_) {
      for (auto it = few_.begin(); it != few_.end(); ++it)
        if (it->tag == tag) {
          *out = it->wait;
          few_.erase(it);
          return true;
        }
      return false;
    }
    auto it = by_tag_.find(tag);
    if (it == by_tag_.end()) return false;
    *out = it->second;
    by_tag_.erase(it);
    // An owner holds a few waits at once at most (a connection: its read
    // watch and its idle sleep): this range is short.
    auto [b, e] = by_owner_.equal_range(out->owner);
    for (; b != e; ++b)
      if (b->second == tag) {
        by_owner_.erase(b);
        break;
      }
    return true;
  }

  // Drops every wait of owner (its yields are left to end by themselves).
  void forget(void* owner) {
    if (!hashed_) {
      std::erase_if(few_, [owner](const Entry& e) { return e.wait.owner == owner; });
      return;
    }
    auto [b, e] = by_owner_.equal_range(owner);
    if (b == e) return;
    for (auto it = b; it != e; ++it) by_tag_.erase(it->second);
    by_owner_.erase(b, e);
  }

  std::size_t size() const { return hashed_ ? by_tag_.size() : few_.size(); }
  bool hashed() const { return hashed_; }

  // Past this many waits at once, the two indexes; below it a short
  // vector searched in turn, as most processes hold one or two waits (a
  // socket's read) and the indexes' tables would cost each of them a few
  // hundred bytes it keeps while idle.
  static constexpr std::size_t kFew = 16;

 private:
  struct Entry {
    std::uint64_t tag;
    Wait wait;
  };

  // Once: a process that held many waits (an acceptor) keeps the indexes.
  void rehash() {
    for (const Entry& e : few_) {
      by_tag_.emplace(e.tag, e.wait);
      by_owner_.emplace(e.wait.owner, e.tag);
    }
    hashed_ = true;
    few_.clear();
    few_.shrink_to_fit();
  }

  std::vector<Entry> few_;
  bool hashed_ = false;
  std::unordered_map<std::uint64_t, Wait> by_tag_;
  std::unordered_multimap<void*, std::uint64_t> by_owner_;
};

}  // namespace host::lua

// A process's waits whose completion a C continuation takes (io_wait,
// io_watch in lua_process.hpp), found by tag (the completion, the unwatch
// and the expiry that name one) and by owner (the close that drops all of
// an object's). Threads: the one running the process.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>
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
  void add(std::uint64_t tag, const Wait& w) { w_.push_back(Entry{tag, w}); }
  // The wait of tag, or null; good until the next change.
  const Wait* find(std::uint64_t tag) const {
    auto it = std::find_if(w_.begin(), w_.end(), [tag](const Entry& e) { return e.tag == tag; });
    return it == w_.end() ? nullptr : &it->wait;
  }
  // Takes the wait of tag out into *out; false where there is none.
  bool take(std::uint64_t tag, Wait* out) {
    auto it = std::find_if(w_.begin(), w_.end(), [tag](const Entry& e) { return e.tag == tag; });
    if (it == w_.end()) return false;
    *out = it->wait;
    w_.erase(it);
    return true;
  }
  // Drops every wait of owner (its yields are left to end by themselves).
  void forget(void* owner) {
    w_.erase(std::remove_if(w_.begin(), w_.end(), [owner](const Entry& e) { return e.wait.owner == owner; }), w_.end());
  }
  std::size_t size() const { return w_.size(); }

 private:
  struct Entry {
    std::uint64_t tag;
    Wait wait;
  };
  std::vector<Entry> w_;
};

}  // namespace host::lua

// The tasks of a process that wait in calls, by the call's tag
// (TaskKernel::block_in_call, docs/ARCHITECTURE.md "A call that waits").
// Each wait adds a tag and its completion takes it: a fresh tag a wait,
// so held as Lua table keys they made the table rehash at nearly every
// wait (a key that only grows, set then cleared), a socket's every read
// that had to wait (BENCHMARKS.md, "A keep-alive request's cost,
// continued"). The tasks themselves stay alive in the kernel's tasks table
// while they wait (a task in a call is suspended, never finished): this
// holds their lua_State pointers only. Found in constant time past a few,
// as IoWaits (bindings/io_waits.hpp) does: most processes wait in one or
// two calls at once. Threads: the one running the process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

struct lua_State;

namespace host::lua {

class CallTasks {
 public:
  // Tags are unique among those held (a call tag names one call).
  void add(std::uint64_t tag, lua_State* co) {
    if (!many_ && few_.size() < kFew) {
      few_.push_back(Entry{tag, co});
      return;
    }
    if (!many_) rehash();
    (*many_)[tag] = co;
  }

  // The task that waits on tag, no longer held; nullptr where none does.
  lua_State* take(std::uint64_t tag) {
    if (!many_) {
      for (auto it = few_.begin(); it != few_.end(); ++it)
        if (it->tag == tag) {
          lua_State* co = it->co;
          few_.erase(it);
          return co;
        }
      return nullptr;
    }
    auto it = many_->find(tag);
    if (it == many_->end()) return nullptr;
    lua_State* co = it->second;
    many_->erase(it);
    return co;
  }

  // Every wait dropped (process.upgrade drops the tasks).
  void clear() {
    few_.clear();
    if (many_) many_->clear();
  }

  std::size_t size() const { return many_ ? many_->size() : few_.size(); }
  bool hashed() const { return many_ != nullptr; }

  // Past this many at once, the map; below it a short vector searched in
  // turn, which costs an idle process no table of its own (and every
  // process, here in its LuaProcess, a vector and a pointer).
  static constexpr std::size_t kFew = 16;

 private:
  struct Entry {
    std::uint64_t tag;
    lua_State* co;
  };

  // Once: a process that held many (a fan-out of calls) keeps the map.
  // The map is filled before it is kept, so a bad_alloc part way leaves
  // every wait still in the vector.
  void rehash() {
    auto many = std::make_unique<std::unordered_map<std::uint64_t, lua_State*>>();
    many->reserve(2 * kFew);
    for (const Entry& e : few_) many->emplace(e.tag, e.co);
    many_ = std::move(many);
    few_.clear();
    few_.shrink_to_fit();
  }

  std::vector<Entry> few_;
  std::unique_ptr<std::unordered_map<std::uint64_t, lua_State*>> many_;
};

}  // namespace host::lua

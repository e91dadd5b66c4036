// bindings/call_tasks.hpp: a waiting call's task is found by its tag once,
// until the call is mapped again, below and past the few the vector holds,
// and clear (an upgrade) drops them all.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "bindings/call_tasks.hpp"

using host::lua::CallTasks;

namespace {

// Stand-ins for tasks: only their addresses are held.
lua_State* task(std::vector<char>& pool, std::size_t i) { return reinterpret_cast<lua_State*>(&pool[i]); }

void check_waits(std::size_t n) {
  std::vector<char> pool(n + 1);
  CallTasks calls;
  for (std::size_t i = 0; i < n; ++i) calls.add(100 + i, task(pool, i));
  CHECK(calls.size() == n);
  CHECK(calls.hashed() == (n > CallTasks::kFew));
  CHECK(calls.take(99) == nullptr);  // no such call
  // Every other one completes; each is found once, and the rest stay.
  for (std::size_t i = 0; i < n; i += 2) CHECK(calls.take(100 + i) == task(pool, i));
  for (std::size_t i = 0; i < n; i += 2) CHECK(calls.take(100 + i) == nullptr);
  CHECK(calls.size() == n / 2);
  // A task that waits again under a new tag (io_rewait) is found there.
  if (n > 1) {
    REQUIRE(calls.take(101) == task(pool, 1));
    calls.add(100 + n, task(pool, 1));
    CHECK(calls.take(101) == nullptr);
    CHECK(calls.take(100 + n) == task(pool, 1));
  }
  for (std::size_t i = 3; i < n; i += 2) CHECK(calls.take(100 + i) == task(pool, i));
  CHECK(calls.size() == 0);
}

}  // namespace

TEST_CASE("call_tasks: a task waiting on a tag is taken once, with a few and with many") {
  check_waits(1);
  check_waits(CallTasks::kFew);
  check_waits(CallTasks::kFew + 1);
  check_waits(10 * CallTasks::kFew);
}

TEST_CASE("call_tasks: clear drops every wait, and new ones are found after it") {
  for (std::size_t n : {std::size_t{3}, CallTasks::kFew * 2}) {
    std::vector<char> pool(n + 1);
    CallTasks calls;
    for (std::size_t i = 0; i < n; ++i) calls.add(i + 1, task(pool, i));
    calls.clear();
    CHECK(calls.size() == 0);
    for (std::size_t i = 0; i < n; ++i) CHECK(calls.take(i + 1) == nullptr);
    calls.add(7, task(pool, n));
    CHECK(calls.take(7) == task(pool, n));
  }
}

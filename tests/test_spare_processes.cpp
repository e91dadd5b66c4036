// Spare processes (bindings/spare_processes.hpp): made ahead of spawns with
// the last spawn's module loaded; a spawn takes one that loaded its own
// module before any that loaded another, whatever their order.
#include <doctest/doctest.h>

#include "bindings/lua_process.hpp"
#include "bindings/lua_runtime.hpp"
#include "bindings/spare_processes.hpp"
#include "tests/watchdog.hpp"

using namespace host;
using namespace std::chrono_literals;

TEST_CASE("a spawn takes the spare that loaded its module, though newer spares loaded another") {
  testing::Watchdog dog{"spare processes", 60s};
  Scheduler s{{.workers = 1}};
  lua::LuaRuntime rt{s, {.dir = HOST_TEST_SCRIPTS}};
  // Its own list, beside the runtime's: only this test makes and takes them.
  lua::SpareProcesses spares(rt);
  CHECK(spares.take("fixtures.echo") == nullptr);  // none yet: a few are wanted now, with echo
  REQUIRE(spares.make_one());
  REQUIRE(spares.make_one());
  auto first = spares.take("fixtures.idle");  // none loaded idle: the newest, and idle from now on
  REQUIRE(first != nullptr);
  CHECK(first->preloaded("fixtures.echo"));
  REQUIRE(spares.make_one());
  REQUIRE(spares.make_one());
  // Left: one that loaded echo, then two that loaded idle.
  auto echo = spares.take("fixtures.echo");
  REQUIRE(echo != nullptr);
  CHECK(echo->preloaded("fixtures.echo"));
  auto idle = spares.take("fixtures.idle");
  REQUIRE(idle != nullptr);
  CHECK(idle->preloaded("fixtures.idle"));
  // No spare loaded echo now: the newest is taken all the same.
  auto other = spares.take("fixtures.echo");
  REQUIRE(other != nullptr);
  CHECK(other->preloaded("fixtures.idle"));
  CHECK(spares.take("fixtures.echo") == nullptr);
}

TEST_CASE("misses double the spares wanted; each spawn that finds one lowers it again, to the first target") {
  testing::Watchdog dog{"spare processes", 60s};
  Scheduler s{{.workers = 1}};
  lua::LuaRuntime rt{s, {.dir = HOST_TEST_SCRIPTS}};
  lua::SpareProcesses spares(rt);
  const std::size_t first = lua::SpareProcesses::kFirstTarget;
  for (int i = 0; i < 3; ++i) CHECK(spares.take("fixtures.idle") == nullptr);  // wanted: 4, 8, 16
  std::size_t made = 0;
  while (spares.make_one()) ++made;
  CHECK(made == 4 * first);
  // Twelve spawns find one each: 16 - 12 wanted, and 4 are left, so none
  // is made again.
  for (std::size_t i = 0; i < 3 * first; ++i) CHECK(spares.take("fixtures.idle") != nullptr);
  CHECK_FALSE(spares.make_one());
  // Never below the first target: spawns that take the rest leave it at 4.
  for (std::size_t i = 0; i < first; ++i) CHECK(spares.take("fixtures.idle") != nullptr);
  for (std::size_t i = 0; i < first; ++i) CHECK(spares.make_one());
  CHECK_FALSE(spares.make_one());
}

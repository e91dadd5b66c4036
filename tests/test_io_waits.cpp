// bindings/io_waits.hpp: a wait is found by its tag until it is taken or
// its owner forgotten, and a change to one owner's waits leaves every
// other's as it was (the tag and owner indices stay one record).
#include <doctest/doctest.h>

#include <cstdint>

#include "bindings/io_waits.hpp"

using host::lua::IoWaits;

namespace {

void cont(lua_State*, lua_State*, void*, std::uint64_t, bool, std::string_view) {}

IoWaits::Wait wait_of(void* owner, host::CommandId command) { return IoWaits::Wait{owner, cont, command, false, false}; }

}  // namespace

void check_take_and_forget(IoWaits& waits, std::size_t base) {
  char a, b, c;
  waits.add(1, wait_of(&a, 10));
  waits.add(2, wait_of(&a, 20));  // an owner with two waits (a connection's watch and its sleep)
  waits.add(3, wait_of(&b, 30));
  waits.add(4, wait_of(&c, 40));
  REQUIRE(waits.size() == base + 4);
  REQUIRE(waits.find(2) != nullptr);
  CHECK(waits.find(2)->owner == &a);
  CHECK(waits.find(2)->command == 20);
  CHECK(waits.find(5) == nullptr);

  IoWaits::Wait got{};
  CHECK(waits.take(1, &got));
  CHECK(got.owner == &a);
  CHECK(got.command == 10);
  CHECK_FALSE(waits.take(1, &got));
  CHECK(waits.find(1) == nullptr);
  CHECK(waits.size() == base + 3);

  // Forgetting a's waits drops its other one, not b's or c's; an owner
  // with none changes nothing.
  waits.forget(&a);
  CHECK(waits.find(2) == nullptr);
  CHECK(waits.size() == base + 2);
  waits.forget(&a);
  CHECK(waits.size() == base + 2);

  // A wait taken by tag is no longer its owner's: forgetting that owner
  // later leaves alone a wait of another's that came with the same tag.
  CHECK(waits.take(3, &got));
  waits.add(3, wait_of(&c, 50));
  waits.forget(&b);
  REQUIRE(waits.find(3) != nullptr);
  CHECK(waits.find(3)->owner == &c);
  CHECK(waits.size() == base + 2);
  waits.forget(&c);
  CHECK(waits.find(3) == nullptr);
  CHECK(waits.find(4) == nullptr);
  CHECK(waits.size() == base + 0);
}

TEST_CASE("io_waits: a wait taken by tag or forgotten with its owner is gone, and only it") {
  SUBCASE("a few waits: the short vector") {
    IoWaits waits;
    check_take_and_forget(waits, 0);
    CHECK_FALSE(waits.hashed());
  }
  SUBCASE("many waits: the two indexes, the few before them carried over") {
    IoWaits waits;
    char other;
    for (std::uint64_t t = 0; t < IoWaits::kFew; ++t) waits.add(1000 + t, wait_of(&other, 1000 + t));
    CHECK_FALSE(waits.hashed());
    check_take_and_forget(waits, IoWaits::kFew);
    CHECK(waits.hashed());
    REQUIRE(waits.find(1000) != nullptr);
    CHECK(waits.find(1000)->command == 1000);
    waits.forget(&other);
    CHECK(waits.size() == 0);
  }
}

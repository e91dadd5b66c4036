// Tests of PID rendering and parsing (host/pid.hpp).
#include <doctest/doctest.h>

#include <string>

#include "host/pid.hpp"

using host::Pid;

TEST_CASE("a PID renders like Erlang's and parses back") {
  Pid p{0, 84, 3};
  CHECK(p.to_string() == "<0.84.3>");
  auto back = Pid::parse("<0.84.3>");
  REQUIRE(back.has_value());
  CHECK(*back == p);
  CHECK(Pid::parse("<2.4294967295.1>")->index == 4294967295u);
}

TEST_CASE("the largest PID fits the formatting buffer and round-trips") {
  Pid big{4294967295u, 4294967295u, 4294967295u};
  char buf[Pid::kMaxText];
  std::size_t n = big.format(buf);
  CHECK(n == Pid::kMaxText - 2);  // 3 x 10 digits, two dots, two brackets
  CHECK(std::string(buf, n) == "<4294967295.4294967295.4294967295>");
  CHECK(*Pid::parse(big.to_string()) == big);
}

TEST_CASE("a PID of generation 0 is well formed and names no process") {
  // Erlang's PIDs end in 0 ("<0.84.0>"): one written by hand parses, and
  // the process it names is never found (sends answer not_found).
  auto p = Pid::parse("<0.84.0>");
  REQUIRE(p.has_value());
  CHECK(p->index == 84);
  CHECK_FALSE(p->valid());
}

TEST_CASE("malformed PID strings are refused") {
  for (const char* bad : {"", "<>", "<0.1>", "0.1.1", "<0.1.1", "<0.1.1>x", "<0.x.1>", "<-1.1.1>",
                          "<0.1.1.1>", "<0.99999999999.1>", "< 0.1.1>", "<0.0.01>", "<00.0.1>", "<0.01.1>",
                          "<+0.1.1>"})
    CHECK_MESSAGE(!Pid::parse(bad).has_value(), bad);
}

// Tests of a step's output (host/process.hpp's StepOutput): taking back a
// yield the step added.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "host/config.hpp"
#include "host/process.hpp"

using host::StepOutput;

namespace {

std::vector<std::uint64_t> tags(StepOutput& out) {
  std::vector<std::uint64_t> t;
  for (std::size_t i = 0; i < out.yield_count(); ++i) t.push_back(out.yield_at(i).tag);
  return t;
}

}  // namespace

TEST_CASE("a yield taken back in its step is gone; the others keep their order") {
  StepOutput out;
  const std::uint64_t n = host::config::kInlineYields + 3;  // some spill past the inline ones
  for (std::uint64_t t = 1; t <= n; ++t) out.add_yield(7, t);
  CHECK(out.drop_yield(7, 2));
  CHECK(out.drop_yield(7, n));
  CHECK_FALSE(out.drop_yield(7, 2));  // once
  CHECK_FALSE(out.drop_yield(8, 3));  // another command's tag is not it
  std::vector<std::uint64_t> want;
  for (std::uint64_t t = 1; t < n; ++t)
    if (t != 2) want.push_back(t);
  CHECK(tags(out) == want);
  CHECK(out.cancels().empty());
}

TEST_CASE("a step whose only yield was taken back leaves nothing to dispatch") {
  StepOutput out;
  out.add_yield(7, 1);
  CHECK(out.has_commands());
  CHECK(out.drop_yield(7, 1));
  CHECK_FALSE(out.has_commands());
}

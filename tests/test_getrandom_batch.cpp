// take_batched_random: kernel randomness for LuaJIT's per-state seeds,
// served from a per-thread batch (host/getrandom_batch.hpp).
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "host/getrandom_batch.hpp"

namespace {

using Seed = std::array<unsigned char, 32>;

Seed take() {
  Seed s{};
  REQUIRE(host::take_batched_random(s.data(), s.size()));
  return s;
}

}  // namespace

TEST_CASE("batched random: every request gets bytes no other request got, across refills") {
  // 500 x 32 bytes is about four batches of 4 KB: refills included.
  std::set<Seed> seen;
  for (int i = 0; i < 500; ++i) {
    Seed s = take();
    CHECK(s != Seed{});
    CHECK(seen.insert(s).second);
  }
}

TEST_CASE("batched random: sizes up to 256 bytes, larger ones left to the kernel") {
  std::vector<unsigned char> buf(300, 0xAB);
  CHECK(host::take_batched_random(buf.data(), 0));
  CHECK(host::take_batched_random(buf.data(), 1));
  CHECK(host::take_batched_random(buf.data(), 256));
  std::fill(buf.begin(), buf.end(), 0xAB);
  CHECK_FALSE(host::take_batched_random(buf.data(), 257));
  CHECK(std::all_of(buf.begin(), buf.end(), [](unsigned char c) { return c == 0xAB; }));  // untouched
}

TEST_CASE("batched random: threads take from their own batches, never the same bytes") {
  constexpr int kThreads = 4, kEach = 200;
  std::vector<std::vector<Seed>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&got, t] {
      for (int i = 0; i < kEach; ++i) {
        Seed s{};
        if (host::take_batched_random(s.data(), s.size())) got[t].push_back(s);
      }
    });
  for (auto& th : threads) th.join();
  std::set<Seed> all;
  for (const auto& v : got) {
    CHECK(v.size() == kEach);
    all.insert(v.begin(), v.end());
  }
  CHECK(all.size() == kThreads * kEach);
}

TEST_CASE("batched random: a forked child does not hand out its parent's next bytes") {
  (void)take();  // the batch now holds bytes the parent hands out next
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    Seed s{};
    bool ok = host::take_batched_random(s.data(), s.size());
    ssize_t w = ok ? write(fds[1], s.data(), s.size()) : 0;
    _exit(w == static_cast<ssize_t>(s.size()) ? 0 : 1);
  }
  close(fds[1]);
  Seed from_child{};
  ssize_t r = read(fds[0], from_child.data(), from_child.size());
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  REQUIRE(r == static_cast<ssize_t>(from_child.size()));
  CHECK(take() != from_child);
}

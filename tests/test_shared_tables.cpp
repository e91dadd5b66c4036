// host/io/shared_tables.hpp: the calls' results, then threads on
// overlapping keys checking that no update is lost or doubled.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "host/io/shared_tables.hpp"
#include "host/io/value_format.hpp"
#include "tests/watchdog.hpp"

namespace {

using host::io::SharedTable;
using host::io::SharedTables;
using Status = SharedTable::Status;
using Mode = SharedTable::Mode;

std::string num(double d) {
  char buf[16];
  return std::string(buf, host::encode_number(d, buf));
}

template <typename F>
void in_threads(int n, F f) {
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) threads.emplace_back(f, i);
  for (auto& t : threads) t.join();
}

}  // namespace

TEST_CASE("shared table: store modes, incr, cas, keys, eviction") {
  SharedTable t(0);
  std::string out;
  CHECK_FALSE(t.get("k", out));
  CHECK(t.store("k", "v1", 0, Mode::kAdd) == Status::kOk);
  CHECK(t.store("k", "v2", 0, Mode::kAdd) == Status::kExists);
  CHECK(t.store("x", "v", 0, Mode::kReplace) == Status::kNotFound);
  CHECK(t.store("k", "v3", 0, Mode::kReplace) == Status::kOk);
  CHECK(t.get("k", out));
  CHECK(out == "v3");
  double r = 0;
  CHECK(t.incr("n", 1, std::nullopt, 0, &r) == Status::kNotFound);
  CHECK(t.incr("n", 2, 40.0, 0, &r) == Status::kOk);
  CHECK(r == 42);
  CHECK(t.incr("k", 1, std::nullopt, 0, &r) == Status::kNotNumber);
  CHECK(t.cas("n", num(41), num(0)) == Status::kChanged);
  CHECK(t.cas("n", num(42), num(0)) == Status::kOk);
  CHECK(t.cas("none", num(0), num(1)) == Status::kNotFound);
  CHECK(t.size() == 2);
  CHECK(t.keys(1).size() == 1);
  CHECK(t.erase("k"));
  CHECK_FALSE(t.erase("k"));
  t.flush();
  CHECK(t.size() == 0);

  SharedTable small(30);
  CHECK(small.store("a", std::string(9, 'x'), 0, Mode::kSet) == Status::kOk);
  CHECK(small.store("b", std::string(9, 'x'), 0, Mode::kSet) == Status::kOk);
  CHECK(small.store("c", std::string(9, 'x'), 0, Mode::kSet) == Status::kOk);
  CHECK(small.get("a", out));  // b is now the oldest
  CHECK(small.store("d", std::string(9, 'x'), 0, Mode::kSet) == Status::kOk);
  CHECK_FALSE(small.get("b", out));
  CHECK(small.get("a", out));
  CHECK(small.store("big", std::string(40, 'x'), 0, Mode::kSet) == Status::kTooLarge);

  // A table of several shards takes an entry of up to its whole
  // max_bytes, evicting other shards' entries to make room.
  SharedTable sharded(4u << 20);
  CHECK(sharded.shard_count() > 1);
  for (int i = 0; i < 100; ++i)
    CHECK(sharded.store("k" + std::to_string(i), std::string(10000, 'x'), 0, Mode::kSet) == Status::kOk);
  CHECK(sharded.store("huge", std::string(3u << 20, 'x'), 0, Mode::kSet) == Status::kOk);
  CHECK(sharded.get("huge", out));
  CHECK(out.size() == 3u << 20);
  std::size_t total = 0;
  for (const auto& k : sharded.keys(0))
    if (sharded.get(k, out)) total += k.size() + out.size();
  CHECK(total <= 4u << 20);
  CHECK(sharded.store("too big", std::string((4u << 20) + 1, 'x'), 0, Mode::kSet) == Status::kTooLarge);

  SharedTable ttl(0);
  CHECK(ttl.store("t", "v", 0.01, Mode::kSet) == Status::kOk);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  CHECK_FALSE(ttl.get("t", out));
  CHECK(ttl.size() == 0);

  std::string err;
  SharedTable* a = SharedTables::instance().open("core_test", 1024, &err);
  CHECK(a != nullptr);
  CHECK(SharedTables::instance().open("core_test", std::nullopt, &err) == a);
  CHECK(SharedTables::instance().open("core_test", 2048, &err) == nullptr);
  CHECK(err.rfind("invalid: ", 0) == 0);
}

TEST_CASE("shared table stress: no lost or doubled updates") {
  host::testing::Watchdog watchdog("shared table stress", std::chrono::seconds(120));
  constexpr int kThreads = 8;
  const int rounds = host::testing::scaled(20000);
  SharedTable t(0);

  // incr on four keys every thread shares.
  in_threads(kThreads, [&](int) {
    double r;
    for (int i = 0; i < rounds; ++i) t.incr("c" + std::to_string(i % 4), 1, 0.0, 0, &r);
  });
  double total = 0;
  for (int k = 0; k < 4; ++k) {
    std::string out;
    REQUIRE(t.get("c" + std::to_string(k), out));
    double r;
    REQUIRE(t.incr("c" + std::to_string(k), 0, std::nullopt, 0, &r) == Status::kOk);
    total += r;
  }
  CHECK(total == static_cast<double>(kThreads) * rounds);

  // add as a lock: one holder at a time, every thread getting it `turns` times.
  const int turns = rounds / 20;
  std::atomic<int> holders{0};
  std::atomic<int> overlaps{0};
  std::atomic<long> acquired{0};
  in_threads(kThreads, [&](int id) {
    for (int got = 0; got < turns;) {
      if (t.store("lock", std::to_string(id), 0, Mode::kAdd) != Status::kOk) continue;
      if (holders.fetch_add(1) != 0) overlaps.fetch_add(1);
      holders.fetch_sub(1);
      ++got;
      acquired.fetch_add(1);
      REQUIRE(t.erase("lock"));
    }
  });
  CHECK(overlaps.load() == 0);
  CHECK(acquired.load() == static_cast<long>(kThreads) * turns);

  // cas loops: each success is one increment.
  REQUIRE(t.store("cas", num(0), 0, Mode::kSet) == Status::kOk);
  const int cas_rounds = rounds / 10;
  in_threads(kThreads, [&](int) {
    std::string cur;
    for (int i = 0; i < cas_rounds;) {
      REQUIRE(t.get("cas", cur));
      double r;
      // Read the number through incr by 0 (atomic, no change), then try to swap it.
      REQUIRE(t.incr("cas", 0, std::nullopt, 0, &r) == Status::kOk);
      if (t.cas("cas", num(r), num(r + 1)) == Status::kOk) ++i;
    }
  });
  double r;
  REQUIRE(t.incr("cas", 0, std::nullopt, 0, &r) == Status::kOk);
  CHECK(r == static_cast<double>(kThreads) * cas_rounds);

  // A small table under eviction: every value read is its key's, and the
  // table stays within its bytes.
  SharedTable lru(2048);
  std::atomic<int> wrong{0};
  in_threads(kThreads, [&](int id) {
    std::string out;
    for (int i = 0; i < rounds; ++i) {
      const std::string key = "k" + std::to_string((i * 7 + id) % 300);
      if (i % 3 == 0) lru.store(key, key + "-value", 0, Mode::kSet);
      else if (lru.get(key, out) && out != key + "-value") wrong.fetch_add(1);
      if (i % 97 == 0) lru.erase(key);
    }
  });
  CHECK(wrong.load() == 0);
  std::size_t bytes = 0;
  for (const auto& k : lru.keys(0)) {
    std::string out;
    if (lru.get(k, out)) bytes += k.size() + out.size();
  }
  CHECK(bytes <= 2048);
}

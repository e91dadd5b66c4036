// Shared tables (docs/LUA_API.md, shared): named key-value tables that
// every process of the host reads and writes directly, without messages.
// Lua-free: keys and values arrive as bytes (the bindings encode a value
// with the codec before calling in and decode it after, so no lock is held
// while Lua runs). Threads: any; each call is atomic.
//
// A table is split into shards by the key's hash, each under its own
// mutex, so that calls on different keys (reads included) do not queue
// behind one lock. Each shard keeps its entries in least-recently-used
// order; the table counts its bytes across shards, and a write that puts
// it over max_bytes evicts its own shard's oldest first, then other
// shards'. Expiry is checked lazily, when an entry is met, against the
// monotonic clock.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace host::io {

class SharedTable {
 public:
  enum class Status { kOk, kExists, kNotFound, kChanged, kTooLarge, kNotNumber };
  enum class Mode { kSet, kAdd, kReplace };
  // No limit: max_bytes 0.
  explicit SharedTable(std::size_t max_bytes);
  ~SharedTable();
  SharedTable(const SharedTable&) = delete;
  SharedTable& operator=(const SharedTable&) = delete;

  std::size_t max_bytes() const { return max_bytes_; }
  std::size_t shard_count() const { return shard_count_; }
  // The most bytes (key + value) one entry may take: max_bytes.
  std::size_t entry_limit() const;

  // Copies the value's bytes into out; false when the key is missing or
  // expired. Counts as a use for the LRU order.
  bool get(std::string_view key, std::string& out);
  // set, add or replace; ttl in seconds, <= 0 never expires.
  Status store(std::string_view key, std::string_view value, double ttl, Mode mode);
  bool erase(std::string_view key);
  // Adds n to the number stored at key. A missing key becomes init + n
  // (with ttl) when init is given, else kNotFound; a value that is not a
  // number is kNotNumber. *result is the new value.
  Status incr(std::string_view key, double n, std::optional<double> init, double ttl, double* result);
  // Replaces the value by new_value when its bytes are old_value's.
  Status cas(std::string_view key, std::string_view old_value, std::string_view new_value);
  // Up to limit (0: all) live keys, in no particular order.
  std::vector<std::string> keys(std::size_t limit);
  std::size_t size();
  void flush();

 private:
  template <typename Fn>
  void each_live(Fn&& fn);
  struct Shard;
  Shard& shard_of(std::string_view key);
  void evict_elsewhere(const Shard& own);
  void settle(const Shard& own);
  std::atomic<std::size_t> total_{0};
  std::size_t max_bytes_;
  std::size_t shard_count_;
  std::unique_ptr<Shard[]> shards_;
};

// The host's tables by name. A table lives as long as the program: a
// process that opened one may hold its pointer without a count.
class SharedTables {
 public:
  static SharedTables& instance();
  // Opens the table `name`, making it with max_bytes (nullopt: no limit)
  // when it does not exist. Null with *error when it exists with another
  // max_bytes.
  SharedTable* open(std::string_view name, std::optional<std::size_t> max_bytes, std::string* error);

 private:
  struct Impl;
  Impl* impl_;
  SharedTables();
};

}  // namespace host::io

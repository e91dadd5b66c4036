#include "host/io/shared_tables.hpp"

#include <atomic>
#include <chrono>
#include <cstring>
#include <list>
#include <mutex>
#include <unordered_map>

#include "host/io/value_format.hpp"

namespace host::io {

namespace {

using Clock = std::chrono::steady_clock;

// The most shards a table has; one per MiB of max_bytes below that, so
// that a small table keeps one exact LRU order.
constexpr std::size_t kMaxShards = 32;
constexpr std::size_t kBytesPerShard = std::size_t{1} << 20;

std::size_t shards_for(std::size_t max_bytes) {
  if (max_bytes == 0) return kMaxShards;
  std::size_t n = 1;
  while (n < kMaxShards && (n * 2) * kBytesPerShard <= max_bytes) n *= 2;
  return n;
}

Clock::time_point expiry_of(double ttl) {
  if (!(ttl > 0)) return Clock::time_point::max();
  // Past about 290 years the duration would overflow: such a ttl never expires.
  if (ttl > 9e9) return Clock::time_point::max();
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(ttl));
}

// The number a value's bytes encode (encode_number's form), if they do.
std::optional<double> number_of(std::string_view bytes) {
  if (bytes.size() < 3 || bytes[0] != 1) return std::nullopt;
  const auto tag = static_cast<std::uint8_t>(bytes[1]);
  const char* p = bytes.data() + 2;
  const char* end = bytes.data() + bytes.size();
  if (tag == kInt) {
    std::uint64_t z;
    if (read_varint(p, end, z) != Varint::kOk || p != end) return std::nullopt;
    return static_cast<double>(unzigzag(z));
  }
  if (tag == kDouble && bytes.size() == 10) {
    double d;
    std::memcpy(&d, p, 8);
    return d;
  }
  return std::nullopt;
}

std::string number_bytes(double d) {
  char buf[16];
  return std::string(buf, encode_number(d, buf));
}

}  // namespace

struct Item {
  std::string key;
  std::string value;
  Clock::time_point expires;
  std::size_t bytes() const { return key.size() + value.size(); }
};

// Aligned apart so that two workers on neighbouring shards do not share
// a cache line for their locks.
struct alignas(64) SharedTable::Shard {
  std::mutex mu;
  std::list<Item> lru;  // front: the most recently used
  // Views of the keys in lru's nodes, which never move.
  std::unordered_map<std::string_view, std::list<Item>::iterator> index;
  std::size_t bytes = 0;  // this shard's part of *total
  std::atomic<std::size_t>* total = nullptr;  // the table's bytes, every shard's
  std::size_t budget = 0;  // the table's max_bytes; 0: no limit

  void grow(std::size_t n) {
    bytes += n;
    total->fetch_add(n, std::memory_order_relaxed);
  }
  void shrink(std::size_t n) {
    bytes -= n;
    total->fetch_sub(n, std::memory_order_relaxed);
  }
  bool over() const { return budget != 0 && total->load(std::memory_order_relaxed) > budget; }
  void drop(std::list<Item>::iterator it) {
    shrink(it->bytes());
    index.erase(std::string_view(it->key));
    lru.erase(it);
  }
  // The live entry at key (an expired one is dropped on the way), or end.
  std::list<Item>::iterator find(std::string_view key, Clock::time_point now) {
    auto f = index.find(key);
    if (f == index.end()) return lru.end();
    auto it = f->second;
    if (it->expires <= now) {
      drop(it);
      return lru.end();
    }
    return it;
  }
  // Only a table with a limit keeps the order: without one nothing is
  // evicted, and a get then writes nothing but the lock.
  void touch(std::list<Item>::iterator it) {
    if (budget != 0 && it != lru.begin()) lru.splice(lru.begin(), lru, it);
  }
  // Evicts from the back while the table is over its budget, never the
  // front entry (the one just written); the table's other shards give
  // way next (evict_elsewhere) when this one has nothing more.
  void evict() {
    while (over() && lru.size() > 1) drop(std::prev(lru.end()));
  }
  void insert(std::string_view key, std::string_view value, Clock::time_point expires) {
    lru.push_front(Item{std::string(key), std::string(value), expires});
    index.emplace(std::string_view(lru.front().key), lru.begin());
    grow(lru.front().bytes());
    evict();
  }
  void update(std::list<Item>::iterator it, std::string_view value) {
    shrink(it->value.size());
    it->value.assign(value);
    grow(it->value.size());
    touch(it);
    evict();
  }
};

SharedTable::SharedTable(std::size_t max_bytes)
    : max_bytes_(max_bytes), shard_count_(shards_for(max_bytes)), shards_(new Shard[shard_count_]) {
  for (std::size_t i = 0; i < shard_count_; ++i) {
    shards_[i].budget = max_bytes;
    shards_[i].total = &total_;
  }
}

// After a write left the table over max_bytes with nothing more to evict
// in its own shard (a large entry): the other shards' oldest go, one
// shard's lock at a time, so no two locks are ever held together.
void SharedTable::evict_elsewhere(const Shard& own) {
  for (std::size_t i = 0; i < shard_count_ && total_.load(std::memory_order_relaxed) > max_bytes_; ++i) {
    Shard& s = shards_[i];
    if (&s == &own) continue;
    std::lock_guard lock(s.mu);
    while (s.over() && !s.lru.empty()) s.drop(std::prev(s.lru.end()));
  }
}

void SharedTable::settle(const Shard& own) {
  if (max_bytes_ != 0 && total_.load(std::memory_order_relaxed) > max_bytes_) evict_elsewhere(own);
}

SharedTable::~SharedTable() = default;

std::size_t SharedTable::entry_limit() const {
  return max_bytes_ == 0 ? SIZE_MAX : max_bytes_;
}

SharedTable::Shard& SharedTable::shard_of(std::string_view key) {
  // shard_count_ is a power of two; the hash's high bits mix better.
  const std::size_t h = std::hash<std::string_view>{}(key);
  return shards_[(h ^ (h >> 29)) & (shard_count_ - 1)];
}

bool SharedTable::get(std::string_view key, std::string& out) {
  Shard& s = shard_of(key);
  std::lock_guard lock(s.mu);
  auto it = s.find(key, Clock::now());
  if (it == s.lru.end()) return false;
  s.touch(it);
  out.assign(it->value);
  return true;
}

SharedTable::Status SharedTable::store(std::string_view key, std::string_view value, double ttl, Mode mode) {
  if (key.size() + value.size() > entry_limit()) return Status::kTooLarge;
  const auto expires = expiry_of(ttl);
  Shard& s = shard_of(key);
  {
    std::lock_guard lock(s.mu);
    auto it = s.find(key, Clock::now());
    if (it == s.lru.end()) {
      if (mode == Mode::kReplace) return Status::kNotFound;
      s.insert(key, value, expires);
    } else {
      if (mode == Mode::kAdd) return Status::kExists;
      it->expires = expires;
      s.update(it, value);
    }
  }
  settle(s);
  return Status::kOk;
}

bool SharedTable::erase(std::string_view key) {
  Shard& s = shard_of(key);
  std::lock_guard lock(s.mu);
  auto it = s.find(key, Clock::now());
  if (it == s.lru.end()) return false;
  s.drop(it);
  return true;
}

SharedTable::Status SharedTable::incr(std::string_view key, double n, std::optional<double> init, double ttl,
                                      double* result) {
  Shard& s = shard_of(key);
  {
    std::lock_guard lock(s.mu);
    auto it = s.find(key, Clock::now());
    if (it == s.lru.end()) {
      if (!init) return Status::kNotFound;
      *result = *init + n;
      const std::string bytes = number_bytes(*result);
      if (key.size() + bytes.size() > entry_limit()) return Status::kTooLarge;
      s.insert(key, bytes, expiry_of(ttl));
    } else {
      const auto old = number_of(it->value);
      if (!old) return Status::kNotNumber;
      *result = *old + n;
      s.update(it, number_bytes(*result));
    }
  }
  settle(s);
  return Status::kOk;
}

SharedTable::Status SharedTable::cas(std::string_view key, std::string_view old_value, std::string_view new_value) {
  if (key.size() + new_value.size() > entry_limit()) return Status::kTooLarge;
  Shard& s = shard_of(key);
  {
    std::lock_guard lock(s.mu);
    auto it = s.find(key, Clock::now());
    if (it == s.lru.end()) return Status::kNotFound;
    if (it->value != old_value) return Status::kChanged;
    s.update(it, new_value);
  }
  settle(s);
  return Status::kOk;
}

// Calls fn(entry) for each live entry, shard by shard, dropping the
// expired ones it meets, until fn returns false.
template <typename Fn>
void SharedTable::each_live(Fn&& fn) {
  const auto now = Clock::now();
  for (std::size_t i = 0; i < shard_count_; ++i) {
    Shard& s = shards_[i];
    std::lock_guard lock(s.mu);
    for (auto it = s.lru.begin(); it != s.lru.end();) {
      auto next = std::next(it);
      if (it->expires <= now) s.drop(it);
      else if (!fn(*it)) return;
      it = next;
    }
  }
}

std::vector<std::string> SharedTable::keys(std::size_t limit) {
  std::vector<std::string> out;
  each_live([&](const auto& e) {
    if (limit != 0 && out.size() >= limit) return false;
    out.push_back(e.key);
    return true;
  });
  return out;
}

std::size_t SharedTable::size() {
  std::size_t n = 0;
  each_live([&](const auto&) {
    ++n;
    return true;
  });
  return n;
}

void SharedTable::flush() {
  for (std::size_t i = 0; i < shard_count_; ++i) {
    Shard& s = shards_[i];
    std::lock_guard lock(s.mu);
    s.index.clear();
    s.lru.clear();
    s.shrink(s.bytes);
  }
}

struct SharedTables::Impl {
  std::mutex mu;
  std::unordered_map<std::string, std::unique_ptr<SharedTable>> tables;
};

SharedTables::SharedTables() : impl_(new Impl) {}

SharedTables& SharedTables::instance() {
  // Never destroyed: processes may still hold a table's pointer as the
  // program's statics are torn down.
  static SharedTables* tables = new SharedTables;
  return *tables;
}

SharedTable* SharedTables::open(std::string_view name, std::optional<std::size_t> max_bytes, std::string* error) {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->tables.find(std::string(name));
  if (it != impl_->tables.end()) {
    if (max_bytes && *max_bytes != it->second->max_bytes()) {
      *error = "invalid: shared table '" + std::string(name) + "' exists with max_bytes " +
               std::to_string(it->second->max_bytes()) + ", not " + std::to_string(*max_bytes);
      return nullptr;
    }
    return it->second.get();
  }
  auto table = std::make_unique<SharedTable>(max_bytes.value_or(0));
  SharedTable* t = table.get();
  impl_->tables.emplace(std::string(name), std::move(table));
  return t;
}

}  // namespace host::io

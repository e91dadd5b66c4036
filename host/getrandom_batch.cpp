// The per-thread batch behind take_batched_random.
#include "host/getrandom_batch.hpp"

#include <pthread.h>
#include <sys/random.h>

#include <atomic>
#include <cstring>

namespace host {

namespace {

constexpr std::size_t kBatchBytes = 4096;
constexpr std::size_t kMaxRequest = 256;

// Bumped in a forked child: a batch from before the fork is the parent's,
// which the parent hands out too.
std::atomic<unsigned> g_fork_epoch{0};

struct Batch {
  unsigned char bytes[kBatchBytes];
  std::size_t left = 0;  // bytes[0, left) not handed out yet
  unsigned epoch = 0;
};
thread_local Batch t_batch;

[[maybe_unused]] const int g_atfork =
    pthread_atfork(nullptr, nullptr, [] { g_fork_epoch.fetch_add(1, std::memory_order_relaxed); });

}  // namespace

bool take_batched_random(void* out, std::size_t n) {
  if (n > kMaxRequest) return false;
  Batch& b = t_batch;
  const unsigned epoch = g_fork_epoch.load(std::memory_order_relaxed);
  if (b.epoch != epoch) {
    std::memset(b.bytes, 0, b.left);
    b.left = 0;
    b.epoch = epoch;
  }
  if (b.left < n) {
    const ssize_t got = getrandom(b.bytes, kBatchBytes, 0);
    if (got < static_cast<ssize_t>(n)) {
      b.left = 0;
      return false;
    }
    b.left = static_cast<std::size_t>(got);
  }
  unsigned char* from = b.bytes + b.left - n;
  std::memcpy(out, from, n);
  std::memset(from, 0, n);
  b.left -= n;
  return true;
}

}  // namespace host

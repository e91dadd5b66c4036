// Large message buffers kept for reuse (buffer_pool.hpp).
#include "host/cluster/buffer_pool.hpp"

#include <atomic>
#include <mutex>
#include <vector>

namespace host::cluster {

namespace {

struct Pool {
  std::mutex mu;
  std::vector<std::string> kept;
  std::size_t bytes = 0;
  // Whether a large buffer was ever asked for (see give_back).
  std::atomic<bool> used{false};
};

// One for the process: buffers go from a node's sending side to its next
// send, whichever thread runs either (constructed on first use).
Pool& pool() {
  static Pool p;
  return p;
}

}  // namespace

std::string take_buffer(std::string_view head, std::size_t capacity) {
  std::string out;
  if (capacity >= kPooledMinBytes) {
    Pool& p = pool();
    if (!p.used.load(std::memory_order_relaxed)) p.used.store(true, std::memory_order_relaxed);
    std::lock_guard lock(p.mu);
    // The smallest that fits: a larger one stays for a larger message.
    std::size_t best = p.kept.size();
    for (std::size_t i = 0; i < p.kept.size(); ++i)
      if (p.kept[i].capacity() >= capacity && (best == p.kept.size() || p.kept[i].capacity() < p.kept[best].capacity()))
        best = i;
    if (best != p.kept.size()) {
      out = std::move(p.kept[best]);
      p.kept[best] = std::move(p.kept.back());
      p.kept.pop_back();
      p.bytes -= out.capacity();
    }
  }
  out.reserve(capacity);
  out.assign(head);
  return out;
}

void give_back(std::string&& buf) {
  const std::size_t cap = buf.capacity();
  if (cap < kPooledMinBytes) return;
  Pool& p = pool();
  if (!p.used.load(std::memory_order_relaxed)) return;
  std::string dropped;  // freed outside the lock when not kept
  std::lock_guard lock(p.mu);
  if (p.bytes + cap > kPoolBytes) {
    dropped = std::move(buf);
    return;
  }
  buf.clear();
  p.bytes += cap;
  p.kept.push_back(std::move(buf));
}

std::shared_ptr<std::string> share_buffer(std::string&& bytes) {
  if (bytes.capacity() < kPooledMinBytes) return std::make_shared<std::string>(std::move(bytes));
  return std::shared_ptr<std::string>(new std::string(std::move(bytes)), [](std::string* s) {
    give_back(std::move(*s));
    delete s;
  });
}

std::size_t pooled_buffers() {
  Pool& p = pool();
  std::lock_guard lock(p.mu);
  return p.kept.size();
}

}  // namespace host::cluster

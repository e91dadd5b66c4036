// A worker's run queue: a growable Chase-Lev work-stealing deque whose thieves
// can take half of it in one CAS. Threads: the owner pushes and pops at the
// bottom; any thread steals at the top.
//
// Base algorithm: Le, Pop, Cohen, Zappa Nardelli, "Correct and Efficient
// Work-Stealing for Weak Memory Models", PPoPP 2013 (signed 64-bit bottom,
// atomic slots, buffers retired rather than freed while thieves may read them).
//
// Where we depart from the paper, and why. The paper's owner pop takes the
// bottom item without any atomic read-modify-write when more than one item is
// left, which is sound only while a thief claims one item per CAS. A thief that
// reads top and bottom, copies n items and then moves top by n can claim items
// the owner has popped meanwhile (DESIGN.md, "Known traps"). So here:
//   * `top` packs the top index (low 32 bits, modulo 2^32) with a 32-bit
//     version that every successful CAS on it bumps;
//   * the owner's pop publishes the smaller bottom and then claims its item by
//     a CAS on top that bumps the version, even when the index stays put.
// Every claim of an item, by a thief or by the owner, is therefore one CAS on
// the same word, and a thief whose snapshot went stale (any pop or steal since
// it read top) fails its CAS and drops what it copied. The price is one locked
// instruction per owner pop, where the paper pays one seq_cst fence: the same
// cost on x86. The true top index is recovered from bottom (a real int64) and
// the 32-bit distance, so the indices never wrap in practice.
#pragma once

#include <atomic>
#include <cassert>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

#include "host/config.hpp"

namespace host {

template <typename T>
class WorkDeque {
  static_assert(std::is_trivially_copyable_v<T>, "slots are std::atomic<T>");

 public:
  explicit WorkDeque(std::int64_t capacity = config::kDequeInitialCapacity) {
    std::int64_t cap = 1;
    while (cap < capacity) cap <<= 1;
    auto buf = std::make_unique<Buffer>(cap);
    buffer_.store(buf.get(), std::memory_order_relaxed);
    buffers_.push_back(std::move(buf));
  }
  WorkDeque(const WorkDeque&) = delete;
  WorkDeque& operator=(const WorkDeque&) = delete;

  // Owner only. Never fails: the buffer doubles when full.
  void push(T item) {
    std::int64_t b = bottom_.load(std::memory_order_relaxed);
    std::int64_t t = top_index(b, top_.load(std::memory_order_acquire));  // acquire: pairs with thieves' CAS
    Buffer* buf = buffer_.load(std::memory_order_relaxed);
    if (b - t >= buf->capacity) buf = grow(buf, t, b, b - t + 1);
    buf->put(b, item);
    bottom_.store(b + 1, std::memory_order_release);  // release: publishes the slot to thieves' acquire of bottom
  }

  // Owner only. LIFO: the most recently pushed item.
  std::optional<T> pop() {
    std::int64_t b = bottom_.load(std::memory_order_relaxed) - 1;
    // Announce the claim first; it becomes visible to any thief that reads the
    // top our CAS below writes (relaxed store sequenced before a release CAS).
    bottom_.store(b, std::memory_order_relaxed);
    std::uint64_t tp = top_.load(std::memory_order_acquire);
    for (;;) {
      std::int64_t t = top_index(b, tp);
      if (b < t) {  // empty
        bottom_.store(b + 1, std::memory_order_relaxed);
        return std::nullopt;
      }
      T item = buffer_.load(std::memory_order_relaxed)->get(b);
      std::int64_t new_top = (t == b) ? t + 1 : t;
      // acq_rel: orders our bottom store before it for thieves (release), and
      // sees the items thieves took (acquire). Partner: the thief's CAS.
      if (top_.compare_exchange_weak(tp, pack(new_top, version(tp) + 1), std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
        if (t == b) bottom_.store(b + 1, std::memory_order_relaxed);  // took the last: bottom == top
        return item;
      }
      // A thief moved top (or the CAS failed spuriously): recompute with tp.
    }
  }

  // Any thread. Takes the oldest item.
  std::optional<T> steal() {
    for (;;) {
      std::uint64_t tp = top_.load(std::memory_order_acquire);
      std::int64_t b = bottom_.load(std::memory_order_acquire);  // acquire: pairs with push's release
      std::int64_t t = top_index(b, tp);
      if (b - t <= 0) return std::nullopt;
      T item = buffer_.load(std::memory_order_acquire)->get(t);
      if (top_.compare_exchange_strong(tp, pack(t + 1, version(tp) + 1), std::memory_order_acq_rel,
                                       std::memory_order_relaxed))
        return item;
    }
  }

  // Called by the owner of `dst` (any thread with respect to this deque).
  // Moves half of this deque's items (rounded up) to the bottom of `dst`, in
  // one claiming CAS. Returns how many moved (0: empty, or lost every race).
  std::int64_t steal_half_into(WorkDeque& dst, int attempts = 4) {
    for (int attempt = 0; attempt < attempts; ++attempt) {
      std::uint64_t tp = top_.load(std::memory_order_acquire);
      std::int64_t b = bottom_.load(std::memory_order_acquire);
      std::int64_t t = top_index(b, tp);
      std::int64_t size = b - t;
      if (size <= 0) return 0;
      std::int64_t n = size - size / 2;
      Buffer* src = buffer_.load(std::memory_order_acquire);
      // Copy into dst's slots past its bottom: invisible to dst's thieves
      // until the bottom store below, and simply overwritten if we lose.
      std::int64_t db = dst.bottom_.load(std::memory_order_relaxed);
      Buffer* out = dst.reserve(db, n);
      for (std::int64_t i = 0; i < n; ++i) out->put(db + i, src->get(t + i));
      if (top_.compare_exchange_strong(tp, pack(t + n, version(tp) + 1), std::memory_order_acq_rel,
                                       std::memory_order_relaxed)) {
        dst.bottom_.store(db + n, std::memory_order_release);  // publish to dst's thieves
        return n;
      }
    }
    return 0;
  }

  // Any thread; a racy estimate, exact when quiescent.
  std::int64_t size_approx() const {
    std::int64_t b = bottom_.load(std::memory_order_acquire);
    std::int64_t s = b - top_index(b, top_.load(std::memory_order_acquire));
    return s < 0 ? 0 : s;
  }
  bool empty_approx() const { return size_approx() == 0; }

  // Owner only.
  std::int64_t capacity() const { return buffer_.load(std::memory_order_relaxed)->capacity; }

 private:
  struct Buffer {
    explicit Buffer(std::int64_t cap) : capacity(cap), mask(cap - 1), slots(new std::atomic<T>[cap]) {}
    T get(std::int64_t i) const { return slots[i & mask].load(std::memory_order_relaxed); }
    void put(std::int64_t i, T v) { slots[i & mask].store(v, std::memory_order_relaxed); }
    const std::int64_t capacity;
    const std::int64_t mask;
    std::unique_ptr<std::atomic<T>[]> slots;
  };

  static std::uint64_t pack(std::int64_t index, std::uint32_t ver) {
    return (std::uint64_t{ver} << 32) | static_cast<std::uint32_t>(index);
  }
  static std::uint32_t version(std::uint64_t tp) { return static_cast<std::uint32_t>(tp >> 32); }
  // The top index is stored modulo 2^32; the distance to bottom is at most
  // 2^31 (enforced by grow), so it is recovered exactly from bottom.
  static std::int64_t top_index(std::int64_t bottom, std::uint64_t tp) {
    auto dist = static_cast<std::int32_t>(static_cast<std::uint32_t>(bottom) - static_cast<std::uint32_t>(tp));
    return bottom - dist;
  }

  // Owner only: a buffer that can hold slots [t, b + n) given the live range.
  Buffer* reserve(std::int64_t b, std::int64_t n) {
    std::int64_t t = top_index(b, top_.load(std::memory_order_acquire));
    Buffer* buf = buffer_.load(std::memory_order_relaxed);
    if (b + n - t > buf->capacity) buf = grow(buf, t, b, b + n - t);
    return buf;
  }

  // Owner only. The old buffer is retired, not freed: a thief may still be
  // reading it. Retired buffers total less than the live one, and are freed
  // with the deque.
  Buffer* grow(Buffer* old, std::int64_t t, std::int64_t b, std::int64_t need) {
    std::int64_t cap = old->capacity;
    while (cap < need) cap <<= 1;
    if (cap > (std::int64_t{1} << 30)) std::abort();  // 2^30 runnable processes on one worker
    auto bigger = std::make_unique<Buffer>(cap);
    for (std::int64_t i = t; i < b; ++i) bigger->put(i, old->get(i));
    Buffer* raw = bigger.get();
    buffers_.push_back(std::move(bigger));
    buffer_.store(raw, std::memory_order_release);  // release: thieves that acquire it see the copies
    return raw;
  }

  // Thieves CAS top; keep it off the owner's cache line.
  alignas(64) std::atomic<std::uint64_t> top_{0};
  alignas(64) std::atomic<std::int64_t> bottom_{0};
  std::atomic<Buffer*> buffer_{nullptr};
  std::vector<std::unique_ptr<Buffer>> buffers_;  // owner only: live buffer last, retired before it
};

}  // namespace host

// The scheduler's global FIFO run queue: new submissions, processes readied
// by threads that are not workers, and voluntary yields. Any thread may push
// or pop; a mutex guards the deque, an atomic size lets idle workers check it
// without taking the lock.
#pragma once

#include <atomic>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>

#include "host/deque.hpp"

namespace host {

template <typename T>
class GlobalQueue {
 public:
  void push(T item) {
    std::lock_guard lock(mu_);
    items_.push_back(item);
    size_.store(items_.size(), std::memory_order_release);
  }

  std::optional<T> pop() {
    if (empty_approx()) return std::nullopt;
    std::lock_guard lock(mu_);
    if (items_.empty()) return std::nullopt;
    T item = items_.front();
    items_.pop_front();
    size_.store(items_.size(), std::memory_order_release);
    return item;
  }

  // Pops one item to return and moves up to `extra` more into `local` (whose
  // owner must be the calling thread), oldest first so FIFO order survives
  // the owner's LIFO pops as far as a batch allows.
  std::optional<T> pop_batch(WorkDeque<T>& local, std::size_t extra) {
    if (empty_approx()) return std::nullopt;
    std::lock_guard lock(mu_);
    if (items_.empty()) return std::nullopt;
    T first = items_.front();
    items_.pop_front();
    std::size_t n = std::min(extra, items_.size());
    // Pushed newest-first so the owner's LIFO pop yields the oldest next.
    for (std::size_t i = n; i-- > 0;) local.push(items_[i]);
    items_.erase(items_.begin(), items_.begin() + static_cast<std::ptrdiff_t>(n));
    size_.store(items_.size(), std::memory_order_release);
    return first;
  }

  bool empty_approx() const { return size_.load(std::memory_order_acquire) == 0; }
  std::size_t size_approx() const { return size_.load(std::memory_order_acquire); }

 private:
  std::mutex mu_;
  std::deque<T> items_;        // guarded by mu_
  std::atomic<std::size_t> size_{0};  // written under mu_, read anywhere
};

}  // namespace host

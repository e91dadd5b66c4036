// Threads that keep the CPUs busy while a test runs (the races that
// matter show up when workers are preempted), stopped and joined when it
// goes out of scope.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

class CpuHogs {
 public:
  explicit CpuHogs(int n) {
    for (int i = 0; i < n; ++i)
      threads_.emplace_back([this] {
        std::uint64_t x = 0;
        while (!stop_.load(std::memory_order_relaxed)) x = x * 6364136223846793005ull + 1;
        sink_.store(x, std::memory_order_relaxed);  // (keeps the loop)
      });
  }
  ~CpuHogs() {
    stop_.store(true, std::memory_order_relaxed);
    for (auto& t : threads_) t.join();
  }
  CpuHogs(const CpuHogs&) = delete;
  CpuHogs& operator=(const CpuHogs&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> sink_{0};
  std::vector<std::thread> threads_;
};

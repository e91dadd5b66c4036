// A small pool of threads for command handlers that must block (file I/O,
// name lookups, ...), so workers never do. Threads: submit from any thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace host {

class BlockingPool {
 public:
  explicit BlockingPool(unsigned threads);
  ~BlockingPool();
  BlockingPool(const BlockingPool&) = delete;

  // False once stopped: the job was not taken.
  bool submit(std::function<void()> job);
  // Finishes running jobs, drops queued ones, joins. Returns how many dropped.
  std::size_t stop();

 private:
  void run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;  // guarded by mu_
  bool stopping_ = false;                   // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace host

// The blocking pool's threads: take a job, run it, repeat until stopped.
#include "host/blocking_pool.hpp"

namespace host {

BlockingPool::BlockingPool(unsigned threads) {
  for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
}

BlockingPool::~BlockingPool() { stop(); }

bool BlockingPool::submit(std::function<void()> job) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return false;
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
  return true;
}

std::size_t BlockingPool::stop() {
  std::size_t dropped;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    dropped = jobs_.size();
    jobs_.clear();
  }
  cv_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  return dropped;
}

void BlockingPool::run() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace host

// The I/O thread's loop: start on first post, the job queue, stop.
#include "host/io/io_loop.hpp"

#include <pthread.h>
#include <signal.h>

#include <stdexcept>
#include <string>

#include "host/log.hpp"

namespace host {

bool IoLoop::post(Job job) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return false;
    if (!started_.load(std::memory_order_relaxed)) start_locked();
    queue_.push_back(std::move(job));
    // Under the lock, as stop's: once stopping_ is set no send follows, so
    // the drain that closes the async never races a send on it. Merged
    // with any send not yet seen: a drain takes the whole queue.
    uv_async_send(&wakeup_);
  }
  return true;
}

void IoLoop::start_locked() {
  if (int rc = uv_loop_init(&loop_); rc != 0)
    throw std::runtime_error(std::string("I/O loop: ") + uv_strerror(rc));
  wakeup_.data = this;
  if (int rc = uv_async_init(&loop_, &wakeup_, &IoLoop::on_wakeup); rc != 0) {
    uv_loop_close(&loop_);
    throw std::runtime_error(std::string("I/O loop: ") + uv_strerror(rc));
  }
  thread_ = std::thread([this] { run(); });
  // Named, so that top -H and /proc/PID/task/*/comm tell it from the
  // workers (its CPU share says whether one I/O thread is enough).
  pthread_setname_np(thread_.native_handle(), "host-io");
  started_.store(true, std::memory_order_release);  // release: the loop's set-up above
}

void IoLoop::run() {
  // A write to a socket or pipe whose reader is gone raises SIGPIPE on the
  // writing thread, and its default ends the whole host; blocked here, the
  // write returns EPIPE instead (the call answers closed).
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
  uv_run(&loop_, UV_RUN_DEFAULT);  // until stop closed the async and every handle closed
  if (int rc = uv_loop_close(&loop_); rc != 0)
    log::logger().warn("I/O loop: closed with handles still open ({})", uv_strerror(rc));
}

void IoLoop::on_wakeup(uv_async_t* async) { static_cast<IoLoop*>(async->data)->drain(); }

void IoLoop::drain() {
  std::vector<Job> jobs;
  bool stopping;
  {
    std::lock_guard lock(mu_);
    jobs.swap(queue_);
    stopping = stopping_;
  }
  for (auto& job : jobs) {
    try {
      job(&loop_);
    } catch (const std::exception& e) {
      log::logger().error("I/O loop: a job failed: {}", e.what());
    }
  }
  if (!stopping) return;
  for (auto& job : stop_jobs_) job(&loop_);
  // The loop ends once the handles the stop jobs closed have run their
  // close callbacks, and this one too.
  uv_close(reinterpret_cast<uv_handle_t*>(&wakeup_), nullptr);
}

void IoLoop::stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    if (!started_.load(std::memory_order_relaxed)) return;
    uv_async_send(&wakeup_);
  }
  if (thread_.joinable()) thread_.join();
}

}  // namespace host

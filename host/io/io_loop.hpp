// An I/O thread ("host-io"): one libuv loop, and the one thread that runs
// it and owns every handle on it (programs: their spawns, exits and
// exec.run's pipes; UDP sockets; name lookups). A host has one,
// or several with --io-threads (host/io/io_services.hpp), each its own.
// Threads: post() from any thread; everything a posted job touches is the
// loop thread's alone.
//
// libuv's loop is not thread-safe, so other threads never touch it: a
// worker that dispatches an I/O command posts a job (a closure) to an
// MPSC queue under a mutex and wakes the loop with uv_async_send. libuv
// merges wakeups (several sends before the loop runs may call back once),
// so the queue, not the async, carries the work: each wakeup drains it
// whole. Results go back to processes with Scheduler::complete_yield,
// which is safe from any thread.
//
// The thread starts at the first post, so a host whose processes never
// touch I/O has no such thread. stop() runs the stop jobs that services
// registered (they close their handles), closes the async, lets the loop
// run until every handle's close callback has run, and joins the thread.
// Jobs posted after stop() are refused (post returns false) and dropped.
//
// Rejected: one loop per worker (a handle would be pinned to the worker
// that made it, and a process moves between workers at every step); a
// blocking call per waiting task on a pool (a thread per idle connection).
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <uv.h>

namespace host {

class IoLoop {
 public:
  using Job = std::function<void(uv_loop_t*)>;

  IoLoop() = default;
  ~IoLoop() { stop(); }
  IoLoop(const IoLoop&) = delete;
  IoLoop& operator=(const IoLoop&) = delete;

  // Runs job on the loop thread, in the order posted. False once stopped
  // (the job was dropped).
  bool post(Job job);
  // Run on the loop thread when stop() begins, before the loop ends: where
  // a service closes the handles it still has. Add before the first post.
  void on_stop(Job job) { stop_jobs_.push_back(std::move(job)); }
  // Idempotent; waits for the loop thread to end.
  void stop();
  bool started() const { return started_.load(std::memory_order_acquire); }

 private:
  void start_locked();  // under mu_
  void run();
  static void on_wakeup(uv_async_t* async);
  void drain();

  uv_loop_t loop_{};
  uv_async_t wakeup_{};
  std::mutex mu_;
  std::vector<Job> queue_;     // guarded by mu_
  bool stopping_ = false;      // guarded by mu_
  std::atomic<bool> started_{false};  // written under mu_; read anywhere
  std::vector<Job> stop_jobs_;  // set before the first post; read by the loop thread
  std::thread thread_;
};

}  // namespace host

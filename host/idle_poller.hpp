// A source of work that idle workers poll themselves (Go's netpoll in
// findrunnable): the netpoller (host/io/netpoll.hpp) attaches one to the
// scheduler. A worker that runs out of processes polls it without
// blocking; the last one to park blocks in it instead of the futex, so a
// descriptor's readiness wakes the worker that then runs the waiting
// process, with no thread in between. Workers with work of their own poll
// it now and then too (Worker::find_work), so readiness is seen while
// every worker is busy.
//
// Polling is two calls, wait then dispatch, so that a worker leaves the
// blocking role (IdleWorkers::release_poll) before the completions it
// dispatches ready processes: their wakes then go to other workers, not to
// its own poll.
#pragma once

#include <cstdint>

namespace host {

class IdlePoller {
 public:
  // What one wait found: up to kBatch events, opaque to the scheduler.
  static constexpr int kBatch = 128;
  struct Batch {
    int n = 0;
    std::uint64_t data[kBatch];
    std::uint32_t events[kBatch];
  };

  virtual ~IdlePoller() = default;
  // Fills batch with what is ready; with block, waits until something is
  // or interrupt() is called. Any thread, several at once.
  virtual void wait(Batch& batch, bool block) = 0;
  // Completes the waits the batch's events end (they ready processes).
  virtual void dispatch(const Batch& batch) = 0;
  // Makes a blocking wait return soon (now, or at once when it starts).
  virtual void interrupt() = 0;
  // Whether any task waits on it: polling without blocking is worth a
  // system call only then.
  virtual bool waiting() const = 0;
};

}  // namespace host

// A worker: one OS thread that finds ready processes and steps them.
// Threads: the deque's owner side and the run loop belong to the worker's
// own thread; other workers only steal from deque().
#pragma once

#include <cstdint>
#include <thread>
#include <vector>

#include "host/deque.hpp"
#include "host/pid_table.hpp"
#include "host/process.hpp"

namespace host {

class Scheduler;

class Worker {
 public:
  Worker(Scheduler& scheduler, unsigned id);
  Worker(const Worker&) = delete;

  void start();
  void join();

  // The worker running on this thread, or null on any other thread.
  static Worker* current();
  Scheduler& scheduler() { return scheduler_; }
  WorkDeque<ProcessSlot*>& deque() { return deque_; }
  // Owner thread only.
  void push_local(ProcessSlot* slot) { deque_.push(slot); }

 private:
  void run();
  ProcessSlot* find_work();
  ProcessSlot* steal_work();
  void execute(ProcessSlot* slot);
  std::uint64_t next_random();

  Scheduler& scheduler_;
  const unsigned id_;
  WorkDeque<ProcessSlot*> deque_;
  std::thread thread_;
  // --- owned by the worker thread ---
  std::uint32_t tick_ = 0;
  std::uint64_t rng_;
  std::vector<Event> events_;  // swapped with a slot's pending queue each step
  StepOutput out_;
};

}  // namespace host

// The process model: the interface every process implements (native C++ or
// Lua), the events the scheduler feeds it and the StepOutput it writes.
//
// A process is a state machine. The scheduler calls Init once, then Step
// with the events that arrived since the last step; Step writes its status
// and the commands it is now waiting on ("yields", each with a fresh tag) to
// a StepOutput the worker reuses, so the common step allocates nothing.
// Close is called once, after the last Step, on the thread that ran it; or,
// for a process whose thread the runaway monitor gave up (Abandon), from
// the monitor, maybe while that thread is still inside its first Close.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "host/config.hpp"
#include "host/pid.hpp"

namespace host {

class Scheduler;

using CommandId = std::uint32_t;

enum class EventKind : std::uint8_t {
  YieldComplete,  // a command finished: tag, payload (its result, or its error when failed)
  Message,        // from, topic, payload
  Cancel,         // cooperative stop request: payload is the reason
  Exit,           // a monitored process ended: from, payload (its result, or its error when failed)
  LinkDown,       // a linked process failed: from, payload (its error; failed)
  Reload,         // modules it loaded changed on disk: payload is their names, '\n'-separated
  Node,           // a node it monitors (process.monitor_node) came up (tag 1) or went down (tag 0): payload, its name
};

// 96 bytes: a flood of messages queues one per message. A failure's text
// shares the payload (they never come together), where a third string
// would make every queued message a third larger.
struct Event {
  // User-provided, so that a value-initialised Event (the message path's
  // pending.emplace_back()) is built by its member initialisers alone: with
  // the implicit constructor g++ first zeroes all 96 bytes with a rep stos,
  // whose start-up cost showed in Scheduler::send's samples (BENCHMARKS.md's source figures).
  Event() noexcept {}
  // A message (Scheduler::send builds it in place in the queue). Its
  // payload is moved in by construction, inline, where
  // move-assigning into the empty string was an out-of-line call
  // (BENCHMARKS.md's source figures); a nil payload (no bytes) takes the other, which moves
  // nothing at all.
  // (Not noexcept: a long topic's copy may allocate, and fail. Flattened:
  // g++ left the payload's move construction a call.)
  [[gnu::flatten]] Event(const Pid& sender, std::string_view topic_bytes, std::string&& body)
      : from(sender), topic(topic_bytes), payload(std::move(body)) {}
  [[gnu::flatten]] Event(const Pid& sender, std::string_view topic_bytes) : from(sender), topic(topic_bytes) {}
  // A message whose payload is copied in from bytes held elsewhere.
  [[gnu::flatten]] Event(const Pid& sender, std::string_view topic_bytes, std::string_view body)
      : from(sender), topic(topic_bytes), payload(body) {}

  EventKind kind = EventKind::Message;
  bool failed = false;     // YieldComplete, Exit, LinkDown: payload is the error text
  std::uint64_t tag = 0;   // YieldComplete, the monitor reference for Exit; 1 for a Cancel whose reason is encoded
  Pid from;                // sender, or the process an Exit/LinkDown is about
  std::string topic;       // Message topic
  std::string payload;     // message body, command result or error, cancel reason, exit result or error
};
static_assert(sizeof(Event) <= 96, "a queued message's size: see above");

// One command a process waits on. `tag` is chosen by the process, unique among
// its outstanding yields; the completion comes back as an Event with that tag.
struct Yield {
  CommandId command = 0;
  std::uint64_t tag = 0;
  std::int64_t arg = 0;     // small scalar argument (e.g. a duration in ns)
  std::string bytes;        // opaque argument bytes
};

enum class Status : std::uint8_t {
  Continue,  // runnable again at once (a voluntary yield); re-queued fairly, its yields started
  Blocked,   // waiting on the yields in the output (and maybe messages)
  Idle,      // waiting for messages only
  Done,      // finished; result holds its value
  Failed,    // finished with error
};

// Written by Step, read by the worker that ran it. Reused between steps: the
// first kInlineYields yields live inline, more spill to a vector that keeps
// its capacity, so a steady state allocates nothing.
class StepOutput {
 public:
  Status status = Status::Idle;
  std::string result;  // Done: the result value (encoded bytes)
  std::string error;   // Failed: the reason, with traceback where there is one

  // Adds a yield and returns it for the caller to fill in.
  Yield& add_yield(CommandId command, std::uint64_t tag) {
    Yield& y = count_ < inline_.size() ? inline_[count_] : spill_slot();
    ++count_;
    y.command = command;
    y.tag = tag;
    y.arg = 0;
    y.bytes.clear();
    return y;
  }
  std::size_t yield_count() const { return count_; }
  Yield& yield_at(std::size_t i) { return i < inline_.size() ? inline_[i] : spill_[i - inline_.size()]; }

  // Tags whose outstanding commands the process no longer waits for (a
  // receive whose message came before its timeout). Handlers that support it
  // drop the work; a completion that still arrives is ignored by the process.
  void cancel_yield(CommandId command, std::uint64_t tag) { cancels_.push_back({command, tag}); }
  struct CancelRequest {
    CommandId command;
    std::uint64_t tag;
  };
  std::span<const CancelRequest> cancels() const { return cancels_; }
  // Takes back a yield this step added (not started yet): true where it
  // was there. A wait given up in the step that made it (the HTTP server's
  // watch on a client whose handler answered at once) then costs no
  // command and no cancel. The others keep their order.
  bool drop_yield(CommandId command, std::uint64_t tag) {
    for (std::size_t i = 0; i < count_; ++i) {
      if (yield_at(i).command != command || yield_at(i).tag != tag) continue;
      for (std::size_t j = i; j + 1 < count_; ++j) std::swap(yield_at(j), yield_at(j + 1));
      --count_;
      return true;
    }
    return false;
  }
  // Whether the step left anything for Scheduler::dispatch: most steps
  // wait on messages only, and a call into dispatch for nothing (its
  // prologue and epilogue, a large function's register saves) was paid
  // on every step (BENCHMARKS.md's source figures).
  bool has_commands() const { return count_ != 0 || !cancels_.empty(); }

  void reset() {
    status = Status::Idle;
    count_ = 0;
    cancels_.clear();
    result.clear();
    error.clear();
  }

 private:
  Yield& spill_slot() {
    std::size_t i = count_ - inline_.size();
    if (i == spill_.size()) spill_.emplace_back();
    return spill_[i];
  }
  std::array<Yield, config::kInlineYields> inline_{};
  std::vector<Yield> spill_;
  std::size_t count_ = 0;
  std::vector<CancelRequest> cancels_;
};

// What a process gets at Init: its PID and the scheduler that runs it (for
// sends and spawns from inside Step, which are thread-safe calls).
struct ProcessContext {
  Scheduler* scheduler = nullptr;
  Pid self;
};

// What process.info reports of a process beyond what the scheduler knows:
// Process::Describe fills it in for Scheduler::inspect. `quiet` says the
// process is not running: its last step's writes are visible and its next
// step waits for the lock inspect holds, so it may read its own state;
// otherwise only what is safe to read beside a running step.
struct ProcessFacts {
  bool quiet = false;
  std::string entry;
  std::size_t memory = 0;      // its heap, in bytes
  std::uint64_t steps = 0;     // times the scheduler has run it
  std::size_t inbox = 0;       // messages taken in by its steps and not yet received (when quiet)
  std::vector<Pid> monitors;   // the processes it monitors
  double started = 0;          // when it started, in time.now() seconds
};

class Process {
 public:
  virtual ~Process() = default;
  // Prepares the process to run `method` with `input` (encoded arguments).
  // Returns an empty string on success, else the reason it cannot start.
  virtual std::string Init(const ProcessContext& ctx, const std::string& method, std::string input) = 0;
  // Advances the process with the events that arrived since the last step.
  // Must set out.status. Exceptions are caught and turn into Failed.
  virtual void Step(std::span<Event> events, StepOutput& out) = 0;
  // Releases resources. Called once; the process is destroyed right after.
  virtual void Close() = 0;

  // Runaway protection (runaway_monitor.hpp); both are called from the
  // monitor thread while Step runs on a worker. Interrupt: make the running
  // step end soon (it should then fail with "limit: time"). Abandon: the
  // worker thread running Step was parked for good inside it, or given up
  // where it is (in a C call, a finalizer), to park itself at its next safe
  // point (Worker::park_if_abandoned): Close must touch nothing that thread
  // may use, and the scheduler never destroys the object.
  virtual void Interrupt() {}
  virtual void Abandon() {}

  // What log lines written during its steps name as the module (a Lua
  // process: its entry, "main:main"). Must stay valid until Close.
  virtual const char* Name() const { return ""; }

  // See ProcessFacts. Called by another thread, under the slot's lock.
  virtual void Describe(ProcessFacts& facts) const { facts.entry = Name(); }

  // Starts loading what the next Step reads first, without waiting for it:
  // the worker calls it before its own bookkeeping for the step, which then
  // overlaps the loads of a process whose lines were evicted.
  virtual void Prefetch() const {}
};

}  // namespace host

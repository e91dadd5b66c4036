// The netpoller (docs/ARCHITECTURE.md, "Sockets on the workers"): Go's
// shape. A socket's task calls read and write itself, on its worker, on a
// non-blocking descriptor; only a call that would block (EAGAIN) waits,
// by a waiting call (cmd kPollWait) that this poller completes when the
// descriptor becomes ready. One edge-triggered epoll set holds the
// descriptors, each registered once for both directions at its first wait:
// a connection served and closed without ever waiting (a request read
// whole, its reply sent whole) costs the poller no system call. The add
// reports what is ready already, so no edge before it is lost.
//
// Readiness and waits meet in a descriptor's PollDesc (Go's pollDesc): an
// edge that finds a waiter completes its yield; one that finds none is
// remembered (ready), and the next wait consumes it at once, so no edge
// between a task's EAGAIN and its wait is lost. A task may thus be woken
// once for nothing (the edge came before the read that drained the
// descriptor); its retry sees EAGAIN and waits again.
//
// A PollDesc is never freed while the poller runs: closed ones go back to
// a free list with their generation bumped, and events carry the
// generation, so an event read just before a close never touches the next
// descriptor to use the slot. Wait tags name the slot and direction
// (tag_for), so that a cancel finds its wait from the tag alone.
//
// Who reads epoll: the scheduler's workers (it is their IdlePoller,
// host/idle_poller.hpp: a look without blocking when they look for work,
// the last to park blocking in it), so a ready descriptor wakes the worker
// that runs its task. Where no scheduler takes it (a second runtime on one
// scheduler, tests), poll_on_own_thread gives it a thread of its own.
//
// Threads: open, close, arm and cancel from any thread (workers); wait
// and dispatch from several at once (complete, from any thread).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "host/idle_poller.hpp"
#include "host/pid.hpp"
#include "host/spin_lock.hpp"

namespace host::io {

class NetPoller final : public IdlePoller {
 public:
  enum Dir : int { kRead = 0, kWrite = 1 };

  // Wait tags: TaskKernel's call tags (bit 51) with bit 49 set, the slot
  // and direction, and a count that makes each wait's tag new.
  static constexpr std::uint64_t kTagMark = (std::uint64_t{1} << 51) | (std::uint64_t{1} << 49);
  static constexpr int kSeqBits = 24;
  static bool is_wait_tag(std::uint64_t tag) { return (tag & kTagMark) == kTagMark && tag < (std::uint64_t{1} << 52); }

  // complete(pid, tag, error): a wait is over (the descriptor is ready, or
  // was closed; error empty), or failed (the kernel would not watch the
  // descriptor: error says why); the runtime's completes the yield
  // (Scheduler::complete_yield_copy with a non-empty payload, or
  // complete_yield with the error).
  // Any thread.
  using Complete = std::function<void(const Pid&, std::uint64_t tag, std::string_view error)>;
  explicit NetPoller(Complete complete);
  ~NetPoller() override;
  NetPoller(const NetPoller&) = delete;
  NetPoller& operator=(const NetPoller&) = delete;

  // Takes fd (non-blocking): returns its slot, or -1 with errno set. The
  // descriptor joins the epoll set at its first wait (arm), not here.
  int open(int fd);
  // Before the caller closes the descriptor: its registration goes, and a
  // wait still armed on it completes at once (its retry finds the socket
  // closed). The slot may be reused after this.
  void close(int slot);
  // A fresh tag for a wait on slot in dir.
  std::uint64_t tag_for(int slot, Dir dir);
  // cmd kPollWait's handler: the wait tag names the slot and direction.
  // Completes at once where an edge came since the last wait, or the slot
  // was closed; else when one comes. The slot's first wait registers its
  // descriptor (the caller may not close the descriptor before the slot).
  void arm(const Pid& pid, std::uint64_t tag);
  // The wait's cancel: true where it was still armed (it will never
  // complete), false where its completion is on its way.
  bool cancel(const Pid& pid, std::uint64_t tag);
  // The slot's generation now: with the slot, it names this descriptor
  // and no later one to use the slot (wake_reader).
  std::uint32_t generation(int slot);
  // As if the descriptor turned readable (from any thread): its read wait
  // completes, or the next one does at once, and its retry looks for
  // itself. How the HTTP acceptor tells a connection's process that the
  // server drains (bindings/http_conn.cpp). Nothing where the slot was
  // closed since gen.
  void wake_reader(int slot, std::uint32_t gen) { ready(slot, gen, true, false); }

  // Open slots (tests' leak checks), and those whose descriptor is in the
  // epoll set (it waited once).
  std::size_t open_count() const { return open_.load(std::memory_order_relaxed); }
  std::size_t registered_count() const { return registered_.load(std::memory_order_relaxed); }
  // Tests: each registration from now on fails with err, as the kernel's
  // epoll limits would refuse it (0: none refused). What a refused watch
  // does to a call in progress can only be tested so.
  void refuse_registrations_for_test(int err) { refuse_for_test_.store(err, std::memory_order_relaxed); }

  // IdlePoller: epoll_wait into the batch; the batch's readiness to the
  // descriptors' waits; the eventfd that ends a blocking wait; armed waits.
  void wait(Batch& batch, bool block) override;
  void dispatch(const Batch& batch) override;
  void interrupt() override;
  bool waiting() const override { return armed_.load(std::memory_order_relaxed) > 0; }
  // Polls on a thread of its own (until destroyed), for a poller no
  // scheduler polls. Call once.
  void poll_on_own_thread();

 private:
  struct Waiter {
    Pid pid;
    std::uint64_t tag = 0;
  };
  struct Desc {
    SpinLock mu;
    std::uint32_t gen = 0;      // bumped at each close
    bool open = false;
    bool registered = false;    // in the epoll set (its first wait)
    int fd = -1;
    bool ready[2] = {false, false};
    Waiter waiter[2];           // tag 0: none
    std::atomic<std::uint32_t> seq{0};
  };
  static constexpr int kChunkBits = 12;
  static constexpr int kSlotBits = 23;  // tag bits 25-47
  static constexpr int kMaxChunks = 1 << (kSlotBits - kChunkBits);
  Desc* desc(int slot) const {
    return &chunks_[static_cast<unsigned>(slot) >> kChunkBits][static_cast<unsigned>(slot) & ((1u << kChunkBits) - 1)];
  }
  static int slot_of(std::uint64_t tag) { return static_cast<int>((tag >> (kSeqBits + 1)) & ((1u << kSlotBits) - 1)); }
  static Dir dir_of(std::uint64_t tag) { return static_cast<Dir>((tag >> kSeqBits) & 1); }
  void ready(int slot, std::uint32_t gen, bool read, bool write);
  bool register_locked(Desc* d, int slot, int* err);
  std::atomic<int> refuse_for_test_{0};  // refuse_registrations_for_test's errno
  void complete_taken(const Waiter& w);

  Complete complete_;
  std::atomic<bool> refusal_logged_{false};  // the first refused watch was logged
  int epfd_ = -1;
  int wakefd_ = -1;
  std::mutex slots_mu_;
  std::vector<int> free_;      // guarded by slots_mu_
  int used_ = 0;               // slots handed out so far (guarded by slots_mu_)
  std::unique_ptr<std::unique_ptr<Desc[]>[]> chunks_;
  std::atomic<std::size_t> open_{0};
  std::atomic<std::size_t> registered_{0};
  std::atomic<int> armed_{0};  // waiters set in descriptors (waiting())
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace host::io

// The PID table: process slots indexed by PID, each checked against the
// generation the PID carries, so lookup is O(1) and a stale PID never reaches
// a newer process. Threads: any.
//
// Slots live in fixed-size chunks that are allocated on demand and never
// moved or freed while the table lives, so a sender can take a slot pointer
// without a lock and then check the generation under the slot's mutex.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "host/config.hpp"
#include "host/pid.hpp"
#include "host/process.hpp"
#include "host/process_state.hpp"
#include "host/spin_lock.hpp"

namespace host {

struct Monitor {
  Pid watcher;
  std::uint64_t ref;
};

// One process's control block. Fields marked "mu" may only be touched with
// mu held; `process` belongs to whoever holds the process in the Running
// state (or the spawner before it is first queued).
//
// Two cache lines, aligned: the first holds what every message writes (the
// state, the lock, the queue), the second what the worker reads and rarely
// writes. Unaligned (136 bytes), a slot shared lines with its neighbours,
// and senders to one process took lines from the workers stepping the next.
struct alignas(64) ProcessSlot {
  std::uint32_t index = 0;     // immutable
  ProcessState state;          // see process_state.hpp
  SpinLock mu;
  std::uint32_t generation = 1;  // mu; of the current occupant when alive, else of the next
  bool alive = false;            // mu
  std::atomic<bool> terminate_requested{false};  // set by terminate(), read by the worker
  // Events ever posted to this slot: written under mu, read without it by
  // a worker gathering a batch (Worker::gather_batch), which only compares
  // two readings.
  std::atomic<std::uint32_t> arrivals{0};
  std::vector<Event> pending;     // mu; the MPSC event queue: producers push, the worker swaps it out
  std::vector<Pid> links;         // mu
  std::vector<Monitor> monitors;  // mu; who watches this process

  // Yields dispatched minus those completed or dropped by a cancel: shutdown
  // reports them, and waits for no process that has none (nothing_can_run).
  std::atomic<std::int32_t> outstanding_yields{0};
  std::atomic<std::int32_t> outstanding_sleeps{0};  // those of them that are timers (cmd::kSleep)
  std::unique_ptr<Process> process;
  Pid pid() const { return pid_; }
  Pid pid_;  // written at allocation, before the slot is published to other threads
  // Next free slot index while this slot is on the free list (PidTable only).
  std::atomic<std::uint32_t> next_free{0};
};
static_assert(sizeof(ProcessSlot) == 128, "a slot is two cache lines: see above");

class PidTable {
 public:
  explicit PidTable(std::uint32_t node = 0) : node_(node), chunks_(config::kPidMaxChunks) {}
  PidTable(const PidTable&) = delete;

  std::uint32_t node() const { return node_; }

  // The slot a PID names, or null when the index was never allocated or the
  // PID is of another node. The caller checks generation/alive under slot.mu.
  ProcessSlot* find(const Pid& pid) const {
    if (pid.node != node_) return nullptr;
    return slot_at(pid.index);
  }

  ProcessSlot* slot_at(std::uint32_t index) const {
    std::uint32_t chunk = index >> config::kPidChunkBits;
    if (chunk >= chunks_.size()) return nullptr;
    ProcessSlot* base = chunks_[chunk].load(std::memory_order_acquire);  // pairs with the release in allocate
    return base ? &base[index & kChunkMask] : nullptr;
  }

  // Free slots kept by one thread (a worker), so spawns and exits on that
  // worker do not bounce the shared free-list head between cores.
  struct LocalFree {
    static constexpr std::size_t kMax = 128;
    std::vector<std::uint32_t> indices;
  };

  // A free slot (not yet alive), with pid_ set to the PID it will have.
  // Lock-free unless a new chunk of slots must be allocated. `local`: the
  // calling thread's own cache, or null.
  ProcessSlot* allocate(LocalFree* local = nullptr) {
    ProcessSlot* slot = nullptr;
    if (local && !local->indices.empty()) {
      slot = slot_at(local->indices.back());
      local->indices.pop_back();
    }
    if (!slot) slot = pop_free();
    if (!slot) slot = fresh_slot();
    if (!slot) return nullptr;
    // The generation was last written by finish() before release(); the
    // free list's acquire/release orders it before this read.
    slot->pid_ = Pid{node_, slot->index, slot->generation};
    return slot;
  }

  // Returns a slot whose occupant is gone (generation already bumped).
  void release(ProcessSlot* slot, LocalFree* local) {
    if (local && local->indices.size() < LocalFree::kMax) {
      local->indices.push_back(slot->index);
      return;
    }
    release(slot);
  }
  void release(ProcessSlot* slot) {
    std::uint64_t head = free_head_.load(std::memory_order_relaxed);
    for (;;) {
      slot->next_free.store(static_cast<std::uint32_t>(head), std::memory_order_relaxed);
      std::uint64_t next = pack(slot->index + 1, version(head) + 1);
      // release: publishes next_free and the slot's last writes to pop_free's acquire.
      if (free_head_.compare_exchange_weak(head, next, std::memory_order_release, std::memory_order_relaxed)) return;
    }
  }

  // Upper bound of allocated indices, for walks over all slots.
  std::uint32_t index_limit() const { return next_index_.load(std::memory_order_acquire); }

 private:
  static constexpr std::uint32_t kChunkSize = 1u << config::kPidChunkBits;
  static constexpr std::uint32_t kChunkMask = kChunkSize - 1;

  // The free list is a Treiber stack of slot indices. Its head packs the top
  // index + 1 (0: empty) with a version bumped by every change, so a pop
  // whose snapshot went stale (ABA) fails its CAS. A stale read of a slot's
  // next_free is harmless: slots are never freed.
  static std::uint64_t pack(std::uint32_t top_plus_one, std::uint32_t ver) {
    return (std::uint64_t{ver} << 32) | top_plus_one;
  }
  static std::uint32_t version(std::uint64_t head) { return static_cast<std::uint32_t>(head >> 32); }

  ProcessSlot* pop_free() {
    std::uint64_t head = free_head_.load(std::memory_order_acquire);
    for (;;) {
      auto top = static_cast<std::uint32_t>(head);
      if (top == 0) return nullptr;
      ProcessSlot* slot = slot_at(top - 1);
      std::uint32_t next = slot->next_free.load(std::memory_order_relaxed);
      // acquire: pairs with release()'s CAS.
      if (free_head_.compare_exchange_weak(head, pack(next, version(head) + 1), std::memory_order_acquire,
                                           std::memory_order_acquire))
        return slot;
    }
  }

  ProcessSlot* fresh_slot() {
    std::uint32_t index = next_index_.load(std::memory_order_relaxed);
    for (;;) {
      if ((index >> config::kPidChunkBits) >= chunks_.size()) return nullptr;  // table full
      if (!ensure_chunk(index >> config::kPidChunkBits)) return nullptr;
      if (next_index_.compare_exchange_weak(index, index + 1, std::memory_order_acq_rel, std::memory_order_relaxed))
        return slot_at(index);
    }
  }

  bool ensure_chunk(std::uint32_t chunk) {
    if (chunks_[chunk].load(std::memory_order_acquire)) return true;
    std::lock_guard lock(chunk_mu_);
    if (chunks_[chunk].load(std::memory_order_relaxed)) return true;
    auto fresh = std::make_unique<ProcessSlot[]>(kChunkSize);
    for (std::uint32_t i = 0; i < kChunkSize; ++i) fresh[i].index = (chunk << config::kPidChunkBits) | i;
    chunks_[chunk].store(fresh.get(), std::memory_order_release);  // pairs with slot_at's acquire
    owned_.push_back(std::move(fresh));
    return true;
  }

  const std::uint32_t node_;
  std::vector<std::atomic<ProcessSlot*>> chunks_;  // sized once; each entry set once
  std::atomic<std::uint64_t> free_head_{0};
  std::atomic<std::uint32_t> next_index_{0};       // indices below it have a chunk
  std::mutex chunk_mu_;
  std::vector<std::unique_ptr<ProcessSlot[]>> owned_;  // guarded by chunk_mu_
};

}  // namespace host

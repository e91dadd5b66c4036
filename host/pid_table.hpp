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

namespace host {

struct Monitor {
  Pid watcher;
  std::uint64_t ref;
};

// One process's control block. The fields in the "guarded by mu" group may
// only be touched with mu held; `process` belongs to whoever holds the
// process in the Running state (or the spawner before it is first queued).
struct ProcessSlot {
  std::uint32_t index = 0;     // immutable
  ProcessState state;          // see process_state.hpp

  std::mutex mu;
  // --- guarded by mu ---
  std::uint32_t generation = 1;  // of the current occupant when alive, else of the next
  bool alive = false;
  std::vector<Event> pending;    // the MPSC event queue: producers push, the worker swaps it out
  std::vector<Pid> links;
  std::vector<Monitor> monitors; // who watches this process
  // --- end guarded ---

  std::atomic<bool> terminate_requested{false};  // set by terminate(), read by the worker
  std::atomic<std::int32_t> outstanding_yields{0};  // dispatched minus completed, for shutdown reports
  std::unique_ptr<Process> process;
  Pid pid() const { return pid_; }
  Pid pid_;  // written at allocation, before the slot is published to other threads
};

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

  // A free slot (not yet alive), with pid_ set to the PID it will have.
  ProcessSlot* allocate() {
    std::lock_guard lock(alloc_mu_);
    std::uint32_t index;
    if (!free_.empty()) {
      index = free_.back();
      free_.pop_back();
    } else {
      index = next_index_++;
      std::uint32_t chunk = index >> config::kPidChunkBits;
      if (chunk >= chunks_.size()) {
        --next_index_;
        return nullptr;
      }
      if (!chunks_[chunk].load(std::memory_order_relaxed)) {
        auto fresh = std::make_unique<ProcessSlot[]>(kChunkSize);
        for (std::uint32_t i = 0; i < kChunkSize; ++i) fresh[i].index = (chunk << config::kPidChunkBits) | i;
        chunks_[chunk].store(fresh.get(), std::memory_order_release);
        owned_.push_back(std::move(fresh));
      }
    }
    ProcessSlot* slot = slot_at(index);
    std::lock_guard slot_lock(slot->mu);
    slot->pid_ = Pid{node_, index, slot->generation};
    return slot;
  }

  // Returns a slot whose occupant is gone (generation already bumped).
  void release(ProcessSlot* slot) {
    std::lock_guard lock(alloc_mu_);
    free_.push_back(slot->index);
  }

  // Upper bound of allocated indices, for walks over all slots.
  std::uint32_t index_limit() const {
    std::lock_guard lock(alloc_mu_);
    return next_index_;
  }

 private:
  static constexpr std::uint32_t kChunkSize = 1u << config::kPidChunkBits;
  static constexpr std::uint32_t kChunkMask = kChunkSize - 1;

  const std::uint32_t node_;
  std::vector<std::atomic<ProcessSlot*>> chunks_;  // sized once; entries set once
  mutable std::mutex alloc_mu_;
  std::vector<std::uint32_t> free_;           // guarded by alloc_mu_
  std::uint32_t next_index_ = 0;              // guarded by alloc_mu_
  std::vector<std::unique_ptr<ProcessSlot[]>> owned_;  // guarded by alloc_mu_
};

}  // namespace host

// A hierarchical timing wheel: 6 levels of 64 slots, one tick per
// millisecond at level 0 and 64 times coarser per level, so insert, cancel
// and expiry are O(1) and a million pending timers cost one small entry
// each. Single-threaded: TimerService guards it with its mutex.
//
// An entry sits at the lowest level whose window still contains both the
// wheel's current time and its deadline; when a higher-level slot comes due
// its entries cascade down. Deadlines further out than kMaxDelay ticks are
// parked at the top level and re-inserted when their slot comes due.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "host/pid.hpp"

namespace host {

struct TimerEntry {
  TimerEntry* prev = nullptr;
  TimerEntry* next = nullptr;
  std::uint64_t when = 0;  // deadline in ticks
  std::uint64_t id = 0;    // 0 while free; lets a stale handle be detected
  Pid pid;                 // what to complete when it fires
  std::uint64_t tag = 0;
  std::uint8_t level = 0;
  std::uint8_t slot = 0;
};

class TimerWheel {
 public:
  static constexpr int kLevels = 6;
  static constexpr int kSlots = 64;
  static constexpr std::uint64_t kMaxDelay = std::uint64_t{1} << 35;  // about a year of 1 ms ticks

  TimerWheel() = default;
  TimerWheel(const TimerWheel&) = delete;

  std::uint64_t now() const { return elapsed_; }
  std::size_t size() const { return size_; }

  // Adds a timer; a deadline at or before now() fires on the next advance().
  TimerEntry* insert(std::uint64_t when, Pid pid, std::uint64_t tag) {
    TimerEntry* e = take_free();
    e->when = when;
    e->id = ++next_id_;
    e->pid = pid;
    e->tag = tag;
    link(e);
    ++size_;
    return e;
  }

  // Removes a pending timer. False when `id` no longer names it (it fired,
  // or was cancelled, and the entry may have been reused).
  bool cancel(TimerEntry* e, std::uint64_t id) {
    if (e->id != id) return false;
    unlink(e);
    give_back(e);
    --size_;
    return true;
  }

  // Moves time forward to `now`, calling fire(const TimerEntry&) for each
  // timer whose deadline is at or before it, in deadline order by slot.
  template <typename Fire>
  void advance(std::uint64_t now, Fire&& fire) {
    for (;;) {
      auto due = next_due();
      if (!due || due->deadline > now) break;
      elapsed_ = std::max(elapsed_, due->deadline);
      Level& lv = levels_[due->level];
      TimerEntry* e = lv.heads[due->slot];
      lv.heads[due->slot] = nullptr;
      lv.occupied &= ~(std::uint64_t{1} << due->slot);
      while (e) {
        TimerEntry* next = e->next;
        e->prev = e->next = nullptr;
        if (e->when <= elapsed_) {
          fire(static_cast<const TimerEntry&>(*e));
          give_back(e);
          --size_;
        } else {
          link(e);  // cascade to a lower level
        }
        e = next;
      }
    }
    if (now > elapsed_) elapsed_ = now;
  }

  // The tick at which the next slot comes due (entries in it may cascade
  // rather than fire), or none when the wheel is empty.
  std::optional<std::uint64_t> next_deadline() const {
    auto due = next_due();
    if (!due) return std::nullopt;
    return due->deadline;
  }

  // The earliest deadline of all pending entries, or none when the wheel is
  // empty. Each level holds deadlines past the window of the level below,
  // so the earliest lies in the slot next_deadline names: its list is walked.
  std::optional<std::uint64_t> earliest() const {
    auto due = next_due();
    if (!due) return std::nullopt;
    std::uint64_t min = UINT64_MAX;
    for (const TimerEntry* e = levels_[due->level].heads[due->slot]; e; e = e->next) min = std::min(min, e->when);
    return min;
  }

 private:
  struct Due {
    int level;
    int slot;
    std::uint64_t deadline;
  };
  struct Level {
    std::uint64_t occupied = 0;
    std::array<TimerEntry*, kSlots> heads{};
  };

  static std::uint64_t slot_range(int level) { return std::uint64_t{1} << (6 * level); }

  std::optional<Due> next_due() const {
    for (int l = 0; l < kLevels; ++l) {
      const Level& lv = levels_[l];
      if (!lv.occupied) continue;
      std::uint64_t range = slot_range(l);
      std::uint64_t level_range = range * kSlots;
      int now_slot = static_cast<int>((elapsed_ / range) % kSlots);
      std::uint64_t rotated = (lv.occupied >> now_slot) | (now_slot ? lv.occupied << (kSlots - now_slot) : 0);
      int slot = (__builtin_ctzll(rotated) + now_slot) % kSlots;
      std::uint64_t level_start = elapsed_ & ~(level_range - 1);
      std::uint64_t deadline = level_start + static_cast<std::uint64_t>(slot) * range;
      if (slot < now_slot) deadline += level_range;  // only the top level wraps
      return Due{l, slot, deadline};
    }
    return std::nullopt;
  }

  void link(TimerEntry* e) {
    std::uint64_t when = e->when;
    if (when < elapsed_) when = elapsed_;
    if (when - elapsed_ > kMaxDelay) when = elapsed_ + kMaxDelay;
    std::uint64_t masked = (elapsed_ ^ when) | (kSlots - 1);
    int level = (63 - __builtin_clzll(masked)) / 6;
    if (level >= kLevels) level = kLevels - 1;
    int slot = static_cast<int>((when >> (6 * level)) % kSlots);
    Level& lv = levels_[level];
    e->level = static_cast<std::uint8_t>(level);
    e->slot = static_cast<std::uint8_t>(slot);
    e->prev = nullptr;
    e->next = lv.heads[slot];
    if (e->next) e->next->prev = e;
    lv.heads[slot] = e;
    lv.occupied |= std::uint64_t{1} << slot;
  }

  void unlink(TimerEntry* e) {
    Level& lv = levels_[e->level];
    if (e->prev) e->prev->next = e->next;
    else lv.heads[e->slot] = e->next;
    if (e->next) e->next->prev = e->prev;
    if (!lv.heads[e->slot]) lv.occupied &= ~(std::uint64_t{1} << e->slot);
    e->prev = e->next = nullptr;
  }

  // Entries come from chunks that live as long as the wheel, so a handle to a
  // fired timer still points at valid memory and its id check is safe.
  TimerEntry* take_free() {
    if (!free_) {
      constexpr std::size_t kChunk = 4096;
      chunks_.push_back(std::make_unique<TimerEntry[]>(kChunk));
      TimerEntry* c = chunks_.back().get();
      for (std::size_t i = 0; i < kChunk; ++i) {
        c[i].next = free_;
        free_ = &c[i];
      }
    }
    TimerEntry* e = free_;
    free_ = e->next;
    e->next = nullptr;
    return e;
  }
  void give_back(TimerEntry* e) {
    e->id = 0;
    e->prev = nullptr;
    e->next = free_;
    free_ = e;
  }

  std::array<Level, kLevels> levels_{};
  std::uint64_t elapsed_ = 0;
  std::uint64_t next_id_ = 0;
  std::size_t size_ = 0;
  TimerEntry* free_ = nullptr;
  std::vector<std::unique_ptr<TimerEntry[]>> chunks_;
};

}  // namespace host

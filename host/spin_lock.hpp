// SpinLock: a one-byte lock for critical sections of a few dozen
// instructions (a process slot's event queue and links), and cpu_relax,
// the pause a spinning thread makes between looks.
//
// Why not std::mutex: a message takes the slot's lock about three times
// (the send, the step's start, its end), and glibc's mutex's lock and unlock
// cost many times what this one's do (the atomic
// exchange is the same); it is also 40 bytes in every slot, where this is
// one. The sections it guards are short and do not wait on other locks
// (one, the netpoller's first watch of a descriptor, makes a system call:
// only that descriptor's other users contend for it), so a waiter spins,
// testing before it tries again (the cache line stays shared), and yields
// the core after kSpinsBeforeYield looks, in case the holder was preempted
// or is in the kernel.
#pragma once

#include <atomic>
#include <thread>

namespace host {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

class SpinLock {
 public:
  void lock() noexcept {
    int spins = 0;
    while (flag_.exchange(true, std::memory_order_acquire)) {
      while (flag_.load(std::memory_order_relaxed)) {
        if (++spins < kSpinsBeforeYield) cpu_relax();
        else std::this_thread::yield();
      }
    }
  }
  bool try_lock() noexcept {
    return !flag_.load(std::memory_order_relaxed) && !flag_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { flag_.store(false, std::memory_order_release); }

 private:
  static constexpr int kSpinsBeforeYield = 64;
  std::atomic<bool> flag_{false};
};

}  // namespace host

// The runaway monitor's loop, and the signal handler that parks a worker
// thread caught in JIT-compiled code.
#include "host/runaway_monitor.hpp"

#include <signal.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "host/config.hpp"
#include "host/log.hpp"
#include "host/scheduler.hpp"
#include "host/worker.hpp"

namespace host {
namespace {

// Native code ranges (file-backed executable mappings), read from
// /proc/self/maps by the monitor right before it signals; read by the
// handler. A PC outside all of them is in JIT-compiled code. The Lua VM's
// own range (the one holding vm_code) is no obstacle: the interpreter holds
// no lock.
struct CodeRange {
  std::uintptr_t lo, hi;
};
constexpr int kMaxRanges = 1024;
CodeRange g_ranges[kMaxRanges];
std::atomic<int> g_range_count{0};
std::atomic<std::uintptr_t> g_vm_lo{0}, g_vm_hi{0};
std::atomic<int> g_target_tid{0};
std::atomic<bool> g_answered{false};  // the handler ran in the target thread
std::atomic<bool> g_parked{false};    // and parked it

void refresh_native_ranges(std::uintptr_t vm_code) {
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (!f) return;
  int n = 0;
  char line[512];
  while (n < kMaxRanges && std::fgets(line, sizeof line, f)) {
    unsigned long lo, hi, offset, inode;
    char perms[5] = {}, dev[16] = {};
    if (std::sscanf(line, "%lx-%lx %4s %lx %15s %lu", &lo, &hi, perms, &offset, dev, &inode) != 6) continue;
    bool special = std::strstr(line, "[vdso]") || std::strstr(line, "[vsyscall]");
    if (perms[2] != 'x' || (inode == 0 && !special)) continue;
    if (vm_code >= lo && vm_code < hi) {
      g_vm_lo.store(lo, std::memory_order_relaxed);
      g_vm_hi.store(hi, std::memory_order_relaxed);
      continue;
    }
    g_ranges[n++] = {lo, hi};
  }
  std::fclose(f);
  g_range_count.store(n, std::memory_order_release);
}

void on_park_signal(int, siginfo_t*, void* context) {
  if (static_cast<int>(syscall(SYS_gettid)) != g_target_tid.load(std::memory_order_acquire)) return;
  struct Answer {
    ~Answer() { g_answered.store(true, std::memory_order_release); }
  } answer;
  if (Worker::current_thread_parked()) {  // parked itself (park_if_abandoned)
    g_parked.store(true, std::memory_order_release);
    return;
  }
  auto* uc = static_cast<ucontext_t*>(context);
#if defined(__x86_64__)
  auto& pc = uc->uc_mcontext.gregs[REG_RIP];
  auto& sp = uc->uc_mcontext.gregs[REG_RSP];
#elif defined(__aarch64__)
  auto& pc = uc->uc_mcontext.pc;
  auto& sp = uc->uc_mcontext.sp;
#else
  return;  // no parking on other architectures: the hook is all there is
#endif
  auto at = static_cast<std::uintptr_t>(pc);
  for (int i = 0, n = g_range_count.load(std::memory_order_acquire); i < n; ++i)
    if (at >= g_ranges[i].lo && at < g_ranges[i].hi) return;  // native code: locks may be held
  // Resume in park_forever on a fresh, aligned frame below the current one.
  std::uintptr_t s = (static_cast<std::uintptr_t>(sp) - 1024) & ~std::uintptr_t{15};
#if defined(__x86_64__)
  s -= 8;  // as if park_forever had been called
#endif
  sp = static_cast<std::remove_reference_t<decltype(sp)>>(s);
  pc = static_cast<std::remove_reference_t<decltype(pc)>>(reinterpret_cast<std::uintptr_t>(&Worker::park_forever));
  g_parked.store(true, std::memory_order_release);
}

std::int64_t cpu_time_ns(clockid_t clock, std::int64_t otherwise) {
  timespec ts;
  if (clock_gettime(clock, &ts) != 0) return otherwise;  // the thread has ended
  return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

RunawayMonitor::RunawayMonitor(Scheduler& scheduler, std::chrono::milliseconds limit, const void* vm_code)
    : scheduler_(scheduler),
      vm_code_(reinterpret_cast<std::uintptr_t>(vm_code)),
      limit_(limit),
      tick_(std::clamp(limit / 10, std::chrono::milliseconds(5), std::chrono::milliseconds(100))),
      stop_grace_(std::clamp(limit / 5, std::chrono::milliseconds(10), std::chrono::milliseconds(200))),
      watches_(scheduler.workers_.size()) {
  struct sigaction sa {};
  sa.sa_sigaction = on_park_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR2, &sa, nullptr);
  thread_ = std::thread([this] { run(); });
}

RunawayMonitor::~RunawayMonitor() { stop(); }

std::size_t RunawayMonitor::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  return adrift_.size();
}

void RunawayMonitor::run() {
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, tick_, [&] { return stopping_; })) {
    lock.unlock();
    auto now = Clock::now();
    int stuck = 0;
    for (std::size_t i = 0; i < watches_.size(); ++i) stuck += check(i, now);
    int before = scheduler_.stuck_workers_.exchange(stuck, std::memory_order_acq_rel);
    if (before > 0 && stuck == 0) scheduler_.idle_.wake_all();  // parked helpers retire
    if (!adrift_.empty()) {
      refresh_native_ranges(vm_code_);
      std::erase_if(adrift_, [&](const Adrift& a) { return signal_park(a.handle, a.tid, std::chrono::milliseconds(5)); });
    }
    lock.lock();
  }
}

bool RunawayMonitor::check(std::size_t i, Clock::time_point now) {
  Worker& w = *scheduler_.workers_[i];
  Watch& watch = watches_[i];
  std::uint64_t e = w.epoch().load(std::memory_order_acquire) & ~Worker::kBusy;
  const std::uint64_t init_epoch = w.init_epoch();
  if (!(e & 1) || e != watch.epoch) {  // idle, or a new step since the last look
    const std::int64_t cpu = (e & 1) ? cpu_time_ns(w.cpu_clock(), 0) : 0;
    watch = Watch{e, now, cpu, cpu, 0, init_epoch, false, false, {}};
    return false;
  }
  const std::int64_t cpu = cpu_time_ns(w.cpu_clock(), watch.cpu_last);
  // One Init ran through the whole tick (its epoch did not move): its time
  // is the new process's, up to the limit, past which the Init failed to
  // stop itself (compiled code: a module that called jit.on()) and the
  // step is stopped with it. (Not for the handoff: work queued behind the
  // step waits all the same.)
  if (w.init_depth() != 0 && init_epoch == watch.init_epoch && !watch.interrupted) {
    if (std::chrono::nanoseconds(watch.init_cpu) < limit_) {
      watch.cpu_start += cpu - watch.cpu_last;
      watch.init_cpu += cpu - watch.cpu_last;
    }
  } else {
    watch.init_cpu = 0;
  }
  watch.cpu_last = cpu;
  watch.init_epoch = init_epoch;
  // A long step with work waiting behind it: hand the work to another thread.
  const bool long_step = now - watch.since >= std::min<std::chrono::milliseconds>(config::kHandoffAfter, limit_ / 2);
  if (long_step && (!w.deque().empty_approx() || !scheduler_.global_.empty_approx())) hand_off();
  if (!watch.interrupted) {
    // The slot is read before kBusy is held: slots are never freed, and
    // the flag is checked again below, for the step that holds it.
    const ProcessSlot* seen = w.running();
    const bool terminated = seen && seen->terminate_requested.load(std::memory_order_acquire);
    const bool closing = e & Worker::kClosing;
    if ((closing || !terminated) && std::chrono::nanoseconds(cpu - watch.cpu_start) < limit_) return long_step;
    // Closing (a new watch began with it: the close has a limit of its own,
    // terminated or not): no hook runs in its finalizers, and the state is
    // being freed.
    if (closing) {
      log::logger().warn("process {} has run its finalizers for {} ms of CPU time as it closed: stopping it (limit: time)",
                         seen->pid().to_string(), limit_.count());
      return !stop_step(i, e, terminated);
    }
    std::uint64_t expect = e;
    if (!w.epoch().compare_exchange_strong(expect, e | Worker::kBusy, std::memory_order_acq_rel)) return false;
    ProcessSlot* slot = w.running();
    watch.terminated = slot->terminate_requested.load(std::memory_order_acquire);
    if (!watch.terminated)
      log::logger().warn("process {} has run Lua for {} ms of CPU time without yielding: stopping it (limit: time)",
                         slot->pid().to_string(), limit_.count());
    slot->process->Interrupt();
    w.epoch().store(e, std::memory_order_release);
    watch.interrupted = true;
    watch.interrupted_at = now;
    return true;
  }
  if (now - watch.interrupted_at >= stop_grace_) return !stop_step(i, e, watch.terminated);
  return true;
}

void RunawayMonitor::hand_off() {
  if (scheduler_.stopping_workers_.load(std::memory_order_acquire)) return;
  IdleWorkers& idle = scheduler_.idle_;
  if (idle.spinning() > 0) return;  // a spinner will steal it
  if (idle.parked() > 0) {
    idle.wake_one();
    return;
  }
  for (auto& w : scheduler_.workers_) {
    if (w->helper() && w->start_helper()) {
      log::logger().debug("a worker is stuck in a long step: started helper worker {}", static_cast<const void*>(w.get()));
      return;
    }
  }
}

bool RunawayMonitor::signal_park(pthread_t handle, int tid, std::chrono::milliseconds wait) {
  g_parked.store(false, std::memory_order_release);
  g_answered.store(false, std::memory_order_release);
  g_target_tid.store(tid, std::memory_order_release);
  pthread_kill(handle, SIGUSR2);
  const auto until = Clock::now() + wait;
  while (!g_answered.load(std::memory_order_acquire) && Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  g_target_tid.store(0, std::memory_order_release);
  return g_parked.load(std::memory_order_acquire);
}

bool RunawayMonitor::stop_step(std::size_t i, std::uint64_t e, bool terminated) {
  Worker& w = *scheduler_.workers_[i];
  std::uint64_t expect = e;
  if (!w.epoch().compare_exchange_strong(expect, e | Worker::kBusy, std::memory_order_acq_rel)) return false;
  refresh_native_ranges(vm_code_);
  const pthread_t handle = w.native_handle();
  const int tid = w.thread_id();
  const bool parked = signal_park(handle, tid, std::chrono::milliseconds(100));
  ProcessSlot* slot = w.running();
  if (parked) {
    log::logger().warn("process {} is stuck in JIT-compiled code or a finalizer: its worker thread was parked and replaced",
                       slot->pid().to_string());
  } else {
    // In a C call or native code: given up where it is, parked when it can be.
    log::logger().warn("process {} is stuck in a C call or native code: its worker thread was given up and replaced",
                       slot->pid().to_string());
    adrift_.push_back({handle, tid});
  }
  slot->process->Abandon();
  scheduler_.finish(slot, true, {}, terminated ? "terminated" : "limit: time", Scheduler::Ending::Abandon);
  w.replace_thread(parked);
  return true;
}

}  // namespace host

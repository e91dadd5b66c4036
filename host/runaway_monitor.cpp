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
// handler. A PC outside all of them is in JIT-compiled code.
struct CodeRange {
  std::uintptr_t lo, hi;
};
constexpr int kMaxRanges = 1024;
CodeRange g_ranges[kMaxRanges];
std::atomic<int> g_range_count{0};
std::atomic<int> g_target_tid{0};
std::atomic<bool> g_parked{false};

[[noreturn]] void park_forever() {
  for (;;) pause();
}

void refresh_native_ranges() {
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (!f) return;
  int n = 0;
  char line[512];
  while (n < kMaxRanges && std::fgets(line, sizeof line, f)) {
    unsigned long lo, hi, offset, inode;
    char perms[5] = {}, dev[16] = {};
    if (std::sscanf(line, "%lx-%lx %4s %lx %15s %lu", &lo, &hi, perms, &offset, dev, &inode) != 6) continue;
    bool special = std::strstr(line, "[vdso]") || std::strstr(line, "[vsyscall]");
    if (perms[2] == 'x' && (inode != 0 || special)) g_ranges[n++] = {lo, hi};
  }
  std::fclose(f);
  g_range_count.store(n, std::memory_order_release);
}

void on_park_signal(int, siginfo_t*, void* context) {
  if (static_cast<int>(syscall(SYS_gettid)) != g_target_tid.load(std::memory_order_acquire)) return;
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
  pc = static_cast<std::remove_reference_t<decltype(pc)>>(reinterpret_cast<std::uintptr_t>(&park_forever));
  g_parked.store(true, std::memory_order_release);
}

}  // namespace

RunawayMonitor::RunawayMonitor(Scheduler& scheduler, std::chrono::milliseconds limit)
    : scheduler_(scheduler),
      limit_(limit),
      tick_(std::clamp(limit / 10, std::chrono::milliseconds(5), std::chrono::milliseconds(100))),
      watches_(scheduler.workers_.size()) {
  struct sigaction sa {};
  sa.sa_sigaction = on_park_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR2, &sa, nullptr);
  thread_ = std::thread([this] { run(); });
}

RunawayMonitor::~RunawayMonitor() { stop(); }

void RunawayMonitor::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void RunawayMonitor::run() {
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, tick_, [&] { return stopping_; })) {
    lock.unlock();
    auto now = std::chrono::steady_clock::now();
    int stuck = 0;
    for (std::size_t i = 0; i < watches_.size(); ++i) stuck += check(i, now);
    int before = scheduler_.stuck_workers_.exchange(stuck, std::memory_order_acq_rel);
    if (before > 0 && stuck == 0) scheduler_.idle_.wake_all();  // parked helpers retire
    lock.lock();
  }
}

bool RunawayMonitor::check(std::size_t i, std::chrono::steady_clock::time_point now) {
  Worker& w = *scheduler_.workers_[i];
  Watch& watch = watches_[i];
  std::uint64_t e = w.epoch().load(std::memory_order_acquire) & ~Worker::kBusy;
  if (!(e & 1) || e != watch.epoch) {  // idle, or a new step since the last look
    watch = Watch{e, now, now, false, {}};
    return false;
  }
  if (w.initializing().load(std::memory_order_relaxed) != 0 && !watch.interrupted) watch.since += now - watch.last;
  watch.last = now;
  // A long step with work waiting behind it: hand the work to another thread.
  const bool long_step = now - watch.since >= std::min<std::chrono::milliseconds>(config::kHandoffAfter, limit_ / 2);
  if (long_step && (!w.deque().empty_approx() || !scheduler_.global_.empty_approx())) hand_off();
  if (now - watch.since < limit_) return long_step;
  if (!watch.interrupted) {
    std::uint64_t expect = e;
    if (!w.epoch().compare_exchange_strong(expect, e | Worker::kBusy, std::memory_order_acq_rel)) return false;
    ProcessSlot* slot = w.running();
    log::logger().warn("process {} has run for {} ms without yielding: stopping it (limit: time)",
                       slot->pid().to_string(), limit_.count());
    slot->process->Interrupt();
    w.epoch().store(e, std::memory_order_release);
    watch.interrupted = true;
    watch.interrupted_at = now;
    return true;
  }
  if (now - watch.interrupted_at >= std::chrono::milliseconds(200)) return !try_park(i, e);
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

bool RunawayMonitor::try_park(std::size_t i, std::uint64_t e) {
  Worker& w = *scheduler_.workers_[i];
  std::uint64_t expect = e;
  if (!w.epoch().compare_exchange_strong(expect, e | Worker::kBusy, std::memory_order_acq_rel)) return false;
  refresh_native_ranges();
  g_parked.store(false, std::memory_order_release);
  g_target_tid.store(w.thread_id(), std::memory_order_release);
  pthread_kill(w.native_handle(), SIGUSR2);
  for (int k = 0; k < 100 && !g_parked.load(std::memory_order_acquire); ++k)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  g_target_tid.store(0, std::memory_order_release);
  if (!g_parked.load(std::memory_order_acquire)) {
    w.epoch().store(e, std::memory_order_release);  // in native code: try again next tick
    return false;
  }
  ProcessSlot* slot = w.running();
  log::logger().warn("process {} is stuck in JIT-compiled code: its worker thread was parked and replaced",
                     slot->pid().to_string());
  slot->process->Abandon();
  scheduler_.finish(slot, true, {}, "limit: time");
  w.replace_thread();
  return true;
}

}  // namespace host

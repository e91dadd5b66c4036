// The netpoller (netpoll.hpp).
#include "host/io/netpoll.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include "host/error.hpp"
#include "host/log.hpp"

namespace host::io {
namespace {

constexpr std::uint64_t kWakeData = ~std::uint64_t{0};

// A refused watch's error, in the host's "kind: detail" form: out of the
// kernel's epoll watches or memory is a limit, anything else an I/O error.
std::string watch_error(int err) {
  const ErrorKind kind = err == ENOSPC || err == ENOMEM ? ErrorKind::Limit : ErrorKind::Io;
  return make_error(kind, "cannot watch the descriptor: " + std::system_category().message(err));
}

}  // namespace

NetPoller::NetPoller(Complete complete)
    : complete_(std::move(complete)), chunks_(std::make_unique<std::unique_ptr<Desc[]>[]>(kMaxChunks)) {
  epfd_ = epoll_create1(EPOLL_CLOEXEC);
  wakefd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epfd_ < 0 || wakefd_ < 0) throw std::system_error(errno, std::generic_category(), "netpoll: epoll");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeData;
  epoll_ctl(epfd_, EPOLL_CTL_ADD, wakefd_, &ev);
}

NetPoller::~NetPoller() {
  stopping_.store(true, std::memory_order_release);
  interrupt();
  if (thread_.joinable()) thread_.join();
  ::close(epfd_);
  ::close(wakefd_);
}

int NetPoller::open(int fd) {
  int slot;
  {
    std::lock_guard lock(slots_mu_);
    if (!free_.empty()) {
      slot = free_.back();
      free_.pop_back();
    } else {
      if (used_ >= (kMaxChunks << kChunkBits)) {
        errno = EMFILE;
        return -1;
      }
      slot = used_++;
      auto& chunk = chunks_[static_cast<unsigned>(slot) >> kChunkBits];
      if (!chunk) chunk = std::make_unique<Desc[]>(std::size_t{1} << kChunkBits);
    }
  }
  Desc* d = desc(slot);
  {
    std::lock_guard lock(d->mu);
    d->open = true;
    d->registered = false;
    d->fd = fd;
    d->ready[0] = d->ready[1] = false;
    d->waiter[0] = d->waiter[1] = Waiter{};
  }
  open_.fetch_add(1, std::memory_order_relaxed);
  return slot;
}

// Under d->mu, the descriptor open: into the epoll set, where its first
// wait finds it unregistered. The kernel checks a descriptor's readiness
// when it is added and reports what it finds, as an edge would, so what
// came before (bytes, a hangup, a connect's end) reaches this wait.
// Holding the lock keeps a close (which frees the slot, then the
// descriptor's number) from running between the check of open and the
// add, and an event the add reports waits for the waiter set under it.
// The add is a system call under a SpinLock, whose sections are meant to
// be short: it contends only with the same descriptor's other direction,
// its close and its events (each rare at the first wait), and a waiter
// yields the core after its spins.
bool NetPoller::register_locked(Desc* d, int slot, int* err) {
  if (const int refused = refuse_for_test_.load(std::memory_order_relaxed); refused != 0) {
    *err = refused;
    return false;
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.u64 = (static_cast<std::uint64_t>(d->gen) << 32) | static_cast<std::uint32_t>(slot);
  if (epoll_ctl(epfd_, EPOLL_CTL_ADD, d->fd, &ev) != 0) {
    *err = errno;
    return false;
  }
  d->registered = true;
  registered_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void NetPoller::close(int slot) {
  if (slot < 0) return;
  Desc* d = desc(slot);
  Waiter woken[2];
  {
    std::lock_guard lock(d->mu);
    if (!d->open) return;
    d->open = false;
    if (d->registered) registered_.fetch_sub(1, std::memory_order_relaxed);
    d->registered = false;
    ++d->gen;
    for (int i = 0; i < 2; ++i) {
      woken[i] = d->waiter[i];
      d->waiter[i] = Waiter{};
    }
  }
  // The descriptor leaves the epoll set when its owner closes it (the
  // kernel drops a closed descriptor's registration); events already read
  // carry the old generation and are ignored.
  for (const Waiter& w : woken)
    if (w.tag != 0) {
      armed_.fetch_sub(1, std::memory_order_relaxed);
      complete_taken(w);
    }
  open_.fetch_sub(1, std::memory_order_relaxed);
  std::lock_guard lock(slots_mu_);
  free_.push_back(slot);
}

std::uint64_t NetPoller::tag_for(int slot, Dir dir) {
  const std::uint32_t seq = desc(slot)->seq.fetch_add(1, std::memory_order_relaxed) & ((1u << kSeqBits) - 1);
  return kTagMark | (static_cast<std::uint64_t>(slot) << (kSeqBits + 1)) | (static_cast<std::uint64_t>(dir) << kSeqBits) | seq;
}

void NetPoller::arm(const Pid& pid, std::uint64_t tag) {
  const int slot = slot_of(tag);
  Desc* d = desc(slot);
  const Dir dir = dir_of(tag);
  int err = 0;
  {
    std::lock_guard lock(d->mu);
    if (d->open && !d->ready[dir] && (d->registered || register_locked(d, slot, &err))) {
      d->waiter[dir] = Waiter{pid, tag};
      armed_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    d->ready[dir] = false;
  }
  if (err != 0) {
    // The kernel would not watch it (its epoll limits, or memory): the
    // wait fails rather than wait for an edge that cannot come. Said
    // once in the log, so an exhausted limit is not silent.
    if (!refusal_logged_.exchange(true, std::memory_order_relaxed))
      log::logger().warn("netpoll: the kernel refused to watch a descriptor ({}); its waits fail",
                         std::system_category().message(err));
    complete_(pid, tag, watch_error(err));
    return;
  }
  complete_(pid, tag, {});
}

// A waiter taken from its descriptor is completed here, whatever
// happens: a completion that throws (its event could not be queued; the
// queue is then as it was) is retried as a failure, and the other
// direction's waiter, taken with it, is still completed by the caller.
void NetPoller::complete_taken(const Waiter& w) {
  try {
    complete_(w.pid, w.tag, {});
    return;
  } catch (const std::exception& e) {
    try {
      complete_(w.pid, w.tag, make_error(ErrorKind::Io, std::string("wait's completion failed: ") + e.what()));
      return;
    } catch (const std::exception&) {
    }
  }
  log::logger().error("netpoll: the completion of tag {} for {} could not be queued", w.tag, w.pid.to_string());
}

bool NetPoller::cancel(const Pid& pid, std::uint64_t tag) {
  Desc* d = desc(slot_of(tag));
  const Dir dir = dir_of(tag);
  std::lock_guard lock(d->mu);
  if (d->waiter[dir].tag != tag || !(d->waiter[dir].pid == pid)) {
    // Completed already: its readiness was spent on a wait whose owner
    // no longer wants it (a watch given up for a read of its own). The
    // edge is not seen again, so the next wait on this side is told at
    // once and tries for itself (at worst a retry that finds nothing).
    if (d->open) d->ready[dir] = true;
    return false;
  }
  d->waiter[dir] = Waiter{};
  armed_.fetch_sub(1, std::memory_order_relaxed);
  return true;
}

std::uint32_t NetPoller::generation(int slot) {
  Desc* d = desc(slot);
  std::lock_guard lock(d->mu);
  return d->gen;
}

void NetPoller::ready(int slot, std::uint32_t gen, bool read, bool write) {
  Desc* d = desc(slot);
  Waiter woken[2];
  {
    std::lock_guard lock(d->mu);
    if (!d->open || d->gen != gen) return;
    const bool dirs[2] = {read, write};
    for (int i = 0; i < 2; ++i) {
      if (!dirs[i]) continue;
      if (d->waiter[i].tag != 0) {
        woken[i] = d->waiter[i];
        d->waiter[i] = Waiter{};
      } else {
        d->ready[i] = true;
      }
    }
  }
  for (const Waiter& w : woken)
    if (w.tag != 0) {
      armed_.fetch_sub(1, std::memory_order_relaxed);
      complete_taken(w);
    }
}

void NetPoller::wait(Batch& batch, bool block) {
  epoll_event events[kBatch];
  batch.n = 0;
  int n;
  do {
    n = epoll_wait(epfd_, events, kBatch, block ? -1 : 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    log::logger().error("netpoll: epoll_wait failed: {}", std::system_category().message(errno));
    return;
  }
  for (int i = 0; i < n; ++i) {
    if (events[i].data.u64 == kWakeData) {
      // Level-triggered: the blocking wait drains it (or every wait would
      // return at once). Only that one: a look without blocking that
      // drained an interrupt meant for a blocked wait would send that
      // wait back to sleep (the kernel rechecks a level-triggered
      // descriptor before it reports it).
      std::uint64_t count;
      if (block)
        while (read(wakefd_, &count, sizeof count) > 0) {
        }
      continue;
    }
    batch.data[batch.n] = events[i].data.u64;
    batch.events[batch.n] = events[i].events;
    ++batch.n;
  }
}

void NetPoller::dispatch(const Batch& batch) {
  for (int i = 0; i < batch.n; ++i) {
    const std::uint64_t data = batch.data[i];
    const std::uint32_t e = batch.events[i];
    const bool broken = (e & (EPOLLERR | EPOLLHUP)) != 0;
    ready(static_cast<int>(data & 0xffffffffu), static_cast<std::uint32_t>(data >> 32),
          broken || (e & (EPOLLIN | EPOLLRDHUP)), broken || (e & EPOLLOUT));
  }
}

void NetPoller::interrupt() {
  const std::uint64_t one = 1;
  if (write(wakefd_, &one, sizeof one) < 0) {
    // The counter is full (2^64 - 2 writes never read): a wait returns anyway.
  }
}

void NetPoller::poll_on_own_thread() {
  thread_ = std::thread([this] {
    Batch batch;
    while (!stopping_.load(std::memory_order_acquire)) {
      wait(batch, true);
      dispatch(batch);
    }
  });
}

}  // namespace host::io

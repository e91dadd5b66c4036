// host/io/netpoll.hpp: waits on socket pairs while a writer makes edges
// and other threads open and close descriptors, checking that no wait is
// lost (each armed wait completes, or its cancel says it never will), none
// completes twice, and a closed descriptor's slot never wakes its next
// owner's waits with the old one's edges.
#include <doctest/doctest.h>

#include <sys/socket.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "host/io/netpoll.hpp"

namespace {

using host::Pid;
using host::io::NetPoller;
using namespace std::chrono_literals;

// The completions seen, by tag.
struct Sink {
  std::mutex mu;
  std::unordered_map<std::uint64_t, int> done;
  void add(std::uint64_t tag) {
    std::lock_guard lock(mu);
    ++done[tag];
  }
  int count(std::uint64_t tag) {
    std::lock_guard lock(mu);
    auto it = done.find(tag);
    return it == done.end() ? 0 : it->second;
  }
};

bool wait_for(Sink& sink, std::uint64_t tag, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (sink.count(tag) == 0) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::yield();
  }
  return true;
}

void drain(int fd) {
  char buf[4096];
  while (::recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0) {
  }
}

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int kRounds = 400;
#else
constexpr int kRounds = 3000;
#endif

// One socket pair registered with a poller that the test polls itself (as
// the workers do), so that it knows when an edge has been read without
// sleeping for it. sp[0] is the registered end, sp[1] the writer's.
struct PolledPair {
  Sink sink;
  NetPoller poller{[this](const Pid&, std::uint64_t tag, std::string_view) { sink.add(tag); }};
  int sp[2] = {-1, -1};
  int slot = -1;
  PolledPair() {
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sp) == 0);
    slot = poller.open(sp[0]);
    REQUIRE(slot >= 0);
  }
  ~PolledPair() {
    ::close(sp[0]);
    ::close(sp[1]);
  }
  void poll_once() {
    NetPoller::Batch batch;
    poller.wait(batch, true);
    poller.dispatch(batch);
  }
};

}  // namespace

TEST_CASE("netpoll: every armed wait completes once, or its cancel says it never will") {
  Sink sink;
  NetPoller poller([&](const Pid&, std::uint64_t tag, std::string_view) { sink.add(tag); });
  poller.poll_on_own_thread();
  constexpr int kPairs = 8;
  int fds[kPairs][2];
  int slots[kPairs];
  for (int i = 0; i < kPairs; ++i) {
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds[i]) == 0);
    slots[i] = poller.open(fds[i][0]);
    REQUIRE(slots[i] >= 0);
  }
  std::atomic<bool> stop{false};
  // One edge a round, so that a lost one shows as a wait that never ends:
  // the owner writes its byte itself before it waits (the edge may come
  // before the wait), or asks this thread for it after (it comes while the
  // wait is armed).
  std::atomic<int> asked[kPairs] = {};
  std::thread writer([&] {
    while (!stop.load()) {
      for (int i = 0; i < kPairs; ++i) {
        if (asked[i].load() == 0) continue;
        asked[i].fetch_sub(1);
        (void)::send(fds[i][1], "x", 1, MSG_NOSIGNAL);
      }
      std::this_thread::yield();
    }
  });
  // Slot churn beside them: descriptors opened and closed while edges come.
  std::thread churn([&] {
    while (!stop.load()) {
      int sp[2];
      if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sp) != 0) continue;
      const int slot = poller.open(sp[0]);
      (void)::send(sp[1], "y", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (slot >= 0) {
        const std::uint64_t tag = poller.tag_for(slot, NetPoller::kRead);
        poller.arm(Pid{}, tag);
        poller.close(slot);  // a wait armed on a closed slot completes at once
      }
      ::close(sp[0]);
      ::close(sp[1]);
    }
  });
  std::atomic<int> lost{0}, doubled{0}, cancelled_done{0}, uncancellable{0};
  std::vector<std::thread> owners;
  for (int i = 0; i < kPairs; ++i) {
    owners.emplace_back([&, i] {
      std::mt19937 rng(static_cast<unsigned>(i) * 7919u);
      std::vector<std::uint64_t> cancelled;
      for (int r = 0; r < kRounds; ++r) {
        drain(fds[i][0]);  // as a task reads until EAGAIN before it waits
        const std::uint64_t tag = poller.tag_for(slots[i], NetPoller::kRead);
        const unsigned mode = rng() % 3;
        if (mode == 0) (void)::send(fds[i][1], "x", 1, MSG_NOSIGNAL);
        poller.arm(Pid{}, tag);
        if (mode == 1) asked[i].fetch_add(1);
        if (mode == 2) {
          if (poller.cancel(Pid{}, tag)) {
            cancelled.push_back(tag);
            continue;
          }
          ++uncancellable;  // no edge came for it: it must still be armed
        }
        if (!wait_for(sink, tag, 5000ms)) {
          ++lost;
          return;
        }
      }
      std::this_thread::sleep_for(20ms);  // a late completion of a cancelled wait would show by now
      for (std::uint64_t t : cancelled)
        if (sink.count(t) != 0) ++cancelled_done;
    });
  }
  for (auto& t : owners) t.join();
  stop.store(true);
  writer.join();
  churn.join();
  {
    std::lock_guard lock(sink.mu);
    for (const auto& [tag, n] : sink.done)
      if (n != 1) ++doubled;
  }
  CHECK(lost.load() == 0);
  CHECK(doubled.load() == 0);
  CHECK(cancelled_done.load() == 0);
  CHECK(uncancellable.load() == 0);
  for (int i = 0; i < kPairs; ++i) {
    poller.close(slots[i]);
    ::close(fds[i][0]);
    ::close(fds[i][1]);
  }
  CHECK(poller.open_count() == 0);
}

TEST_CASE_FIXTURE(PolledPair, "netpoll: an edge before the wait is kept for it; a close wakes the waiter") {
  // The first wait registers; registration reports the writable edge at
  // once; a read wait waits.
  const std::uint64_t r1 = poller.tag_for(slot, NetPoller::kRead);
  poller.arm(Pid{}, r1);
  CHECK(poller.waiting());
  poll_once();
  CHECK(sink.count(r1) == 0);
  REQUIRE(::send(sp[1], "a", 1, 0) == 1);
  poll_once();
  CHECK(sink.count(r1) == 1);
  CHECK_FALSE(poller.waiting());
  // An edge with no waiter is remembered: the next wait completes at once.
  drain(sp[0]);
  REQUIRE(::send(sp[1], "b", 1, 0) == 1);
  poll_once();
  const std::uint64_t r2 = poller.tag_for(slot, NetPoller::kRead);
  poller.arm(Pid{}, r2);
  CHECK(sink.count(r2) == 1);
  // A wait on a descriptor that closes completes (its retry sees closed).
  drain(sp[0]);
  const std::uint64_t r3 = poller.tag_for(slot, NetPoller::kRead);
  poller.arm(Pid{}, r3);
  CHECK(sink.count(r3) == 0);
  poller.close(slot);
  CHECK(sink.count(r3) == 1);
  CHECK_FALSE(poller.waiting());
  // An interrupt ends a blocking wait, and only the blocking wait drains
  // it: a look without blocking leaves it for the wait it was meant for.
  poller.interrupt();
  NetPoller::Batch batch;
  poller.wait(batch, false);
  CHECK(batch.n == 0);
  poll_once();  // returns: the interrupt is still there
}

TEST_CASE_FIXTURE(PolledPair, "netpoll: an edge spent on a wait cancelled too late is kept for the next wait") {
  // A watch given up for a read of its own (an exec pipe's read-ahead
  // when a receive comes): the cancel reaches the poller after an edge
  // already completed the watch, and the receive's wait, armed after,
  // must still hear of that edge.
  const std::uint64_t watch = poller.tag_for(slot, NetPoller::kRead);
  poller.arm(Pid{}, watch);
  poll_once();  // the writable edge of the registration
  CHECK(sink.count(watch) == 0);
  REQUIRE(::send(sp[1], "a", 1, 0) == 1);
  poll_once();
  CHECK(sink.count(watch) == 1);
  CHECK_FALSE(poller.cancel(Pid{}, watch));
  const std::uint64_t read = poller.tag_for(slot, NetPoller::kRead);
  poller.arm(Pid{}, read);
  CHECK(sink.count(read) == 1);
  CHECK_FALSE(poller.waiting());
  poller.close(slot);
}

TEST_CASE_FIXTURE(PolledPair, "netpoll: a descriptor joins the epoll set at its first wait, and what came before is not lost") {
  // Opened, not registered: a connection served without waiting costs the
  // poller no system call.
  CHECK(poller.open_count() == 1);
  CHECK(poller.registered_count() == 0);
  // Bytes and a hangup before the first wait: the registration reports
  // them, so the wait completes at the next poll.
  REQUIRE(::send(sp[1], "a", 1, 0) == 1);
  ::shutdown(sp[1], SHUT_WR);
  const std::uint64_t r1 = poller.tag_for(slot, NetPoller::kRead);
  poller.arm(Pid{}, r1);
  CHECK(poller.registered_count() == 1);
  poll_once();
  CHECK(sink.count(r1) == 1);
  // Registered once: the next wait adds nothing.
  drain(sp[0]);
  const std::uint64_t r2 = poller.tag_for(slot, NetPoller::kRead);
  poller.arm(Pid{}, r2);
  CHECK(poller.registered_count() == 1);
  // A close takes it out of the count, and the slot's next descriptor
  // registers afresh at its own first wait.
  poller.close(slot);
  CHECK(sink.count(r2) == 1);
  CHECK(poller.registered_count() == 0);
  int sp2[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sp2) == 0);
  slot = poller.open(sp2[0]);
  REQUIRE(slot >= 0);
  CHECK(poller.registered_count() == 0);
  REQUIRE(::send(sp2[1], "b", 1, 0) == 1);
  const std::uint64_t r3 = poller.tag_for(slot, NetPoller::kRead);
  poller.arm(Pid{}, r3);
  poll_once();
  CHECK(sink.count(r3) == 1);
  poller.close(slot);
  ::close(sp2[0]);
  ::close(sp2[1]);
  CHECK(poller.open_count() == 0);
}

TEST_CASE("netpoll: a wait on a descriptor the kernel will not watch fails with why") {
  std::string error;
  std::uint64_t done = 0;
  NetPoller poller([&](const Pid&, std::uint64_t tag, std::string_view e) {
    done = tag;
    error = e;
  });
  // epoll refuses a regular file (EPERM): as a socket the kernel's watch
  // limits turn away, its wait must end rather than wait for ever.
  char path[] = "/tmp/netpoll_testXXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::unlink(path);
  const int slot = poller.open(fd);
  REQUIRE(slot >= 0);
  const std::uint64_t tag = poller.tag_for(slot, NetPoller::kRead);
  poller.arm(Pid{}, tag);
  CHECK(done == tag);
  // In the host's "kind: detail" form (EPERM is not a limit).
  CHECK(error.rfind("io: ", 0) == 0);
  CHECK_FALSE(poller.waiting());
  CHECK(poller.registered_count() == 0);
  poller.close(slot);
  ::close(fd);
}

TEST_CASE_FIXTURE(PolledPair, "netpoll: wake_reader with a closed descriptor's generation leaves the slot's next one alone") {
  // The HTTP acceptor's drain names a connection by slot and generation,
  // noted long before: a wake for a descriptor closed since must not end
  // a wait of the next descriptor given the same slot.
  const std::uint32_t old_gen = poller.generation(slot);
  poller.close(slot);
  int next[2] = {-1, -1};
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, next) == 0);
  const int again = poller.open(next[0]);
  REQUIRE(again == slot);  // the freed slot is the one given out next
  CHECK(poller.generation(again) != old_gen);
  // (Nothing registered yet: a descriptor joins the epoll set at its first wait.)
  const std::uint64_t read = poller.tag_for(again, NetPoller::kRead);
  poller.arm(Pid{}, read);
  poller.wake_reader(again, old_gen);
  CHECK(sink.count(read) == 0);
  CHECK(poller.waiting());
  // Its own generation wakes it.
  poller.wake_reader(again, poller.generation(again));
  CHECK(sink.count(read) == 1);
  CHECK_FALSE(poller.waiting());
  poller.close(again);
  ::close(next[0]);
  ::close(next[1]);
}

TEST_CASE("netpoll: a close whose first completion throws still completes both waiters") {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0);
  std::vector<std::pair<std::uint64_t, std::string>> seen;
  bool thrown = false;
  NetPoller poller([&](const Pid&, std::uint64_t tag, std::string_view e) {
    if (!thrown) {
      thrown = true;
      throw std::runtime_error("queue full");
    }
    seen.emplace_back(tag, std::string(e));
  });
  const int slot = poller.open(sv[0]);
  REQUIRE(slot >= 0);
  const std::uint64_t rtag = poller.tag_for(slot, NetPoller::kRead);
  const std::uint64_t wtag = poller.tag_for(slot, NetPoller::kWrite);
  poller.arm(Pid{}, rtag);  // nothing polls: both wait
  poller.arm(Pid{}, wtag);
  REQUIRE(poller.waiting());
  poller.close(slot);
  REQUIRE(seen.size() == 2);
  CHECK(seen[0].first == rtag);  // the one that threw, retried as a failure
  CHECK(seen[0].second.rfind("io: ", 0) == 0);
  CHECK(seen[1].first == wtag);
  CHECK(seen[1].second.empty());
  CHECK_FALSE(poller.waiting());
  CHECK(poller.open_count() == 0);
  ::close(sv[0]);
  ::close(sv[1]);
}

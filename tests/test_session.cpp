// The cluster's session layer (host/cluster/session.hpp) and its frames
// (wire.hpp, batch.hpp): every message arrives once and in order over a transport
// that drops, duplicates and reorders, and a corrupt frame is refused.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "host/cluster/batch.hpp"
#include "host/cluster/buffer_pool.hpp"
#include "host/cluster/outbox.hpp"
#include "host/cluster/session.hpp"
#include "host/cluster/wire.hpp"
#include "tests/watchdog.hpp"

using host::cluster::Body;
using host::cluster::Session;
using host::cluster::SessionLimits;
using namespace std::chrono_literals;

namespace {

// One direction of a lossy link: frames pushed may be dropped, doubled or
// swapped with the one before (NATS drops; a resend doubles; the test
// reorders too, which NATS over one connection does not).
struct LossyLink {
  struct Frame {
    bool data = false;
    std::uint64_t seq = 0;
    std::uint64_t ack = 0;
    std::string body;
  };
  double drop = 0, dup = 0, swap = 0;
  std::mutex mu;
  std::deque<Frame> in_flight;  // guarded by mu
  std::mt19937_64 rng;          // guarded by mu
  explicit LossyLink(std::uint64_t seed) : rng(seed) {}

  void push(Frame f) {
    std::lock_guard lock(mu);
    std::uniform_real_distribution<double> u(0, 1);
    if (u(rng) < drop) return;
    if (u(rng) < dup) in_flight.push_back(f);
    in_flight.push_back(std::move(f));
    if (in_flight.size() >= 2 && u(rng) < swap) std::swap(in_flight[in_flight.size() - 1], in_flight[in_flight.size() - 2]);
  }
  bool pop(Frame& out) {
    std::lock_guard lock(mu);
    if (in_flight.empty()) return false;
    out = std::move(in_flight.front());
    in_flight.pop_front();
    return true;
  }
};

std::string body_of(std::uint64_t i) { return "message " + std::to_string(i) + std::string(i % 97, 'x'); }

// A sender's session and a receiver's, on a lossy link each way, run on
// one thread with a simulated clock: `count` messages, checked in order.
void run_simulated(std::uint64_t seed, double drop, double dup, double swap, std::uint64_t count) {
  SessionLimits limits;
  limits.window_bytes = 64 << 10;
  limits.resend_after = 30ms;
  Session sender(limits), receiver(limits);
  LossyLink forth(seed), back(seed + 1);
  forth.drop = back.drop = drop;
  forth.dup = back.dup = dup;
  forth.swap = back.swap = swap;
  Session::Clock::time_point now{};
  std::uint64_t next = 0, got = 0;
  for (int round = 0; got < count; ++round) {
    REQUIRE(round < 200000);  // a stuck session fails rather than hangs
    now += 1ms;
    // The sender sends while its window has room.
    for (int i = 0; i < 8 && next < count && !sender.window_full(); ++i, ++next) {
      std::string body = body_of(next);
      forth.push({true, sender.next_seq(), sender.cumulative_ack(), body});
      (void)sender.stamp(Body(body), now);
    }
    sender.resend_if_stalled(now, [&](std::uint64_t seq, const Body& body) {
      forth.push({true, seq, sender.cumulative_ack(), body.bytes()});
    });
    LossyLink::Frame f;
    while (forth.pop(f)) {
      if (receiver.arrive(f.seq, f.body.size()) == Session::Arrival::Deliver) {
        REQUIRE(f.body == body_of(got));  // in order, none lost, none twice
        ++got;
      }
      if (receiver.ack_due_now()) {
        back.push({false, 0, receiver.cumulative_ack(), {}});
        receiver.ack_sent();
      }
    }
    if (round % 10 == 0 && receiver.ack_due_at_tick()) {
      back.push({false, 0, receiver.cumulative_ack(), {}});
      receiver.ack_sent();
    }
    while (back.pop(f)) sender.acknowledged(f.ack, now);
  }
  CHECK(got == count);
  // Everything delivered is acknowledged in the end.
  for (int round = 0; sender.unacked_messages() > 0 && round < 10000; ++round) {
    now += 1ms;
    sender.resend_if_stalled(now, [&](std::uint64_t seq, const Body& body) {
      forth.push({true, seq, 0, body.bytes()});
    });
    LossyLink::Frame f;
    while (forth.pop(f)) (void)receiver.arrive(f.seq, f.body.size());
    back.push({false, 0, receiver.cumulative_ack(), {}});
    while (back.pop(f)) sender.acknowledged(f.ack, now);
  }
  CHECK(sender.unacked_messages() == 0);
  CHECK(sender.unacked_bytes() == 0);
}

}  // namespace

TEST_CASE("a session delivers every message once and in order over a lossless link") {
  run_simulated(1, 0, 0, 0, 5000);
}

TEST_CASE("a session delivers every message once and in order when the link drops, doubles and reorders") {
  // Sweep the faults: each alone, then all at once, over several seeds.
  struct Faults {
    double drop, dup, swap;
  };
  for (Faults f : {Faults{0.1, 0, 0}, Faults{0, 0.2, 0}, Faults{0, 0, 0.2}, Faults{0.05, 0.05, 0.05},
                   Faults{0.3, 0.1, 0.1}}) {
    for (std::uint64_t seed : {7u, 8u, 9u}) {
      CAPTURE(f.drop);
      CAPTURE(f.dup);
      CAPTURE(f.swap);
      CAPTURE(seed);
      run_simulated(seed, f.drop, f.dup, f.swap, 3000);
    }
  }
}

TEST_CASE("a session's window fills with unacknowledged bytes and empties with the ack") {
  SessionLimits limits;
  limits.window_bytes = 100;
  Session s(limits);
  const auto now = Session::Clock::now();
  CHECK_FALSE(s.window_full());
  for (int i = 0; i < 10; ++i) (void)s.stamp(Body(std::string(10, 'a')), now);
  CHECK(s.window_full());
  CHECK(s.unacked_bytes() == 100);
  s.acknowledged(4, now);
  CHECK_FALSE(s.window_full());
  CHECK(s.unacked_messages() == 6);
  s.acknowledged(2, now);  // a late, smaller ack changes nothing
  CHECK(s.unacked_messages() == 6);
  s.acknowledged(99, now);  // beyond what was sent: a foreign frame, ignored
  CHECK(s.unacked_messages() == 6);
  s.acknowledged(10, now);
  CHECK(s.unacked_messages() == 0);
}

TEST_CASE("a stalled session resends everything unacknowledged, oldest first, once per resend period") {
  SessionLimits limits;
  limits.resend_after = 100ms;
  Session s(limits);
  const auto t0 = Session::Clock::now();
  for (int i = 0; i < 3; ++i) (void)s.stamp(Body("m" + std::to_string(i)), t0);
  std::vector<std::uint64_t> seqs;
  auto emit = [&](std::uint64_t seq, const Body&) { seqs.push_back(seq); };
  CHECK(s.resend_if_stalled(t0 + 50ms, emit) == 0);
  CHECK(s.resend_if_stalled(t0 + 100ms, emit) == 3);
  CHECK(seqs == std::vector<std::uint64_t>{1, 2, 3});
  CHECK(s.resend_if_stalled(t0 + 150ms, emit) == 0);  // not again until another period passed
  s.acknowledged(2, t0 + 160ms);
  seqs.clear();
  CHECK(s.resend_if_stalled(t0 + 270ms, emit) == 1);
  CHECK(seqs == std::vector<std::uint64_t>{3});
}

TEST_CASE("a receiver takes only the next number: duplicates and gaps are dropped and acknowledged again") {
  Session r;
  CHECK(r.arrive(1, 1) == Session::Arrival::Deliver);
  CHECK(r.arrive(3, 1) == Session::Arrival::Gap);
  CHECK(r.arrive(1, 1) == Session::Arrival::Duplicate);
  CHECK(r.cumulative_ack() == 1);
  CHECK(r.ack_due_at_tick());
  r.ack_sent();
  CHECK_FALSE(r.ack_due_at_tick());
  CHECK(r.arrive(2, 1) == Session::Arrival::Deliver);
  CHECK(r.arrive(3, 1) == Session::Arrival::Deliver);
  CHECK(r.cumulative_ack() == 3);
}

namespace {

// One end of a node pair as NatsNode runs it (received, send_body, the
// tick), over encoded frames: a frame is judged by its epochs first; a
// stale one is dropped, a reset or a newer session of the peer marks this
// end reset.
struct PairEnd {
  using Frame = host::cluster::Frame;
  using FrameKind = host::cluster::FrameKind;
  PairEnd(std::uint32_t node_, std::uint32_t peer_, std::uint32_t epoch, std::uint32_t floor, bool wary = false)
      : node(node_), peer(peer_), s(SessionLimits{}, epoch, floor, wary) {}
  std::uint32_t node, peer;
  Session s;
  std::vector<std::string> got;
  bool reset = false;
  std::deque<std::string> out;  // frames to the other end, in order

  Frame frame(FrameKind kind) const {
    Frame f;
    f.kind = kind;
    f.from_node = node;
    f.to_node = peer;
    f.from_epoch = s.epoch();
    f.to_epoch = s.peer_epoch();
    return f;
  }
  void send(const std::string& body, Session::Clock::time_point now) {
    Frame f = frame(FrameKind::Data);
    f.seq = s.next_seq();
    f.ack = s.cumulative_ack();
    f.text = body;
    out.push_back(encode_frame(f));
    s.ack_sent();
    (void)s.stamp(Body(body), now);
  }
  void ack() {
    Frame f = frame(FrameKind::Ack);
    f.ack = s.cumulative_ack();
    out.push_back(encode_frame(f));
    s.ack_sent();
  }
  std::string reset_frame() const { return encode_frame(frame(FrameKind::Bye)); }
  void tick(Session::Clock::time_point now) {
    if (s.ack_due_at_tick() || !s.peer_knows_epoch()) ack();
    s.resend_if_stalled(now, [&](std::uint64_t seq, const Body& body) {
      Frame f = frame(FrameKind::Data);
      f.seq = seq;
      f.ack = s.cumulative_ack();
      body.framed(f, [&](std::string_view frame) { out.emplace_back(frame); });
    });
  }
  void receive(const std::string& bytes, Session::Clock::time_point now) {
    auto f = host::cluster::decode_frame(bytes);
    REQUIRE(f);
    REQUIRE(f->to_node == node);
    const Session::Verdict v = s.judge(f->from_epoch, f->to_epoch);
    if (v == Session::Verdict::Stale) return;
    if (v == Session::Verdict::Newer || v == Session::Verdict::Ended || f->kind == FrameKind::Bye) {
      reset = true;
      return;
    }
    s.acknowledged(f->ack, now);
    if (f->kind == FrameKind::Data && s.arrive(f->seq, f->text.size()) == Session::Arrival::Deliver)
      got.emplace_back(f->text);
  }
};

// Everything each end has queued, to the other (dropped when `lose`).
void exchange(PairEnd& a, PairEnd& b, Session::Clock::time_point now, bool lose = false) {
  while (!a.out.empty() || !b.out.empty()) {
    for (; !a.out.empty(); a.out.pop_front())
      if (!lose) b.receive(a.out.front(), now);
    for (; !b.out.empty(); b.out.pop_front())
      if (!lose) a.receive(b.out.front(), now);
  }
}

// Heartbeat rounds 200 ms apart (each end ticks, then the two exchange)
// while busy(), at most `rounds` of them.
template <class Busy>
void run_rounds(PairEnd& a, PairEnd& b, Session::Clock::time_point& now, int rounds, Busy busy) {
  using namespace std::chrono_literals;
  for (int round = 0; busy() && round < rounds; ++round) {
    now += 200ms;
    a.tick(now);
    b.tick(now);
    exchange(a, b, now);
  }
}

}  // namespace

TEST_CASE("frames of an earlier session of the pair (reset, ack, data) leave the new session untouched") {
  using host::cluster::Frame;
  using host::cluster::FrameKind;
  Session::Clock::time_point now{};
  // The old sessions: each end epoch 1; both ends learn the other's.
  PairEnd a_old(10, 20, 1, 0), b_old(20, 10, 1, 0);
  for (int i = 0; i < 2; ++i) a_old.send("old " + std::to_string(i), now);
  b_old.send("b old 0", now);
  exchange(a_old, b_old, now);
  a_old.tick(now);
  b_old.tick(now);
  exchange(a_old, b_old, now);
  REQUIRE(a_old.s.peer_epoch() == 1);
  REQUIRE(b_old.s.peer_epoch() == 1);
  REQUIRE(b_old.got.size() == 2);
  // What B's old session still has in flight to A when the pair goes down
  // (a partition): an ack, data, the reset B sends as it takes A down, and
  // data sent before it heard from A at all (no epoch of A's named).
  b_old.ack();
  const std::string stale_ack = b_old.out.back();
  b_old.send("b stale 1", now);
  const std::string stale_data = b_old.out.back();
  const std::string stale_reset = b_old.reset_frame();
  Frame blind = b_old.frame(FrameKind::Data);
  blind.to_epoch = 0;
  blind.seq = 1;
  blind.text = "b stale 0";
  const std::string stale_blind = encode_frame(blind);
  // And from A's old session to B: an ack of what B's old session sent.
  a_old.ack();
  const std::string stale_ack_to_b = a_old.out.back();

  // The new sessions, as NatsNode makes them after the partition heals:
  // the next epoch of each end, the peer's old epoch as the floor.
  PairEnd a(10, 20, 2, a_old.s.peer_epoch()), b(20, 10, 2, b_old.s.peer_epoch());
  a.tick(now);
  b.tick(now);
  exchange(a, b, now);
  // A's first three messages are lost in flight; then the stale frames
  // arrive (an ack of 2 would take two of them out of the resend ring).
  for (int i = 0; i < 3; ++i) a.send("new " + std::to_string(i), now);
  exchange(a, b, now, /*lose=*/true);
  for (const std::string* f : {&stale_blind, &stale_ack, &stale_data, &stale_reset}) a.receive(*f, now);
  b.receive(stale_ack_to_b, now);
  CHECK_FALSE(a.reset);
  CHECK_FALSE(b.reset);
  CHECK(a.got.empty());
  CHECK(a.s.unacked_messages() == 3);
  CHECK(a.s.peer_epoch() == 2);
  // The new sessions go on: A resends, both send more, nothing is lost,
  // doubled or reordered.
  for (int i = 3; i < 5; ++i) a.send("new " + std::to_string(i), now);
  for (int i = 0; i < 2; ++i) b.send("b new " + std::to_string(i), now);
  run_rounds(a, b, now, 100, [&] { return a.s.unacked_messages() || b.s.unacked_messages(); });
  CHECK(b.got == std::vector<std::string>{"new 0", "new 1", "new 2", "new 3", "new 4"});
  CHECK(a.got == std::vector<std::string>{"b new 0", "b new 1"});
  CHECK(a.s.unacked_messages() == 0);
  CHECK(b.s.unacked_messages() == 0);
  CHECK_FALSE(a.reset);
  CHECK_FALSE(b.reset);
  // A reset of the current session still takes effect.
  a.receive(b.reset_frame(), now);
  CHECK(a.reset);
}

TEST_CASE("after a session that ended before either end learned the other's epoch, its frames leave the next untouched") {
  using host::cluster::Frame;
  using host::cluster::FrameKind;
  Session::Clock::time_point now{};
  // The old sessions hear nothing from each other (a partition from their
  // start): B's data and reset, naming no epoch of A's, are in flight.
  PairEnd a_old(10, 20, 1, 0), b_old(20, 10, 1, 0);
  b_old.send("b stale 0", now);
  const std::string stale_data = b_old.out.back();
  const std::string stale_reset = b_old.reset_frame();
  REQUIRE_FALSE(a_old.s.settled());
  REQUIRE_FALSE(b_old.s.settled());
  // The new sessions, as NatsNode makes them: no floor learned, so wary.
  PairEnd a(10, 20, 2, 0, /*wary=*/true), b(20, 10, 2, 0, /*wary=*/true);
  a.receive(stale_data, now);
  a.receive(stale_reset, now);
  CHECK(a.got.empty());  // not delivered: the old session's, after its nodedown
  CHECK_FALSE(a.reset);  // and its reset does not take the new one down
  CHECK_FALSE(a.s.settled());
  // The new sessions settle and carry everything, once, in order.
  b.send("b new 0", now);
  a.send("new 0", now);
  run_rounds(a, b, now, 100, [&] {
    return a.s.unacked_messages() || b.s.unacked_messages() || !a.s.settled() || !b.s.settled();
  });
  CHECK(a.s.settled());
  CHECK(b.s.settled());
  CHECK(a.s.peer_epoch() == 2);
  CHECK(b.s.peer_epoch() == 2);
  CHECK(a.got == std::vector<std::string>{"b new 0"});
  CHECK(b.got == std::vector<std::string>{"new 0"});
  CHECK_FALSE(a.reset);
  CHECK_FALSE(b.reset);
  // A reset of the settled session takes effect.
  a.receive(b.reset_frame(), now);
  CHECK(a.reset);
}

TEST_CASE("two wary sessions that each first heard the other's ended session still settle, and deliver") {
  using namespace std::chrono_literals;
  Session::Clock::time_point now{};
  // Both old sessions ended unsettled: both new ones wary.
  PairEnd a_old(10, 20, 1, 0), b_old(20, 10, 1, 0);
  a_old.ack();  // in flight, naming no epoch of B's (e.g. in NATS's reconnect buffer)
  b_old.ack();
  const std::string a_stale = a_old.out.back(), b_stale = b_old.out.back();
  PairEnd a(10, 20, 2, 0, true), b(20, 10, 2, 0, true);
  // Each new session's first to=0 ack never reached the other's new session
  // (it arrived before that session existed: a heartbeat on host.cluster and
  // a frame on host.node.<id> are delivered by different threads) or was lost.
  a.ack(); b.ack(); a.out.clear(); b.out.clear();
  // The ended sessions' late frames reach the new ones.
  a.receive(b_stale, now);
  b.receive(a_stale, now);
  b.send("hello", now);
  run_rounds(a, b, now, 200, [] { return true; });
  CHECK(a.s.settled());
  CHECK(b.s.settled());
  CHECK(a.got == std::vector<std::string>{"hello"});
  INFO("a names " << a.s.peer_epoch() << ", b names " << b.s.peer_epoch());
  CHECK(b.s.unacked_messages() == 0);
}

TEST_CASE("a peer's session that began and ended while this end had none: its data is delivered, then both end") {
  Session::Clock::time_point now{};
  // B's session began (B heard A's heartbeat) and ended (B took A down)
  // before A made one: A never heard of it, so A's session has no floor
  // and is not wary. Its data names no epoch of A's, as the new one's does.
  PairEnd b_gone(20, 10, 1, 0);
  b_gone.send("b gone 0", now);
  const std::string late = b_gone.out.back();
  PairEnd a(10, 20, 1, 0);
  PairEnd b(20, 10, 2, 0, /*wary=*/!b_gone.s.settled());
  a.receive(late, now);
  // Taken as A's session's: delivered, once (B's session dropped it from
  // its ring as it ended, so nothing sends it again).
  CHECK(a.got == std::vector<std::string>{"b gone 0"});
  CHECK_FALSE(a.reset);
  // B's current session is then a newer one: A ends its session and
  // resets B, which ends its own (each end's nodedown, noconnection).
  b.tick(now);
  exchange(a, b, now);
  CHECK(a.reset);
  a.out.push_back(a.reset_frame());
  exchange(a, b, now);
  CHECK(b.reset);
}

namespace {

// Two sessions (a, b) that went on after the reset ending an earlier one
// was lost run until both are reset, or `rounds` pass.
void rounds_until_reset(PairEnd& a, PairEnd& b, Session::Clock::time_point& now, int rounds) {
  run_rounds(a, b, now, rounds, [&] { return !a.reset || !b.reset; });
}

}  // namespace

TEST_CASE("a peer's session that goes on after this end's reset to it was lost is ended, and the next sessions "
          "carry both ways") {
  using namespace std::chrono_literals;
  for (const bool b_heard_a : {true, false}) {
    CAPTURE(b_heard_a);
    Session::Clock::time_point now{};
    // A's old session settled B's epoch; B's settled A's unless the
    // frames from A were lost.
    PairEnd a_old(10, 20, 1, 0), b_old(20, 10, 1, 0);
    b_old.ack();
    exchange(a_old, b_old, now);
    a_old.ack();
    exchange(a_old, b_old, now, /*lose=*/!b_heard_a);
    REQUIRE(a_old.s.settled());
    REQUIRE(b_old.s.settled() == b_heard_a);
    // A took B down (silent for the timeout, say); its reset was lost, and
    // B, hearing A's heartbeats again, goes on with its old session.
    b_old.out.clear();
    PairEnd a(10, 20, 2, a_old.s.peer_epoch());
    a.send("a new 0", now);
    b_old.send("b old 1", now);
    // Each end with the session it has: the two disagree, so each ends
    // (rather than one taking the other's frames while its own are
    // dropped, with nothing to end it).
    PairEnd& b_cur = b_old;
    rounds_until_reset(a, b_cur, now, 10);
    CHECK(a.reset);
    CHECK(a.got.empty());
    // What B got from A's new session is not lost: B's processes had
    // heard nothing of A's going down, and the message came once.
    CHECK(b_cur.got.size() <= 1);
    // The next sessions, as NatsNode makes them from each end's record.
    PairEnd a2(10, 20, 3, a.s.settled() ? a.s.peer_epoch() : a_old.s.peer_epoch(), !a.s.settled());
    PairEnd b2(20, 10, 2, b_cur.s.settled() ? b_cur.s.peer_epoch() : 0, !b_cur.s.settled());
    a2.send("a 1", now);
    b2.send("b 1", now);
    run_rounds(a2, b2, now, 100, [&] {
      return a2.s.unacked_messages() || b2.s.unacked_messages() || !a2.s.settled() || !b2.s.settled();
    });
    CHECK(a2.got == std::vector<std::string>{"b 1"});
    CHECK(b2.got == std::vector<std::string>{"a 1"});
    CHECK_FALSE(a2.reset);
    CHECK_FALSE(b2.reset);
  }
}

TEST_CASE("a wary session settles the peer's epoch only from a frame naming its own") {
  Session s(SessionLimits{}, 7, 3, /*wary=*/true);
  CHECK(s.judge(3, 0) == Session::Verdict::Stale);  // at the floor
  CHECK(s.peer_epoch() == 0);
  CHECK(s.judge(5, 0) == Session::Verdict::Stale);  // maybe the unsettled session's: only named
  CHECK(s.peer_epoch() == 5);
  CHECK(s.ack_due_at_tick());  // so that the peer hears of this session
  s.ack_sent();
  CHECK(s.judge(4, 0) == Session::Verdict::Stale);
  CHECK(s.peer_epoch() == 5);  // the highest heard
  CHECK(s.judge(6, 0) == Session::Verdict::Stale);
  CHECK(s.peer_epoch() == 6);
  CHECK_FALSE(s.settled());
  CHECK(s.judge(6, 7) == Session::Verdict::Current);
  CHECK(s.settled());
  CHECK(s.peer_knows_epoch());
  CHECK(s.judge(5, 0) == Session::Verdict::Stale);
  CHECK(s.judge(8, 0) == Session::Verdict::Newer);
}

TEST_CASE("a session learns the peer's epoch once, refuses older ones and reports a newer one") {
  Session s(SessionLimits{}, 7, 3);
  CHECK(s.judge(3, 0) == Session::Verdict::Stale);  // at the floor: an ended session's
  CHECK(s.judge(4, 6) == Session::Verdict::Stale);  // to another session of this end
  CHECK(s.judge(0, 7) == Session::Verdict::Stale);
  CHECK(s.peer_epoch() == 0);
  CHECK(s.judge(4, 0) == Session::Verdict::Current);
  CHECK(s.peer_epoch() == 4);
  CHECK_FALSE(s.peer_knows_epoch());
  CHECK(s.ack_due_at_tick());  // tell the peer its epoch is known
  s.ack_sent();
  CHECK(s.judge(4, 7) == Session::Verdict::Current);
  CHECK(s.peer_knows_epoch());
  CHECK_FALSE(s.ack_due_at_tick());
  CHECK(s.judge(3, 7) == Session::Verdict::Stale);
  CHECK(s.judge(5, 7) == Session::Verdict::Newer);
  // Before settling, an ended session of the peer naming this one's epoch
  // goes on with it (a reset to it was lost): Ended; naming none, Stale.
  // The reset then names the session that goes on.
  Session t(SessionLimits{}, 7, 3);
  CHECK(t.judge(3, 7) == Session::Verdict::Ended);
  CHECK(t.peer_epoch() == 3);
  CHECK(t.judge(2, 7) == Session::Verdict::Ended);
  CHECK(t.peer_epoch() == 2);
  CHECK(t.judge(3, 0) == Session::Verdict::Stale);
  CHECK_FALSE(t.settled());
  Session w(SessionLimits{}, 7, 3, /*wary=*/true);
  CHECK(w.judge(3, 7) == Session::Verdict::Ended);
  CHECK(w.peer_epoch() == 3);
  CHECK(s.peer_epoch() == 5);  // the reset then names the peer's new session
}

TEST_CASE("a wary session that goes on after its reset was lost takes the reset the Ended verdict sends") {
  // A's epochs 1, 2, ...; B's 101, 102. A's frames to B are lost for a
  // while: a1 settles on b101, which never hears A; B takes A down and
  // its reset is lost, so b102 is wary. b102's first frame is Newer at a1,
  // which ends (the floor at 102) and whose reset is lost too.
  using V = Session::Verdict;
  Session a1(SessionLimits{}, 1, 0);
  CHECK(a1.judge(101, 0) == V::Current);
  Session b102(SessionLimits{}, 102, 0, /*wary=*/true);
  CHECK(a1.judge(102, 0) == V::Newer);
  const std::uint32_t floor_a = a1.peer_epoch();
  CHECK(floor_a == 102);
  // The loss ends. A's a2 sends its ack naming no epoch of B's: stale to
  // the wary b102, which then names 2. b102's frame naming 2 comes from
  // an epoch at the floor: Ended at a2, which resets it.
  Session a2(SessionLimits{}, 2, floor_a);
  CHECK(b102.judge(2, 0) == V::Stale);
  CHECK(b102.peer_epoch() == 2);
  CHECK(a2.judge(102, b102.peer_epoch()) == V::Ended);
  // The reset names b102, so b102 takes it (and ends): the pair starts
  // clean after. A reset naming 0 would be stale there, and A would go
  // down and up again at each of b102's frames.
  CHECK(a2.peer_epoch() == 102);
  CHECK(b102.judge(2, a2.peer_epoch()) == V::Current);
}

TEST_CASE("sessions under three threads, as the node runs them, lose, double and reorder nothing") {
  // A sender thread (a worker's send), a receiver thread (the NATS
  // callback: arrive, deliver, ack) and a ticker (resends, acks), each
  // holding its session's mutex, as NatsNode does; built for TSan too.
  host::testing::Watchdog watchdog("threaded session test", 60s);
  SessionLimits limits;
  limits.window_bytes = 32 << 10;
  limits.resend_after = 5ms;
  limits.ack_every_messages = 16;
  std::mutex send_mu, recv_mu;
  Session sender(limits), receiver(limits);
  LossyLink forth(42), back(43);
  forth.drop = back.drop = 0.05;
  forth.dup = back.dup = 0.02;
  constexpr std::uint64_t kCount = 20000;
  std::atomic<std::uint64_t> got{0};
  std::atomic<bool> bad{false}, done{false};

  std::thread send_thread([&] {
    for (std::uint64_t i = 0; i < kCount;) {
      std::unique_lock lock(send_mu);
      if (sender.window_full()) {
        lock.unlock();
        std::this_thread::yield();
        continue;
      }
      std::string body = body_of(i);
      forth.push({true, sender.next_seq(), 0, body});
      (void)sender.stamp(Body(body), Session::Clock::now());
      ++i;
    }
  });
  std::thread recv_thread([&] {
    std::uint64_t expect = 0;
    while (!done.load(std::memory_order_acquire)) {
      LossyLink::Frame f;
      if (!forth.pop(f)) {
        std::this_thread::yield();
        continue;
      }
      std::lock_guard lock(recv_mu);
      if (receiver.arrive(f.seq, f.body.size()) == Session::Arrival::Deliver) {
        if (f.body != body_of(expect)) bad.store(true);
        ++expect;
        got.store(expect, std::memory_order_release);
      }
      if (receiver.ack_due_now()) {
        back.push({false, 0, receiver.cumulative_ack(), {}});
        receiver.ack_sent();
      }
    }
  });
  std::thread ticker([&] {
    while (!done.load(std::memory_order_acquire)) {
      std::this_thread::sleep_for(1ms);
      {
        std::lock_guard lock(recv_mu);
        if (receiver.ack_due_at_tick()) {
          back.push({false, 0, receiver.cumulative_ack(), {}});
          receiver.ack_sent();
        }
      }
      LossyLink::Frame f;
      std::lock_guard lock(send_mu);
      while (back.pop(f)) sender.acknowledged(f.ack, Session::Clock::now());
      sender.resend_if_stalled(Session::Clock::now(), [&](std::uint64_t seq, const Body& body) {
        forth.push({true, seq, 0, body.bytes()});
      });
      if (got.load(std::memory_order_acquire) == kCount && sender.unacked_messages() == 0) done.store(true);
    }
  });
  send_thread.join();
  recv_thread.join();
  ticker.join();
  CHECK_FALSE(bad.load());
  CHECK(got.load() == kCount);
  std::lock_guard lock(send_mu);
  CHECK(sender.unacked_messages() == 0);
}

TEST_CASE("frames and envelopes read back as written, and cut or foreign bytes are refused") {
  using namespace host::cluster;
  Envelope e;
  e.op = Envelope::Op::Event;
  e.to = host::Pid{123456789, 7, 3};
  e.tag = 1ull << 50;
  e.event_kind = 3;
  e.failed = true;
  e.from = host::Pid{987654321, 1, 1};
  e.topic = "ping";
  e.payload = std::string_view("\x01\x02\x00payload", 10);
  const std::string body = encode_envelope(e);
  Frame f;
  f.kind = FrameKind::Data;
  f.from_node = 987654321;
  f.to_node = 123456789;
  f.from_epoch = 0xfffffffe;
  f.to_epoch = 3;
  f.seq = 1ull << 40;
  f.ack = 77;
  f.text = body;
  const std::string bytes = encode_frame(f);
  auto g = decode_frame(bytes);
  REQUIRE(g);
  CHECK(g->kind == FrameKind::Data);
  CHECK(g->from_node == f.from_node);
  CHECK(g->to_node == f.to_node);
  CHECK(g->from_epoch == f.from_epoch);
  CHECK(g->to_epoch == f.to_epoch);
  CHECK(g->seq == f.seq);
  CHECK(g->ack == f.ack);
  auto d = decode_envelope(g->text);
  REQUIRE(d);
  CHECK(d->to == e.to);
  CHECK(d->from == e.from);
  CHECK(d->op == Envelope::Op::Event);
  CHECK(d->tag == e.tag);
  CHECK(d->event_kind == 3);
  CHECK(d->failed);
  CHECK(d->topic == "ping");
  CHECK(d->payload == e.payload);
  // Every cut of a frame with fixed fields is refused, as is a cut
  // envelope, a wrong magic byte and an unknown kind.
  Frame hb;
  hb.kind = FrameKind::Heartbeat;
  hb.from_node = 5;
  hb.text = "alpha";
  const std::string hb_bytes = encode_frame(hb);
  REQUIRE(decode_frame(hb_bytes));
  CHECK(decode_frame(hb_bytes)->text == "alpha");
  CHECK(decode_frame(hb_bytes)->version == kWireVersion);
  // Cut at the name's end it is a heartbeat naming no version (0, a node
  // from before the version was named); past the version, what a later
  // version adds is read past.
  const std::size_t name_end = hb_bytes.size() - 4;
  REQUIRE(decode_frame(hb_bytes.substr(0, name_end)));
  CHECK(decode_frame(hb_bytes.substr(0, name_end))->version == 0);
  CHECK(decode_frame(hb_bytes.substr(0, name_end))->text == "alpha");
  hb.version = kWireVersion + 1;
  REQUIRE(decode_frame(encode_frame(hb) + "later"));
  CHECK(decode_frame(encode_frame(hb) + "later")->version == kWireVersion + 1);
  for (std::size_t n = 0; n < hb_bytes.size(); ++n)
    if (n != name_end) CHECK_MESSAGE(!decode_frame(hb_bytes.substr(0, n)), n);
  for (std::size_t n = 0; n < 47; ++n) CHECK_FALSE(decode_envelope(body.substr(0, n)));
  std::string foreign = bytes;
  foreign[0] = 'x';
  CHECK_FALSE(decode_frame(foreign));
  std::string unknown = bytes;
  unknown[1] = 99;
  CHECK_FALSE(decode_frame(unknown));
}

namespace {

// A message envelope with `size` bytes of payload, each byte its own.
host::cluster::Envelope message_of(const std::string& payload, std::string_view topic = "t") {
  host::cluster::Envelope e;
  e.op = host::cluster::Envelope::Op::Message;
  e.to = host::Pid{2, 5, 1};
  e.from = host::Pid{1, 3, 1};
  e.topic = topic;
  e.payload = payload;
  return e;
}

std::string patterned(std::size_t size, int salt = 7) {
  std::string s(size, '\0');
  for (std::size_t i = 0; i < size; ++i) s[i] = static_cast<char>(i * 131 + salt);
  return s;
}

// The bytes of each body that carries e, as the peer receives them.
std::vector<std::string> bodies_of(const host::cluster::Envelope& e, std::uint64_t transfer) {
  std::vector<std::string> out;
  for (const auto& b : host::cluster::split_into_bodies(host::cluster::encode_envelope_buffer(e), transfer))
    out.push_back(b.bytes());
  return out;
}

}  // namespace

TEST_CASE("a 1 MB message crosses in few parts, each a NATS message, and two parts fit in flight") {
  using namespace host::cluster;
  const auto bodies = bodies_of(message_of(std::string(1u << 20, 'z')), 7);
  // The server's and the receiving client's work is per message: a part
  // of 64 KB cost them more per MB (BENCHMARKS.md, "128 KB parts").
  CHECK(bodies.size() <= 9);
  for (const auto& b : bodies) CHECK(kDataHeaderBytes + b.size() <= std::size_t{1} << 20);  // NATS's max_payload
  // One part travels while the previous one's ack comes back: with one
  // alone in flight the sender would stop and wait for each.
  const SessionLimits limits;
  CHECK(limits.parts_in_flight_bytes >= 2 * kPartBytes);
  CHECK(limits.ack_every_bytes <= kPartBytes);
}

TEST_CASE("beside whole messages a large message keeps one part in flight; a flow alone keeps two") {
  using namespace host::cluster;
  const SessionLimits limits;
  const auto parts = split_into_bodies(encode_envelope_buffer(message_of(std::string(1u << 20, 'z'))), 1);
  const Body ping = whole_body(encode_envelope_buffer(message_of("ping")));
  // The parts the session lets in at `now`, as NatsNode's pump does.
  auto let_in = [&](Session& s, Session::Clock::time_point now) {
    std::size_t n = 0;
    for (const Body& part : parts) {
      if (!s.room_for_part(now)) break;
      CHECK(part.part());
      (void)s.stamp(part, now);
      ++n;
    }
    return n;
  };
  const auto t0 = Session::Clock::now();
  Session alone(limits);
  CHECK(let_in(alone, t0) == 2);  // one travels while the other's ack comes
  Session beside(limits);
  CHECK_FALSE(ping.part());
  (void)beside.stamp(ping, t0);
  // A small message finds at most one part ahead of the next one.
  CHECK(let_in(beside, t0 + 1ms) == 1);
  beside.acknowledged(beside.next_seq() - 1, t0 + 2ms);
  CHECK(let_in(beside, t0 + 2ms) == 1);
  // No whole message for beside_whole_for: two again.
  beside.acknowledged(beside.next_seq() - 1, t0 + 3ms);
  CHECK(let_in(beside, t0 + limits.beside_whole_for + 1ms) == 2);
}

TEST_CASE("whole messages in flight never hold a large message's parts back") {
  using namespace host::cluster;
  const SessionLimits limits;
  const auto parts = split_into_bodies(encode_envelope_buffer(message_of(std::string(1u << 20, 'z'))), 1);
  const Body whole = whole_body(encode_envelope_buffer(message_of(std::string(100u << 10, 'w'))));
  CHECK_FALSE(whole.part());
  Session s(limits);
  const auto t0 = Session::Clock::now();
  // 400 KB of whole messages unacknowledged, past both limits for parts.
  for (int i = 0; i < 4; ++i) (void)s.stamp(whole, t0);
  CHECK(s.unacked_bytes() > limits.parts_in_flight_bytes);
  CHECK(s.room_for_part(t0));
  (void)s.stamp(parts.at(0), t0);
  // One part in flight beside them: the next waits for its ack.
  CHECK_FALSE(s.room_for_part(t0));
}

TEST_CASE("an envelope over 128 KB travels in parts and is reassembled whole, and a bad part drops it") {
  using namespace host::cluster;
  for (std::size_t size : {std::size_t{0}, std::size_t{10}, kPartBytes - 60, kPartBytes, kPartBytes + 1,
                           3 * kPartBytes + 17, std::size_t{3} << 20}) {
    CAPTURE(size);
    const std::string payload = patterned(size);
    const std::string envelope = encode_envelope(message_of(payload));
    const auto bodies = bodies_of(message_of(payload), 42);
    CHECK(bodies.size() == (envelope.size() <= kPartBytes ? 1 : (envelope.size() + kPartBytes - 1) / kPartBytes));
    std::string joined;
    for (const auto& b : bodies) joined += b.substr(b.size() == envelope.size() + 1 ? 1 : kPartHeaderBytes);
    CHECK(joined == envelope);  // the wire's bytes are the envelope's, cut
    Reassembly r;
    std::optional<Envelope> out;
    for (std::size_t i = 0; i < bodies.size(); ++i) {
      CHECK(bodies[i].size() <= kPartBytes + kPartHeaderBytes);
      out = r.add(bodies[i]);
      CHECK(out.has_value() == (i + 1 == bodies.size()));
    }
    REQUIRE(out);
    CHECK(out->payload == payload);
    CHECK(out->topic == "t");
    CHECK(out->to == host::Pid{2, 5, 1});
    CHECK(r.from_parts() == (bodies.size() > 1));
    if (r.from_parts()) {
      const char* at = out->payload.data();
      const std::string owned = r.take_payload();
      CHECK(owned == payload);
      CHECK(owned.data() == at);  // handed over as it lies, no copy
    }
    CHECK(r.buffered() == 0);
  }
  // A last part without its first, an empty body, a cut part header and
  // an unknown kind give nothing.
  const auto bodies = bodies_of(message_of(std::string(2 * kPartBytes, 'y')), 9);
  REQUIRE(bodies.size() == 3);
  Reassembly r;
  CHECK_FALSE(r.add(bodies[2]));
  CHECK_FALSE(r.add(""));
  CHECK_FALSE(r.add(bodies[0].substr(0, kPartHeaderBytes - 1)));
  CHECK_FALSE(r.add(std::string(1, '\x07') + "junk"));
  CHECK(r.buffered() == 0);
  const auto small = bodies_of(message_of("small"), 0);  // outlives the views add returns
  auto whole = r.add(small[0]);
  REQUIRE(whole);
  CHECK(whole->payload == "small");
  CHECK_FALSE(r.from_parts());
}

TEST_CASE("an envelope whose fields outrun its first part is reassembled whole too") {
  using namespace host::cluster;
  const std::string topic = patterned(kPartBytes + 100, 3), payload = patterned(kPartBytes, 5);
  const auto bodies = bodies_of(message_of(payload, topic), 4);
  REQUIRE(bodies.size() == 3);
  Reassembly r;
  CHECK_FALSE(r.add(bodies[0]));
  CHECK_FALSE(r.add(bodies[1]));
  auto e = r.add(bodies[2]);
  REQUIRE(e);
  CHECK(e->topic == topic);
  CHECK(e->payload == payload);
  CHECK(r.take_payload() == payload);
}

TEST_CASE("a body is framed in place over its envelope's buffer, which it leaves as it was") {
  using namespace host::cluster;
  const std::string payload = patterned(3 * kPartBytes + 5);
  const EnvelopeBuffer buf = encode_envelope_buffer(message_of(payload));
  const std::string envelope = buf->substr(kEnvelopeRoom);
  const auto bodies = split_into_bodies(buf, 77);
  REQUIRE(bodies.size() == 4);
  // Out of order and twice each (a resend): each frame is whole, its
  // slice intact although the headers of the next went over its end.
  for (std::size_t i : {2, 0, 3, 1, 2, 3}) {
    CAPTURE(i);
    Frame h;
    h.from_node = 1;
    h.to_node = 2;
    h.from_epoch = 3;
    h.to_epoch = 4;
    h.seq = 10 + i;
    h.ack = 5;
    std::string frame;
    bodies[i].framed(h, [&](std::string_view bytes) { frame.assign(bytes); });
    auto f = decode_frame(frame);
    REQUIRE(f);
    CHECK(f->kind == FrameKind::Data);
    CHECK(f->seq == 10 + i);
    CHECK(f->ack == 5);
    CHECK(f->to_epoch == 4);
    CHECK(f->text.size() == bodies[i].size());
    CHECK(f->text.substr(kPartHeaderBytes) == std::string_view(envelope).substr(i * kPartBytes, kPartBytes));
    CHECK(buf->substr(kEnvelopeRoom) == envelope);  // the room before it is scratch
  }
}

TEST_CASE("parts of two large envelopes and whole ones interleaved are each reassembled, in their own order") {
  using namespace host::cluster;
  const std::string one(3 * kPartBytes + 5, 'a'), two(2 * kPartBytes + 9, 'b');
  const auto b1 = bodies_of(message_of(one), 1), b2 = bodies_of(message_of(two), 2);
  const auto small = bodies_of(message_of("ping"), 0);
  REQUIRE(b1.size() == 4);
  REQUIRE(b2.size() == 3);
  Reassembly r;
  std::vector<std::string> out;
  auto add = [&](const std::string& body) {
    if (auto e = r.add(body)) out.emplace_back(e->payload);
  };
  add(b1[0]);
  add(b2[0]);
  add(small[0]);  // a whole one amid parts is delivered at once
  CHECK(r.transfers() == 2);
  CHECK(r.buffered() == 2 * kPartBytes);
  add(b2[1]);
  add(b1[1]);
  add(b2[2]);  // two ends first
  add(b1[2]);
  add(b1[3]);
  REQUIRE(out.size() == 3);
  CHECK(out[0] == "ping");
  CHECK(out[1] == two);
  CHECK(out[2] == one);
  CHECK(r.transfers() == 0);
  CHECK(r.buffered() == 0);
}

TEST_CASE("the outbox keeps each pair's order and takes the pairs in turn") {
  using namespace host::cluster;
  const PairKey p{host::Pid{1, 1, 1}, host::Pid{2, 1, 1}}, q{host::Pid{1, 2, 1}, host::Pid{2, 1, 1}};
  Outbox box;
  CHECK(box.empty());
  CHECK_FALSE(box.next());
  box.push(p, {Body("p1"), Body("p2"), Body("p3")});
  box.push(q, {Body("q1")});
  box.push(p, {Body("p4")});  // after p's waiting ones
  CHECK(box.holds(p));
  CHECK(box.holds(q));
  CHECK(box.bytes() == 10);
  std::vector<std::string> got;
  while (auto b = box.next()) got.push_back(b->bytes());
  CHECK(got == std::vector<std::string>{"p1", "q1", "p2", "p3", "p4"});
  CHECK(box.empty());
  CHECK(box.bytes() == 0);
  CHECK_FALSE(box.holds(p));
}

TEST_CASE("a burst of small frames waits in the batch, in order; a frame alone after a pause goes at once") {
  using namespace host::cluster;
  Batch b;
  const auto t = Batch::Clock::now();
  CHECK_FALSE(b.hold(16, true, t));             // alone: at once
  CHECK(b.hold(16, true, t + 10us));            // within kBurstGap of the last: waits
  b.add("one");
  CHECK(b.hold(100000, true, t + 1s));          // large, but behind a waiting frame: waits too
  b.add(std::string(100000, 'x'));
  CHECK(b.hold(8, false, t + 2s));              // an ack keeps its place as well
  b.add("ack");
  auto chunks = b.take();
  CHECK(b.empty());
  CHECK(b.flushing());
  CHECK(b.hold(16, true, t + 3s));              // while the flusher publishes: waits
  std::vector<std::string> got;
  for (const std::string& c : chunks)
    CHECK(for_each_in_batch(c, [&](std::string_view f) { got.emplace_back(f); }));
  CHECK(got == std::vector<std::string>{"one", std::string(100000, 'x'), "ack"});
  CHECK(chunks.size() == 3);  // no chunk grows far past kBatchChunkBytes (NATS's max_payload)
  b.flushed(std::move(chunks.back()));
  CHECK_FALSE(b.flushing());
  CHECK_FALSE(b.hold(100000, true, t + 4s));    // large with nothing waiting: at once (no copy)
  CHECK_FALSE(b.hold(16, true, t + 5s));        // small after a pause: at once

  // Read back: a batch cut short gives the frames before the cut, then
  // says so; a frame (another magic byte) is no batch.
  b.add("first");
  b.add("second");
  const std::string whole = b.take().front();
  got.clear();
  CHECK_FALSE(for_each_in_batch(std::string_view(whole).substr(0, whole.size() - 1),
                                [&](std::string_view f) { got.emplace_back(f); }));
  CHECK(got == std::vector<std::string>{"first"});
  got.clear();
  CHECK_FALSE(for_each_in_batch(std::string_view(whole).substr(1), [&](std::string_view f) { got.emplace_back(f); }));
  CHECK(got.empty());
}

namespace {

// A peer as NatsNode's Flusher sees one, with the wire its frames reach:
// each frame of each publication, in the order published.
struct FlushPeer : std::enable_shared_from_this<FlushPeer> {
  std::mutex mu;
  host::cluster::Batch batch;
  bool down = false;
  std::uint64_t emitted = 0;  // guarded by mu (the stress test's numbering)

  std::mutex wire_mu;  // guards wire
  std::vector<std::string> wire;
  void put(std::string_view bytes) {
    std::lock_guard lock(wire_mu);
    if (!host::cluster::for_each_in_batch(bytes, [&](std::string_view f) { wire.emplace_back(f); }))
      wire.emplace_back(bytes);
  }
  std::vector<std::string> seen() {
    std::lock_guard lock(wire_mu);
    return wire;
  }
};

bool is_batch(std::string_view bytes) {
  return !bytes.empty() && static_cast<std::uint8_t>(bytes.front()) == host::cluster::kBatchMagic;
}

}  // namespace

TEST_CASE("a reset published after the flusher's close follows the frames the flusher is publishing") {
  // NatsNode::take_down: the peer is closed, then its reset published.
  // The flusher took a burst out of the batch and is publishing it (held
  // there until the reset is out, or 300 ms): the reset must wait for it.
  using namespace host::cluster;
  host::testing::Watchdog watchdog("flusher close test", 30s);
  std::mutex latch_mu;
  std::condition_variable latch_cv;
  bool publishing = false, reset_out = false;
  Flusher<FlushPeer> flusher([&](FlushPeer& peer, std::string_view bytes) {
    if (is_batch(bytes)) {
      std::unique_lock lock(latch_mu);
      publishing = true;
      latch_cv.notify_all();
      latch_cv.wait_for(lock, 300ms, [&] { return reset_out; });
    }
    peer.put(bytes);
  });
  flusher.start();
  auto peer = std::make_shared<FlushPeer>();
  const auto t = Batch::Clock::now();
  {
    std::lock_guard lock(peer->mu);
    flusher.emit(*peer, "one", true, t);        // alone: at once
    flusher.emit(*peer, "two", true, t + 1us);  // a burst: for the flusher
  }
  {
    std::unique_lock lock(latch_mu);
    latch_cv.wait(lock, [&] { return publishing; });
  }
  {
    std::unique_lock lock(peer->mu);
    flusher.close(*peer, lock);
  }
  peer->put("reset");
  {
    std::lock_guard lock(latch_mu);
    reset_out = true;
  }
  latch_cv.notify_all();
  {
    std::lock_guard lock(peer->mu);
    flusher.emit(*peer, "three", false, t + 1s);  // down: nothing more goes out
  }
  flusher.stop();
  CHECK(peer->seen() == std::vector<std::string>{"one", "two", "reset"});
}

TEST_CASE("once the flusher has stopped, a frame that would wait in its batch goes at once, in order") {
  // NatsNode::stop ends the flusher while a subscription callback may
  // still emit (an ack, a spawn's reply): nothing is left in a batch.
  using namespace host::cluster;
  host::testing::Watchdog watchdog("flusher stop test", 30s);
  Flusher<FlushPeer> flusher([](FlushPeer& peer, std::string_view bytes) { peer.put(bytes); });
  flusher.start();
  auto peer = std::make_shared<FlushPeer>();
  const auto t = Batch::Clock::now();
  {
    std::lock_guard lock(peer->mu);
    flusher.emit(*peer, "one", true, t);
    flusher.emit(*peer, "two", true, t + 1us);  // waits for the flusher
  }
  flusher.stop();  // which publishes it before it ends
  CHECK(peer->seen() == std::vector<std::string>{"one", "two"});
  {
    std::lock_guard lock(peer->mu);
    flusher.emit(*peer, "three", true, t + 1s);
    flusher.emit(*peer, "four", true, t + 1s + 1us);  // a burst: would wait
    flusher.emit(*peer, "ack", false, t + 1s + 2us);  // behind it
    CHECK(peer->batch.empty());
  }
  CHECK(peer->seen() == std::vector<std::string>{"one", "two", "three", "four", "ack"});
}

TEST_CASE("the flusher under emitting threads, closes and its stop loses, doubles and reorders nothing") {
  // Four threads emit numbered frames to six peers (bursts and frames
  // alone, by the clock), two peers are closed midway with a reset after,
  // and the flusher stops while the threads go on; built for TSan too.
  using namespace host::cluster;
  host::testing::Watchdog watchdog("flusher stress test", 120s);
  constexpr int kPeers = 6, kThreads = 4, kEach = 20000;
  Flusher<FlushPeer> flusher([](FlushPeer& peer, std::string_view bytes) { peer.put(bytes); });
  flusher.start();
  std::vector<std::shared_ptr<FlushPeer>> peers;
  for (int i = 0; i < kPeers; ++i) peers.push_back(std::make_shared<FlushPeer>());
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t) + 7);
      for (int i = 0; i < kEach; ++i) {
        FlushPeer& peer = *peers[rng() % kPeers];
        {
          std::lock_guard lock(peer.mu);
          if (!peer.down) {
            const std::string frame = std::to_string(++peer.emitted);
            flusher.emit(peer, frame, rng() % 4 != 0, Batch::Clock::now());
          }
        }
        done.fetch_add(1, std::memory_order_relaxed);
        if (rng() % 64 == 0) std::this_thread::sleep_for(100us);  // a pause: the next frame goes alone
      }
    });
  std::thread closer([&] {
    while (done.load(std::memory_order_relaxed) < kThreads * kEach / 3) std::this_thread::yield();
    for (int i = 0; i < 2; ++i) {
      {
        std::unique_lock lock(peers[i]->mu);
        flusher.close(*peers[i], lock);
      }
      peers[i]->put("reset");
    }
  });
  while (done.load(std::memory_order_relaxed) < kThreads * kEach * 2 / 3) std::this_thread::yield();
  flusher.stop();
  for (auto& th : threads) th.join();
  closer.join();
  for (int i = 0; i < kPeers; ++i) {
    const std::vector<std::string> seen = peers[i]->seen();
    std::uint64_t emitted = 0;
    {
      std::lock_guard lock(peers[i]->mu);
      emitted = peers[i]->emitted;
    }
    // Every frame in order, once: 1, 2, ... (a closed peer's: up to its
    // reset, which comes last; what waited in its batch is dropped).
    std::size_t n = 0;
    while (n < seen.size() && seen[n] == std::to_string(n + 1)) ++n;
    INFO("peer " << i << ": " << n << " in order of " << seen.size() << " seen, " << emitted << " emitted");
    if (i < 2) {
      CHECK(n + 1 == seen.size());
      CHECK(seen.back() == "reset");
      CHECK(n <= emitted);
    } else {
      CHECK(n == seen.size());
      CHECK(n == emitted);
    }
  }
}

TEST_CASE("a large message's buffer is kept when given back and handed out again; small ones are not") {
  using namespace host::cluster;
  // Larger than any buffer the tests before kept (the pool is the
  // process's), so that it is the one handed out again.
  const std::size_t large = kPoolBytes / 2;
  std::string big = take_buffer("head", large);
  const std::size_t before = pooled_buffers();
  CHECK(big == "head");
  CHECK(big.capacity() >= large);
  const char* memory = big.data();
  give_back(std::move(big));
  CHECK(pooled_buffers() == before + 1);
  std::string again = take_buffer("h2", large - 1);  // a smaller request fits in it
  CHECK(again == "h2");
  CHECK(again.data() == memory);
  CHECK(pooled_buffers() == before);
  give_back(std::string(16, 's'));  // small: left to malloc
  CHECK(pooled_buffers() == before);
  {
    auto shared = share_buffer(std::move(again));  // given back when its last holder is done
    CHECK(pooled_buffers() == before);
  }
  CHECK(pooled_buffers() == before + 1);
  // The bound: past kPoolBytes in all, a buffer is freed.
  std::vector<std::string> many;
  for (std::size_t i = 0; i <= kPoolBytes / kPooledMinBytes; ++i) many.push_back(take_buffer({}, kPooledMinBytes));
  for (std::string& s : many) give_back(std::move(s));
  CHECK(pooled_buffers() <= kPoolBytes / kPooledMinBytes);
}

TEST_CASE("a large envelope's parts are put together in a kept buffer, which its receiver gives back") {
  using namespace host::cluster;
  // The receiving side's fresh 1 MB per message cost a page fault per
  // 4 KB (buffer_pool.hpp); a kept buffer of the size is taken instead.
  Envelope e;
  e.op = Envelope::Op::Message;
  e.to = host::Pid{3, 4, 5};
  e.topic = "t";
  const std::string payload(600u << 10, 'x');
  e.payload = payload;
  const auto bodies = split_into_bodies(encode_envelope_buffer(e), 7);
  REQUIRE(bodies.size() > 2);
  // The pool is the process's: the buffers earlier tests left there are
  // taken out (and freed), so that the one given back here is the one a
  // receiver can take, and fits within the bound.
  {
    std::vector<std::string> earlier;
    while (pooled_buffers() != 0) earlier.push_back(take_buffer({}, kPooledMinBytes));
  }
  std::string kept_buffer = take_buffer({}, payload.size());
  const char* memory = kept_buffer.data();
  give_back(std::move(kept_buffer));
  const std::size_t before = pooled_buffers();
  REQUIRE(before == 1);
  Reassembly r;
  std::optional<Envelope> got;
  for (std::size_t i = 0; i < bodies.size(); ++i) {
    got = r.add(bodies[i].bytes());
    if (i == 0) CHECK(pooled_buffers() == before - 1);  // taken at the first part
  }
  REQUIRE(got);
  REQUIRE(r.from_parts());
  CHECK(got->payload == payload);
  std::string out = r.take_payload();
  CHECK(out.data() == memory);
  give_back(std::move(out));
  CHECK(pooled_buffers() == before);
}

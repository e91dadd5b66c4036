// A node's handling of what a peer sends it, with the test process as that
// peer: it forges another node's frames (wire.hpp) on the test's own
// nats-server, so that what no pair of real hosts does on cue (a session
// that ends before its epoch settled, a heartbeat of another wire version)
// reaches a real node, its wiring included (NatsNode: what it records when
// a session ends, and what it makes the next one of). Node "a" runs
// tests/cluster/forged.lua. Skipped, saying so, where nats-server is not
// installed.
#include <doctest/doctest.h>

#include <nats/nats.h>

#include <cstdint>
#include <optional>
#include <string>

#include "host/cluster/batch.hpp"
#include "host/cluster/wire.hpp"
#include "tests/cluster_harness.hpp"

using namespace host::testing::cluster;
using host::cluster::Frame;
using host::cluster::FrameKind;

namespace {

// Another node as far as node a can tell: its heartbeats and byes on
// host.cluster, its frames to a, and a's frames to it read back.
struct ForgedPeer {
  natsConnection* nc = nullptr;
  natsSubscription* sub = nullptr;  // host.node.<id>: a's frames to it
  std::uint32_t id;
  std::string name;

  ForgedPeer(const std::string& url, std::uint32_t id_, std::string name_) : id(id_), name(std::move(name_)) {
    REQUIRE(natsConnection_ConnectTo(&nc, url.c_str()) == NATS_OK);
    REQUIRE(natsConnection_SubscribeSync(&sub, nc, ("host.node." + std::to_string(id)).c_str()) == NATS_OK);
  }
  ~ForgedPeer() {
    natsSubscription_Destroy(sub);
    natsConnection_Destroy(nc);
  }
  void publish(const std::string& subject, const std::string& bytes) {
    REQUIRE(natsConnection_Publish(nc, subject.c_str(), bytes.data(), static_cast<int>(bytes.size())) == NATS_OK);
    REQUIRE(natsConnection_Flush(nc) == NATS_OK);
  }
  std::string heartbeat_bytes(std::uint32_t version = host::cluster::kWireVersion) const {
    Frame f;
    f.kind = FrameKind::Heartbeat;
    f.from_node = id;
    f.text = name;
    f.version = version;
    return encode_frame(f);
  }
  void heartbeat(std::uint32_t version = host::cluster::kWireVersion) {
    publish("host.cluster", heartbeat_bytes(version));
  }
  void bye() {
    Frame f;
    f.kind = FrameKind::Bye;
    f.from_node = id;
    f.text = name;
    publish("host.cluster", encode_frame(f));
  }
  // A data frame to `to`'s process registered as "inbox": a message on
  // `topic` with no payload (nil there), as sequence number `seq` of the
  // session `from_epoch`, naming `to_epoch` as a's.
  void message(std::uint32_t to, std::uint32_t from_epoch, std::uint32_t to_epoch, std::uint64_t seq,
               std::string_view topic) {
    host::cluster::Envelope e;
    e.op = host::cluster::Envelope::Op::NamedMessage;
    e.name = "inbox";
    e.from = host::Pid{id, 1, 1};
    e.topic = topic;
    const std::string body = host::cluster::whole_body(host::cluster::encode_envelope_buffer(e)).bytes();
    Frame f;
    f.kind = FrameKind::Data;
    f.from_node = id;
    f.to_node = to;
    f.from_epoch = from_epoch;
    f.to_epoch = to_epoch;
    f.seq = seq;
    f.text = body;
    publish("host.node." + std::to_string(to), encode_frame(f));
  }
  // The epochs of the next frame from node `from` (alone or in a batch)
  // that `want` accepts, within `limit`.
  struct Epochs {
    std::uint32_t from = 0, to = 0;
  };
  template <typename Want>
  std::optional<Epochs> next_frame(std::uint32_t from, std::chrono::milliseconds limit, Want want) {
    const auto end = Clock::now() + limit;
    while (Clock::now() < end) {
      natsMsg* msg = nullptr;
      if (natsSubscription_NextMsg(&msg, sub, 100) != NATS_OK) continue;
      const std::string bytes(natsMsg_GetData(msg), static_cast<std::size_t>(natsMsg_GetDataLength(msg)));
      natsMsg_Destroy(msg);
      std::optional<Epochs> found;
      auto look = [&](std::string_view frame) {
        auto f = host::cluster::decode_frame(frame);
        if (!found && f && f->from_node == from && want(*f)) found = Epochs{f->from_epoch, f->to_epoch};
      };
      if (!host::cluster::for_each_in_batch(bytes, look)) look(bytes);
      if (found) return found;
    }
    return std::nullopt;
  }
};

// The node id in the "<ID.INDEX.GEN>" PID a node printed after "ready ".
std::uint32_t node_id_in(const std::string& out) {
  const auto at = out.find("ready <");
  REQUIRE(at != std::string::npos);
  return static_cast<std::uint32_t>(std::stoul(out.substr(at + 7)));
}

}  // namespace

TEST_CASE("after a session that ended before the peer's epoch settled, the node's next one with that peer is wary: "
          "the ended session's data is not delivered, the new one's is") {
  SKIP_WITHOUT_NATS();
  NatsServer nats;
  auto a = start_node(node_argv("a", nats.url(), "forged", {}, "10"), "a", "ready");
  const std::uint32_t a_id = node_id_in(a->stdout_text());
  ForgedPeer p(nats.url(), 0x5eed0001, "p");
  p.heartbeat();
  // a's session: its epoch in the ack frame a sends at once; nothing from
  // p reaches it, so it ends unsettled at p's bye.
  auto first = p.next_frame(a_id, 10s, [](const Frame&) { return true; });
  REQUIRE(first);
  CHECK(first->to == 0);
  p.bye();
  REQUIRE(wait_until([&] { return contains(a->stderr_text(), "node p (id " + std::to_string(p.id) + ") is down: it ended"); },
                     10s));
  // The next session, with a new epoch of a's.
  p.heartbeat();
  auto second = p.next_frame(a_id, 10s, [&](const Frame& f) { return f.from_epoch != first->from; });
  REQUIRE(second);
  INFO("a's stdout: " << a->stdout_text());
  INFO("a's stderr: " << a->stderr_text());
  // Data of p's ended session, sent before it heard from a (so naming no
  // epoch of a's), arrives late; then the data of p's next session, which
  // heard from a's new one.
  p.message(a_id, 5, 0, 1, "stale");
  p.message(a_id, 6, second->from, 1, "fresh");
  CHECK(a->says("got fresh", 10s));
  CHECK_FALSE(contains(a->stdout_text(), "got stale"));
  CHECK_FALSE(contains(a->stderr_text(), "began a new session"));
}

TEST_CASE("a node refuses a peer that speaks another wire version, naming both versions once, and reports it "
          "unreachable: not listed, noconnection, nodedown") {
  SKIP_WITHOUT_NATS();
  NatsServer nats;
  auto a = start_node(node_argv("a", nats.url(), "forged:peers", {"other", "good"}, "10"), "a", "ready");
  ForgedPeer good(nats.url(), 0x5eed0002, "good");
  ForgedPeer other(nats.url(), 0x5eed0003, "other");
  ForgedPeer legacy(nats.url(), 0x5eed0004, "legacy");
  // A heartbeat of a node from before the version was named ends at its
  // name: the version's four bytes cut off.
  std::string legacy_heartbeat = legacy.heartbeat_bytes();
  legacy_heartbeat.resize(legacy_heartbeat.size() - 4);
  const bool done = wait_until(
      [&] {
        good.heartbeat();
        other.heartbeat(host::cluster::kWireVersion + 1);
        legacy.publish("host.cluster", legacy_heartbeat);
        std::this_thread::sleep_for(50ms);
        return contains(a->stdout_text(), "done");
      },
      15s);
  const std::string out = a->stdout_text(), err = a->stderr_text();
  INFO("a's stdout: " << out);
  INFO("a's stderr: " << err);
  REQUIRE(done);
  CHECK(contains(out, "listed good true"));  // the forged heartbeats are heard
  CHECK(contains(out, "listed other false"));
  CHECK(contains(out, "event exit noconnection"));
  CHECK(contains(out, "event nodedown other"));
  const std::string refusal = "node other (id " + std::to_string(other.id) + ") speaks cluster wire version " +
                              std::to_string(host::cluster::kWireVersion + 1) + ", this node version " +
                              std::to_string(host::cluster::kWireVersion) + ": refused";
  CHECK(contains(err, refusal));
  CHECK(err.find(refusal) == err.rfind(refusal));  // once, not at each heartbeat
  CHECK(contains(err, "node legacy (id " + std::to_string(legacy.id) + ") speaks cluster wire version 0, this node version " +
                          std::to_string(host::cluster::kWireVersion) + ": refused"));
}

TEST_CASE("a peer's session that began and ended while the node had none: its late data is delivered once, then the "
          "peer's current session takes the pair down and up again") {
  SKIP_WITHOUT_NATS();
  NatsServer nats;
  auto a = start_node(node_argv("a", nats.url(), "forged", {}, "10"), "a", "ready");
  const std::uint32_t a_id = node_id_in(a->stdout_text());
  ForgedPeer p(nats.url(), 0x5eed0005, "p");
  p.heartbeat();
  auto first = p.next_frame(a_id, 10s, [](const Frame&) { return true; });
  REQUIRE(first);
  INFO("a's stdout: " << a->stdout_text());
  INFO("a's stderr: " << a->stderr_text());
  // Data of p's session 5, which a never had (p met a and took it down
  // before a heard p): it names no epoch of a's, as p's session 6 does.
  p.message(a_id, 5, 0, 1, "gone");
  REQUIRE(a->says("got gone", 10s));
  p.message(a_id, 6, 0, 1, "current");
  // a resets p, naming p's session 6; both ends then begin again.
  auto reset = p.next_frame(a_id, 10s, [](const Frame& f) { return f.kind == FrameKind::Bye; });
  REQUIRE(reset);
  CHECK(reset->from == first->from);
  CHECK(reset->to == 6);
  // Logged after the reset goes.
  CHECK(wait_until([&] { return contains(a->stderr_text(), "is down: it began a new session while this one went on"); },
                   10s));
  CHECK_FALSE(contains(a->stdout_text(), "got current"));
  // The next session is a new one of a's, and takes p's data.
  p.heartbeat();
  auto next = p.next_frame(a_id, 10s, [&](const Frame& f) { return f.kind == FrameKind::Ack && f.from_epoch != first->from; });
  REQUIRE(next);
  p.message(a_id, 7, next->from, 1, "after");
  CHECK(a->says("got after", 10s));
  CHECK(a->stdout_text().find("got gone") == a->stdout_text().rfind("got gone"));
}

TEST_CASE("a peer's session that goes on after the node's reset to it was lost is taken down again, not left one-way") {
  SKIP_WITHOUT_NATS();
  NatsServer nats;
  auto a = start_node(node_argv("a", nats.url(), "forged"), "a", "ready");
  const std::uint32_t a_id = node_id_in(a->stdout_text());
  ForgedPeer p(nats.url(), 0x5eed0006, "p");
  p.heartbeat();
  auto first = p.next_frame(a_id, 10s, [](const Frame&) { return true; });
  REQUIRE(first);
  INFO("a's stdout: " << a->stdout_text());
  INFO("a's stderr: " << a->stderr_text());
  // p's session 5 settles with a's.
  p.message(a_id, 5, first->from, 1, "one");
  REQUIRE(a->says("got one", 10s));
  // p falls silent past the node timeout (2 s): a takes it down and resets
  // it, a reset p never hears (it goes on with its session 5).
  REQUIRE(wait_until([&] { return contains(a->stderr_text(), "is down: silent for the node timeout"); }, 10s));
  p.heartbeat();
  auto next = p.next_frame(a_id, 10s, [&](const Frame& f) { return f.kind == FrameKind::Ack && f.from_epoch != first->from; });
  REQUIRE(next);
  // p's session 5 heard a's new one and names it.
  p.message(a_id, 5, next->from, 2, "two");
  auto reset = p.next_frame(a_id, 10s, [&](const Frame& f) { return f.kind == FrameKind::Bye && f.from_epoch == next->from; });
  REQUIRE(reset);
  CHECK(reset->to == 5);  // naming the session that goes on, which takes it
  CHECK(wait_until([&] { return contains(a->stderr_text(), "is down: it carries on a session this node ended"); }, 10s));
  CHECK_FALSE(contains(a->stdout_text(), "got two"));
}

// A session: the reliable, ordered stream of messages from this node to one
// peer node (its sender half) and from that peer to this node (its
// receiver half), over a transport that may drop, duplicate or reorder.
// Threads: none of its own and no lock; its owner (cluster::NatsNode's Peer)
// holds one mutex around every call.
//
// Why a layer of our own: NATS delivers at most once and drops messages for
// a slow consumer or across a reconnect, so neither order nor delivery can
// be left to it (SPEC section 12: in order, at most once, none lost while
// the nodes stay connected). The scheme is TCP's go-back-N, kept simple:
// - every message gets the next sequence number (1, 2, ...) and stays in
//   the resend ring until the peer acknowledges it;
// - acknowledgements are cumulative (the highest number received in order)
//   and ride on every frame the peer sends, or in an ack frame of their own;
// - the receiver takes only the next number: a duplicate (seen already) or
//   one past a gap is dropped, so order needs no reassembly buffer (NATS
//   over one connection keeps order; a gap means a loss, and the sender
//   sends everything unacknowledged again once no ack came for `resend_after`);
// - the unacknowledged bytes are the window: past `window_bytes` a sender
//   is told to yield (the Lua send yields as a send to a long mailbox does).
// - each end numbers its session with the peer (an epoch; NatsNode draws
//   it from a counter that only grows) and every frame names both ends'
//   epochs: a frame of an earlier session of the same pair (a reset, ack
//   or data still in flight when the pair went down and up again, as
//   after a partition) is judged stale and ignored, never taken as this
//   session's (judge).
// Rejected: selective acks and a reorder buffer (losses are rare, a burst
// resend is cheap over a loopback or LAN, and the buffer would be a second
// unbounded queue); NATS JetStream (a server-side store the contract does
// not need, and not in nats-server's default configuration).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>

#include "host/cluster/wire.hpp"

namespace host::cluster {

struct SessionLimits {
  // Unacknowledged bytes past which a sender yields.
  std::size_t window_bytes = 1u << 20;
  // Unacknowledged bytes of parts past which a large message's parts wait in the
  // outbox (NatsNode, outbox.hpp): what a small message may find ahead of
  // it in the connection. Below the window, so that parts alone never
  // make a sender yield; above ack_every_bytes, so that the parts in
  // flight are acknowledged before they stop; two parts (wire.hpp's
  // kPartBytes), so that one is sent while the other's ack comes. 256 KB:
  // a ping under an 8 MB flow waited about half as long as with 512 KB
  // (its median), with no loss in the 1 MB rate (BENCHMARKS.md, "Kept
  // buffers on the receiving side").
  std::size_t parts_in_flight_bytes = 256u << 10;
  // The same while whole messages go to the peer beside the parts (one
  // was sent within `beside_whole_for`): one part's worth, so that a
  // small message finds at most one part ahead of it. A ping under an
  // 8 MB flow waited mostly for the transport (nats-server and the
  // receiving client working through the parts ahead, and each thread
  // on its way waiting for a CPU the flow kept busy), not in this node:
  // one part ahead instead of two shortened its wait and left the CPUs
  // less busy, for a slower flow while the small messages go
  // (BENCHMARKS.md, "A ping beside a flow"). A flow alone keeps two.
  std::size_t parts_in_flight_beside_whole_bytes = 128u << 10;
  std::chrono::milliseconds beside_whole_for{20};
  // Bytes held for a peer (unacknowledged, plus waiting in its outbox)
  // past which, while the transport is down, the peer is reported down
  // (SPEC: at most 8 MB buffered per peer). NatsNode checks it.
  std::size_t max_buffered_bytes = 8u << 20;
  // No acknowledgement for this long: everything unacknowledged goes again.
  std::chrono::milliseconds resend_after{100};
  // The receiver acknowledges at once after this many messages or bytes in
  // order (else on its next tick): the sender's window drains without
  // waiting for a tick.
  std::uint64_t ack_every_messages = 64;
  std::size_t ack_every_bytes = 128u << 10;
};

class Session {
 public:
  using Clock = std::chrono::steady_clock;
  // `epoch`: this end's number for the session (nonzero); `floor`: the
  // highest epoch the peer used in an earlier session with this end (0:
  // none), so that a frame of one is stale even before the peer's current
  // epoch is known. `wary`: the last session with the peer ended before
  // this end settled the peer's epoch in it, so the floor does not cover
  // that session, whose frames may still come: until a frame names this
  // end's epoch, none is taken as this session's (judge).
  explicit Session(SessionLimits limits = {}, std::uint32_t epoch = 1, std::uint32_t floor = 0, bool wary = false)
      : limits_(limits), epoch_(epoch), floor_(floor), wary_(wary) {}

  // --- epochs ---
  enum class Verdict {
    Current,  // of this session: handle it
    Stale,    // of an earlier session of either end (or epoch 0): ignore it
    Newer,    // the peer began a later session while this one went on: the
              // two ends disagree, so this one must end too (NatsNode
              // takes the peer down, resetting it)
    Ended,    // from a session of the peer that ended with this end (at or
              // below the floor) yet names this session's epoch: the peer
              // carries that one on (this end's reset to it was lost) with
              // this one, whose frames it may take while this end drops
              // its own; they disagree too, and this one ends as for Newer
  };
  // Judges a frame's epochs (its sender's, and this end's as the sender
  // knows it, 0 when it does not yet). The first current frame settles
  // the peer's epoch; a Newer verdict records the newer one, so that the
  // reset names it.
  //
  // A wary session (the constructor's) settles it only from a frame that
  // names this end's epoch: that frame's sender heard from this session,
  // so it is no frame of an ended one. Until then a frame naming no epoch
  // of this end is Stale (its data and reset are not taken), and only
  // its epoch, the highest such, is what this end's frames name (so that
  // the peer's session can settle this one's in turn). Not for every
  // session: the peer's data sent before it heard from this end would be
  // dropped and wait for the resend.
  //
  // A frame of an ended session of the peer is Stale, but Ended when it
  // names this session's epoch: its sender heard from this session after
  // this end ended that one (its epoch recorded, so that the reset names
  // it). Left Stale, the peer's frames would never
  // settle this session while the peer took this one's: a one-way stream
  // with nothing to end it (the heartbeats keep the peer up).
  Verdict judge(std::uint32_t from_epoch, std::uint32_t to_epoch);
  std::uint32_t epoch() const { return epoch_; }
  // The peer's epoch as this end's frames name it: 0 while not heard; in
  // a wary session, before settled(), the highest heard so far.
  std::uint32_t peer_epoch() const { return peer_epoch_; }
  bool settled() const { return settled_; }
  // Whether a frame naming this end's epoch came: until then the tick
  // sends an ack frame anyway, so that even an idle pair learns each
  // other's epochs (what a later reset must name).
  bool peer_knows_epoch() const { return peer_knows_epoch_; }

  // --- sender half ---
  // Keeps body in the resend ring under the next sequence number and
  // returns that number; the caller transmits it (with cumulative_ack()).
  // The ring holds the body as a slice of its envelope's buffer (wire.hpp):
  // resending frames it again, from the same bytes.
  std::uint64_t stamp(Body body, Clock::time_point now);
  // The number the next stamp gives (a caller encodes its frame first).
  std::uint64_t next_seq() const { return next_seq_; }
  // The peer has everything up to `ack`: those leave the ring. An ack
  // below what was acknowledged already (a late frame) changes nothing;
  // one above what was sent is ignored (a corrupt or foreign frame).
  void acknowledged(std::uint64_t ack, Clock::time_point now);
  // When nothing was acknowledged for resend_after since the last send or
  // resend, calls emit(seq, body) for every message in the ring, oldest
  // first, and returns how many; else 0.
  template <typename Emit>
  std::size_t resend_if_stalled(Clock::time_point now, Emit&& emit) {
    if (ring_.empty() || now - last_progress_ < limits_.resend_after) return 0;
    last_progress_ = now;
    for (const Outgoing& m : ring_) emit(m.seq, m.body);
    resends_ += ring_.size();
    return ring_.size();
  }
  std::size_t unacked_bytes() const { return unacked_bytes_; }
  std::size_t unacked_messages() const { return ring_.size(); }
  // Whether the next part of a large message may be sent now: while the
  // unacknowledged parts' bytes are under the limit for parts in flight
  // (the smaller one while whole messages go beside them: SessionLimits).
  bool room_for_part(Clock::time_point now) const;
  bool window_full() const { return unacked_bytes_ >= limits_.window_bytes; }
  std::uint64_t resends() const { return resends_; }

  // --- receiver half ---
  enum class Arrival {
    Deliver,    // the next in order: deliver it now
    Duplicate,  // received before: drop it (and acknowledge again)
    Gap,        // an earlier one is missing: drop it; the sender resends
  };
  // Judges a message's sequence number; Deliver advances the cumulative ack.
  Arrival arrive(std::uint64_t seq, std::size_t bytes);
  std::uint64_t cumulative_ack() const { return delivered_; }
  // Whether an ack frame should go now (enough delivered since the last
  // ack), or at the tick (any delivered since, or a duplicate or gap seen:
  // the sender may be resending into a lost ack).
  bool ack_due_now() const;
  // Also when the peer's epoch was just learned: the ack frame tells the
  // peer that this end knows it.
  bool ack_due_at_tick() const { return delivered_ != ack_sent_ || nudge_ || epoch_news_; }
  // The caller sent cumulative_ack() (in an ack frame or on a data frame).
  void ack_sent();

 private:
  struct Outgoing {
    std::uint64_t seq;
    Body body;
  };
  SessionLimits limits_;
  // Epochs.
  std::uint32_t epoch_;
  std::uint32_t floor_;
  bool wary_;
  bool settled_ = false;  // peer_epoch_ is the peer's epoch for this session
  std::uint32_t peer_epoch_ = 0;
  bool peer_knows_epoch_ = false;
  bool epoch_news_ = false;  // the peer's epoch learned since the last ack frame
  // Sender half.
  std::uint64_t next_seq_ = 1;
  std::deque<Outgoing> ring_;  // oldest first; seqs consecutive
  std::size_t unacked_bytes_ = 0;
  std::size_t unacked_part_bytes_ = 0;  // of those, large messages' parts
  Clock::time_point last_progress_{};
  std::uint64_t resends_ = 0;
  bool sent_whole_ = false;       // a whole body was stamped, at last_whole_
  Clock::time_point last_whole_{};
  // Receiver half.
  std::uint64_t delivered_ = 0;  // every seq up to this one delivered
  std::uint64_t ack_sent_ = 0;
  std::uint64_t since_ack_messages_ = 0;
  std::size_t since_ack_bytes_ = 0;
  bool nudge_ = false;
};

}  // namespace host::cluster

// Frames to one peer published together: several frames in one NATS
// message, so that a burst of small messages costs one send() on this
// node and one hand-off from NATS's reader on the peer, not one each.
// Threads: none of its own and no lock; its owner (NatsNode's Peer) holds
// one mutex around every call, and a flusher thread of the node takes the
// chunks out and publishes them (NatsNode::flush_loop).
//
// Why: every publish of the connection is written at once (SendAsap, for a
// round trip of about 200 us rather than 2 ms), so a process sending 16-byte
// messages in a loop spent half its time in send(), one system call per
// message, and the peer's NATS threads handed each message on alone.
//
// When a frame waits (hold): while frames wait already or a flush is under
// way (order: a frame never overtakes one sent before it), or when it is
// small and another small data frame went less than kBurstGap ago (a
// burst). A frame alone after a pause goes at once: a round trip does not
// wait for a flusher. A large frame (a part of a large message) goes at
// once too unless it must keep its place: NATS writes it from its own
// bytes, where waiting here would copy it.
//
// Bytes: a batch starts with kBatchMagic (a frame starts with another
// magic byte, wire.cpp), then each frame as a u32 length (little-endian)
// and its bytes.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>

namespace host::cluster {

inline constexpr std::uint8_t kBatchMagic = 0xC6;
// Small frames closer together than this make a burst.
inline constexpr std::chrono::microseconds kBurstGap{50};
// Frames up to this size may wait for a burst; larger ones go at once.
inline constexpr std::size_t kBatchFrameMax = 4u << 10;
// A chunk (one NATS message) stops growing here: well under NATS's
// max_payload (1 MB by default), and one flush's worth of bytes.
inline constexpr std::size_t kBatchChunkBytes = 64u << 10;

class Batch {
 public:
  using Clock = std::chrono::steady_clock;
  // Whether a frame of `bytes` (a data frame or not) must wait here rather
  // than be published now; records a small data frame's time either way.
  bool hold(std::size_t bytes, bool data, Clock::time_point now);
  void add(std::string_view frame);
  // The chunks to publish, oldest first; the batch is empty after, and
  // flushing() true until flushed() (frames that come meanwhile wait).
  std::deque<std::string> take();
  // The flusher published what take gave; `spare` may be one of its
  // chunks, kept to be written over (no fresh memory per burst).
  void flushed(std::string spare);
  bool empty() const { return chunks_.empty(); }
  bool flushing() const { return flushing_; }
  // Whether the owner already asked the flusher for this batch.
  bool queued = false;

 private:
  std::deque<std::string> chunks_;
  std::string spare_;
  bool flushing_ = false;
  Clock::time_point last_small_{};
};

// Calls fn(frame) for each frame of the batch `bytes` in order. False when
// bytes are not a batch or a length runs past its end (the frames before
// it were given: each is checked again by decode_frame).
template <typename Fn>
bool for_each_in_batch(std::string_view bytes, Fn&& fn) {
  if (bytes.empty() || static_cast<std::uint8_t>(bytes.front()) != kBatchMagic) return false;
  bytes.remove_prefix(1);
  while (!bytes.empty()) {
    if (bytes.size() < 4) return false;
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
    const std::size_t n = std::size_t{p[0]} | std::size_t{p[1]} << 8 | std::size_t{p[2]} << 16 | std::size_t{p[3]} << 24;
    bytes.remove_prefix(4);
    if (n > bytes.size()) return false;
    fn(bytes.substr(0, n));
    bytes.remove_prefix(n);
  }
  return true;
}

}  // namespace host::cluster

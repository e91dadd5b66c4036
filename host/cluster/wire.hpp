// The cluster's frames as bytes on NATS: what a node publishes and how a
// received one is read back. Threads: any (pure functions), but for a
// Body, framed under its owner's lock (see Body).
//
// Every frame starts with a header: a magic byte, the frame kind, the
// sender's node id and the addressee's (0 on the heartbeat subject), then
// the session epochs of each end (0 on the heartbeat subject; see
// Session::judge). The node ids are each run's incarnation (NatsNode), so
// a frame to an earlier run of a node names an id nobody holds and is
// dropped; the epochs do the same for an earlier session between the same
// two runs (a reset or data still in flight when the pair went down and
// up again). Integers are
// little-endian, strings a u32 length and their bytes. Reading checks every
// length: a truncated, foreign or corrupt frame is refused, never trusted.
//
// The heartbeat names its sender's wire version (kWireVersion) after the
// name: a node hearing another version refuses that peer (NatsNode) rather
// than misread its frames. So every version keeps the header and the
// heartbeat's name and version where they are; what a later version adds
// to the heartbeat goes after them (read past, not refused).
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "host/pid.hpp"

namespace host::cluster {

// The frames' and envelopes' format this build speaks. Raised with any
// change a node of the previous version would misread. A heartbeat naming
// none is 0: a node from before the version was named (whose heartbeat
// ended at the name), whose batches and frames this one does not read.
inline constexpr std::uint32_t kWireVersion = 1;

enum class FrameKind : std::uint8_t {
  Heartbeat = 1,  // on the cluster subject: "I am (id, name, wire version)", every 500 ms
  Bye = 2,        // on the cluster subject: this run ends; take it down now.
                  // To a node: a reset, "I took you down; take me down too"
  Data = 3,       // to a node: one session message (seq, ack, envelope)
  Ack = 4,        // to a node: the cumulative ack alone
};

struct Frame {
  FrameKind kind = FrameKind::Heartbeat;
  std::uint32_t from_node = 0;
  std::uint32_t to_node = 0;
  // Data, Ack, Bye to a node: the sender's session with the addressee,
  // and the addressee's session as the sender knows it (0: not heard yet).
  std::uint32_t from_epoch = 0;
  std::uint32_t to_epoch = 0;
  std::uint64_t seq = 0;  // Data
  std::uint64_t ack = 0;  // Data, Ack
  std::string_view text;  // Heartbeat, Bye: the node's name; Data: the envelope
  std::uint32_t version = kWireVersion;  // Heartbeat: the sender's wire version
};

std::string encode_frame(const Frame& f);
// nullopt for bytes that are not a whole frame; text points into bytes.
std::optional<Frame> decode_frame(std::string_view bytes);

// What a Data frame carries: one operation on a process of the addressee.
// Messages and forwarded events (a monitor's exit, a link's link_down, a
// cancel) to a process there; the requests that make a monitor or a link
// span the two nodes; a terminate.
struct Envelope {
  enum class Op : std::uint8_t {
    Message = 1,       // to: the process; from; topic; payload
    NamedMessage = 2,  // name: registered there; from; topic; payload
    Event = 3,         // to; from; event_kind, tag, failed, payload (host/process.hpp's Event)
    Monitor = 4,       // to: the target; from: the watcher; tag: the ref
    Demonitor = 5,     // the same
    Link = 6,          // to: the target; from: the linker
    Unlink = 7,        // the same
    Terminate = 8,     // to: the target
    Spawn = 9,         // name: the entry; from: the asker; tag: its yield; payload: the arguments
    SpawnReply = 10,   // to: the asker; tag; failed; payload: the new PID's text, or the error
  };
  Op op = Op::Message;
  Pid to;
  std::string_view name;
  Pid from;
  std::uint64_t tag = 0;
  std::uint8_t event_kind = 0;
  bool failed = false;
  std::string_view topic;
  std::string_view payload;
};

std::string encode_envelope(const Envelope& e);
std::optional<Envelope> decode_envelope(std::string_view bytes);

// process.spawn_on's request, as its command's bytes: the node, the
// entry, then the arguments in the codec's bytes (the rest).
struct SpawnRequest {
  std::string_view node;
  std::string_view entry;
  std::string_view args;
};
std::string encode_spawn_request(const SpawnRequest& r);
std::optional<SpawnRequest> decode_spawn_request(std::string_view bytes);

// A session message's body: an envelope whole, or one part of an envelope
// over kPartBytes. Each part is its own session message and frame: NATS
// refuses a payload over its max_payload (1 MB by default), and a part's
// loss resends that part's window, not the whole message. Each body starts
// with a byte saying which; a part then names its transfer (a number the
// sender gives each large envelope), because the parts of one envelope
// need not be consecutive: the sender interleaves them with other
// messages (outbox.hpp), so that a small message is not stuck behind 8 MB.
// The size: every part costs a publication, a message through the server
// (the largest CPU cost on a large message's path, and higher per MB in
// small messages than in large ones), the receiving client's allocation
// and a hand-off to its delivery thread, so fewer parts cost less per MB;
// two of them fit under SessionLimits::parts_in_flight_bytes, so that the
// next part is on its way while the previous one's ack comes back (one
// alone would stop and wait). BENCHMARKS.md, "128 KB parts".
inline constexpr std::size_t kPartBytes = 128u << 10;
// A part body's bytes before its slice of the envelope: the kind, the
// transfer's number and the whole envelope's size (the receiver makes room
// for it at once rather than growing, and copying, as parts come).
inline constexpr std::size_t kPartHeaderBytes = 17;
// A data frame's bytes before its body: magic, kind, the two node ids and
// epochs, seq and ack.
inline constexpr std::size_t kDataHeaderBytes = 34;
// The room an envelope buffer keeps before the envelope (EnvelopeBuffer):
// a data frame's header and a part's, written there when it is published.
inline constexpr std::size_t kEnvelopeRoom = kDataHeaderBytes + kPartHeaderBytes;

// An envelope's bytes after kEnvelopeRoom bytes of room, shared by the
// bodies that carry it (Body): encoded once, never copied into parts or
// frames.
using EnvelopeBuffer = std::shared_ptr<std::string>;
EnvelopeBuffer encode_envelope_buffer(const Envelope& e);
// The same bytes as a string (one made into an EnvelopeBuffer by a move),
// for a caller that appends the payload itself (NatsNode::begin_message),
// with capacity for `more` bytes of it.
std::string encode_envelope_with_room(const Envelope& e, std::size_t more = 0);

// One body as the sender keeps it until acknowledged: a slice of an
// envelope buffer. Its own header (the kind, and a part's transfer and
// size) and its frame's are written just before the slice at each
// publication (framed), over the room for the first part and over the end
// of the previous slice for the others, which is put back after: so that
// a frame goes to NATS as one run of bytes with no copy of the slice.
// Threads: framed writes into the shared buffer, so all bodies of one
// buffer are framed under one lock (NatsNode's Peer::mu).
class Body {
 public:
  Body() = default;
  // A body of these bytes as they are (its kind byte first): for tests and
  // for bodies made elsewhere.
  explicit Body(std::string_view bytes);
  // Bytes on the wire: its header and its slice.
  std::size_t size() const { return header_ + slice_; }
  // Whether it is one part of a large envelope (not a whole one, nor
  // bytes given as they are).
  bool part() const { return header_ == kPartHeaderBytes; }
  // Calls fn(frame bytes), the data frame `header` (its text ignored)
  // carrying this body, built in place; the buffer is as before after.
  template <typename Fn>
  void framed(const Frame& header, Fn&& fn) const {
    const std::size_t n = kDataHeaderBytes + header_;
    char* p = buf_->data() + at_ - n;
    // Past the first slice the headers go over the previous slice's end.
    const bool borrowed = at_ > kEnvelopeRoom;
    char saved[kEnvelopeRoom];
    if (borrowed) std::memcpy(saved, p, n);
    write_headers(header, p);
    fn(std::string_view(p, n + slice_));
    if (borrowed) std::memcpy(p, saved, n);
  }
  // A copy of its bytes on the wire (tests).
  std::string bytes() const;

 private:
  friend Body whole_body(const EnvelopeBuffer& envelope);
  friend std::vector<Body> split_into_bodies(const EnvelopeBuffer& envelope, std::uint64_t transfer);
  void write_headers(const Frame& header, char* at) const;
  EnvelopeBuffer buf_;
  std::size_t at_ = 0;      // the slice's start in buf_
  std::size_t slice_ = 0;   // its length
  std::size_t header_ = 0;  // 1 (whole) or kPartHeaderBytes; 0 for a body given as bytes
  char kind_ = 0;
  std::uint64_t transfer_ = 0;
  std::uint64_t total_ = 0;  // the envelope's size
};

// The bodies that carry an envelope buffer's envelope: one whole, or parts
// of kPartBytes numbered `transfer` (the sender's next for the peer).
std::vector<Body> split_into_bodies(const EnvelopeBuffer& envelope, std::uint64_t transfer = 0);
// The one body of an envelope of up to kPartBytes (split_into_bodies'
// first, without a vector: a small message's common case).
Body whole_body(const EnvelopeBuffer& envelope);

// The receiver's side: bodies in session order in, whole envelopes out.
// Parts of different transfers may interleave; each transfer's own parts
// arrive in order (the session keeps order).
class Reassembly {
 public:
  // The envelope `body` completes, decoded, or nullopt: a part that is not
  // the last, or a bad body (dropped, and with it its transfer's parts),
  // or one that is no envelope. Its views point into body (a whole one) or
  // into this object until the next add.
  std::optional<Envelope> add(std::string_view body);
  // Whether the last envelope add returned was put together from parts:
  // then take_payload moves its payload's bytes out (e.payload views
  // them), and the delivered message owns them without another copy. A
  // large one's buffer is a kept one (buffer_pool.hpp), for its receiver
  // to give back.
  bool from_parts() const { return from_parts_; }
  std::string take_payload() { return std::move(done_payload_); }
  // Bytes of envelopes begun and not finished.
  std::size_t buffered() const { return buffered_; }
  std::size_t transfers() const { return partial_.size(); }

 private:
  // An envelope coming in parts: its fields (the bytes before the
  // payload, from the first part) apart from its payload, whose buffer is
  // sized once from the first part's header, so that the payload is
  // delivered as it lies (no shift to the front, no growth).
  struct Partial {
    std::string head;     // empty when the fields did not fit in the first part
    std::string payload;  // then this holds the whole envelope
  };
  std::unordered_map<std::uint64_t, Partial> partial_;
  std::size_t buffered_ = 0;
  std::string done_head_, done_payload_;
  bool from_parts_ = false;
};

}  // namespace host::cluster

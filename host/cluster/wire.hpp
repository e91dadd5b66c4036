// The cluster's frames as bytes on NATS: what a node publishes and how a
// received one is read back. Threads: any (pure functions).
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
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "host/pid.hpp"

namespace host::cluster {

enum class FrameKind : std::uint8_t {
  Heartbeat = 1,  // on the cluster subject: "I am (id, name)", every 500 ms
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
inline constexpr std::size_t kPartBytes = 64u << 10;
// A part body's bytes before its slice of the envelope: the kind, the
// transfer's number and the whole envelope's size (the receiver makes room
// for it at once rather than growing, and copying, as parts come).
inline constexpr std::size_t kPartHeaderBytes = 17;
std::vector<std::string> split_into_bodies(std::string_view envelope, std::uint64_t transfer = 0);
// The receiver's side: bodies in session order in, whole envelopes out.
// Parts of different transfers may interleave; each transfer's own parts
// arrive in order (the session keeps order).
class Reassembly {
 public:
  // The envelope `body` completes (a view into body, or into this
  // object's buffer until the next add), or nullopt: a part that is not
  // the last, or a bad body (dropped, and with it its transfer's parts).
  std::optional<std::string_view> add(std::string_view body);
  // The envelope the last add completed from parts, moved out (the
  // view add returned then points into it): its bytes become the
  // delivered message's without another copy of a large one.
  std::string take_done() { return std::move(done_); }
  // Bytes of envelopes begun and not finished.
  std::size_t buffered() const { return buffered_; }
  std::size_t transfers() const { return partial_.size(); }

 private:
  std::unordered_map<std::uint64_t, std::string> partial_;
  std::size_t buffered_ = 0;
  std::string done_;
};

}  // namespace host::cluster

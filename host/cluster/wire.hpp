// The cluster's frames as bytes on NATS: what a node publishes and how a
// received one is read back. Threads: any (pure functions).
//
// Every frame starts with a header: a magic byte, the frame kind, the
// sender's node id and the addressee's (0 on the heartbeat subject). The
// node ids are each run's incarnation (NatsNode), so a frame to an earlier
// run of a node names an id nobody holds and is dropped. Integers are
// little-endian, strings a u32 length and their bytes. Reading checks every
// length: a truncated, foreign or corrupt frame is refused, never trusted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

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

}  // namespace host::cluster

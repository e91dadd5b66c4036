// Frame and envelope bytes (wire.hpp).
#include "host/cluster/wire.hpp"

#include <algorithm>
#include <cstring>

#include "host/cluster/buffer_pool.hpp"

namespace host::cluster {

namespace {

constexpr std::uint8_t kMagic = 0xC5;

void put_u8(std::string& out, std::uint8_t v) { out.push_back(static_cast<char>(v)); }
template <typename T>
void put_int(std::string& out, T v) {
  for (std::size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_str(std::string& out, std::string_view s) {
  put_int<std::uint32_t>(out, static_cast<std::uint32_t>(s.size()));
  out.append(s);
}
void put_pid(std::string& out, const Pid& p) {
  put_int(out, p.node);
  put_int(out, p.index);
  put_int(out, p.generation);
}

// Reads from the front of `rest`; every read fails (and stays failed) once
// the bytes run out.
struct Reader {
  std::string_view rest;
  bool ok = true;
  template <typename T>
  T get() {
    if (!ok || rest.size() < sizeof(T)) {
      ok = false;
      return 0;
    }
    T v = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(static_cast<std::uint8_t>(rest[i])) << (8 * i);
    rest.remove_prefix(sizeof(T));
    return v;
  }
  std::string_view str() {
    const auto n = get<std::uint32_t>();
    if (!ok || rest.size() < n) {
      ok = false;
      return {};
    }
    std::string_view s = rest.substr(0, n);
    rest.remove_prefix(n);
    return s;
  }
  Pid pid() {
    Pid p;
    p.node = get<std::uint32_t>();
    p.index = get<std::uint32_t>();
    p.generation = get<std::uint32_t>();
    return p;
  }
};

}  // namespace

namespace {

// Little-endian into raw bytes (a data frame's header, written in place).
template <typename T>
char* put_raw(char* at, T v) {
  for (std::size_t i = 0; i < sizeof(T); ++i) at[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return at + sizeof(T);
}

// A data frame's kDataHeaderBytes.
char* put_data_header(char* at, const Frame& f) {
  at = put_raw<std::uint8_t>(at, kMagic);
  at = put_raw<std::uint8_t>(at, static_cast<std::uint8_t>(FrameKind::Data));
  at = put_raw(at, f.from_node);
  at = put_raw(at, f.to_node);
  at = put_raw(at, f.from_epoch);
  at = put_raw(at, f.to_epoch);
  at = put_raw(at, f.seq);
  return put_raw(at, f.ack);
}

}  // namespace

std::string encode_frame(const Frame& f) {
  std::string out;
  if (f.kind == FrameKind::Data) {
    out.resize(kDataHeaderBytes);
    (void)put_data_header(out.data(), f);
    out.append(f.text);  // the rest of the frame
    return out;
  }
  out.reserve(40 + f.text.size());
  put_u8(out, kMagic);
  put_u8(out, static_cast<std::uint8_t>(f.kind));
  put_int(out, f.from_node);
  put_int(out, f.to_node);
  put_int(out, f.from_epoch);
  put_int(out, f.to_epoch);
  switch (f.kind) {
    case FrameKind::Heartbeat:
      put_str(out, f.text);
      put_int(out, f.version);
      break;
    case FrameKind::Bye: put_str(out, f.text); break;
    case FrameKind::Data: break;  // above
    case FrameKind::Ack: put_int(out, f.ack); break;
  }
  return out;
}

std::optional<Frame> decode_frame(std::string_view bytes) {
  Reader r{bytes};
  if (r.get<std::uint8_t>() != kMagic) return std::nullopt;
  Frame f;
  const auto kind = r.get<std::uint8_t>();
  f.from_node = r.get<std::uint32_t>();
  f.to_node = r.get<std::uint32_t>();
  f.from_epoch = r.get<std::uint32_t>();
  f.to_epoch = r.get<std::uint32_t>();
  switch (kind) {
    case static_cast<std::uint8_t>(FrameKind::Heartbeat):
      f.kind = FrameKind::Heartbeat;
      f.text = r.str();
      // None named: a node from before the version was; past it, what a
      // later version added (wire.hpp).
      f.version = r.ok && r.rest.empty() ? 0 : r.get<std::uint32_t>();
      break;
    case static_cast<std::uint8_t>(FrameKind::Bye):
      f.kind = FrameKind::Bye;
      f.text = r.str();
      if (!r.rest.empty()) return std::nullopt;
      break;
    case static_cast<std::uint8_t>(FrameKind::Data):
      f.kind = FrameKind::Data;
      f.seq = r.get<std::uint64_t>();
      f.ack = r.get<std::uint64_t>();
      f.text = r.rest;
      break;
    case static_cast<std::uint8_t>(FrameKind::Ack):
      f.kind = FrameKind::Ack;
      f.ack = r.get<std::uint64_t>();
      if (!r.rest.empty()) return std::nullopt;
      break;
    default: return std::nullopt;
  }
  if (!r.ok || f.from_node == 0) return std::nullopt;
  return f;
}

namespace {

std::size_t envelope_size(const Envelope& e) { return 51 + e.name.size() + e.topic.size() + e.payload.size(); }

void put_envelope(std::string& out, const Envelope& e) {
  put_u8(out, static_cast<std::uint8_t>(e.op));
  put_pid(out, e.to);
  put_pid(out, e.from);
  put_int(out, e.tag);
  put_u8(out, e.event_kind);
  put_u8(out, e.failed ? 1 : 0);
  put_str(out, e.name);
  put_str(out, e.topic);
  out.append(e.payload);  // the rest
}

}  // namespace

std::string encode_envelope(const Envelope& e) {
  std::string out;
  out.reserve(envelope_size(e));
  put_envelope(out, e);
  return out;
}

std::string encode_envelope_with_room(const Envelope& e, std::size_t more) {
  // A large one's buffer is a kept one when there is one (buffer_pool.hpp).
  std::string buf = take_buffer({}, kEnvelopeRoom + envelope_size(e) + more);
  buf.resize(kEnvelopeRoom);
  put_envelope(buf, e);
  return buf;
}

EnvelopeBuffer encode_envelope_buffer(const Envelope& e) {
  return share_buffer(encode_envelope_with_room(e));
}

std::optional<Envelope> decode_envelope(std::string_view bytes) {
  Reader r{bytes};
  Envelope e;
  const auto op = r.get<std::uint8_t>();
  if (op < static_cast<std::uint8_t>(Envelope::Op::Message) || op > static_cast<std::uint8_t>(Envelope::Op::SpawnReply))
    return std::nullopt;
  e.op = static_cast<Envelope::Op>(op);
  e.to = r.pid();
  e.from = r.pid();
  e.tag = r.get<std::uint64_t>();
  e.event_kind = r.get<std::uint8_t>();
  e.failed = r.get<std::uint8_t>() != 0;
  e.name = r.str();
  e.topic = r.str();
  e.payload = r.rest;
  if (!r.ok) return std::nullopt;
  return e;
}

std::string encode_spawn_request(const SpawnRequest& r) {
  std::string out;
  put_str(out, r.node);
  put_str(out, r.entry);
  out.append(r.args);
  return out;
}

std::optional<SpawnRequest> decode_spawn_request(std::string_view bytes) {
  Reader rd{bytes};
  SpawnRequest r;
  r.node = rd.str();
  r.entry = rd.str();
  r.args = rd.rest;
  if (!rd.ok) return std::nullopt;
  return r;
}

namespace {
constexpr char kWhole = 0, kMore = 1, kLast = 2;
// The most a first part makes room for at once (a larger envelope grows).
constexpr std::uint64_t kMaxReservedBytes = 1ull << 30;
}  // namespace

namespace {

std::uint64_t get_u64_le(std::string_view in) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= std::uint64_t{static_cast<unsigned char>(in[i])} << (8 * i);
  return v;
}

}  // namespace

Body::Body(std::string_view bytes) {
  auto buf = std::make_shared<std::string>();
  buf->reserve(kDataHeaderBytes + bytes.size());
  buf->resize(kDataHeaderBytes);
  buf->append(bytes);
  buf_ = std::move(buf);
  at_ = kDataHeaderBytes;
  slice_ = bytes.size();
}

void Body::write_headers(const Frame& header, char* at) const {
  at = put_data_header(at, header);
  if (header_ == 0) return;  // given as bytes, its own header included
  *at++ = kind_;
  if (header_ == 1) return;
  at = put_raw(at, transfer_);
  (void)put_raw(at, total_);
}

std::string Body::bytes() const {
  std::string out;
  framed(Frame{}, [&](std::string_view frame) { out.assign(frame.substr(kDataHeaderBytes)); });
  return out;
}

Body whole_body(const EnvelopeBuffer& envelope) {
  Body b;
  b.buf_ = envelope;
  b.at_ = kEnvelopeRoom;
  b.slice_ = envelope->size() - kEnvelopeRoom;
  b.header_ = 1;
  b.kind_ = kWhole;
  b.total_ = b.slice_;
  return b;
}

std::vector<Body> split_into_bodies(const EnvelopeBuffer& envelope, std::uint64_t transfer) {
  std::vector<Body> bodies;
  const std::size_t size = envelope->size() - kEnvelopeRoom;
  auto body = [&](std::size_t at, std::size_t n, char kind, std::size_t header) {
    Body& b = bodies.emplace_back();
    b.buf_ = envelope;
    b.at_ = kEnvelopeRoom + at;
    b.slice_ = n;
    b.header_ = header;
    b.kind_ = kind;
    b.transfer_ = transfer;
    b.total_ = size;
  };
  if (size <= kPartBytes) {
    bodies.push_back(whole_body(envelope));
    return bodies;
  }
  bodies.reserve((size + kPartBytes - 1) / kPartBytes);
  for (std::size_t at = 0; at < size; at += kPartBytes) {
    const std::size_t n = std::min(kPartBytes, size - at);
    body(at, n, at + n < size ? kMore : kLast, kPartHeaderBytes);
  }
  return bodies;
}

namespace {

// The bytes of an envelope's fields (all before its payload) at the
// front of `bytes`, or 0 when they are not all there.
std::size_t envelope_head_bytes(std::string_view bytes) {
  auto e = decode_envelope(bytes);
  return e ? bytes.size() - e->payload.size() : 0;
}

}  // namespace

std::optional<Envelope> Reassembly::add(std::string_view body) {
  from_parts_ = false;
  if (body.empty()) return std::nullopt;
  const char kind = body.front();
  if (kind == kWhole) return decode_envelope(body.substr(1));
  if ((kind != kMore && kind != kLast) || body.size() < kPartHeaderBytes) return std::nullopt;
  const std::uint64_t transfer = get_u64_le(body.substr(1));
  const std::uint64_t total = get_u64_le(body.substr(9));
  body.remove_prefix(kPartHeaderBytes);
  auto it = partial_.find(transfer);
  if (it == partial_.end()) {
    if (kind == kLast) return std::nullopt;  // a last part without its first
    it = partial_.try_emplace(transfer).first;
    Partial& p = it->second;
    const std::size_t head = envelope_head_bytes(body);
    p.head.assign(body.substr(0, head));
    buffered_ += head;
    body.remove_prefix(head);
    // Room for the whole payload at its first part (a size past what the
    // sender's parts could make in a day is not believed): a kept buffer
    // for a large one, whose pages are mapped (buffer_pool.hpp).
    if (total <= kMaxReservedBytes && total >= head) p.payload = take_buffer({}, total - head);
  }
  Partial& p = it->second;
  p.payload.append(body);
  buffered_ += body.size();
  if (kind == kMore) return std::nullopt;
  buffered_ -= p.head.size() + p.payload.size();
  done_head_ = std::move(p.head);
  done_payload_ = std::move(p.payload);
  partial_.erase(it);
  std::optional<Envelope> e;
  if (!done_head_.empty()) {
    e = decode_envelope(done_head_);
    if (e) e->payload = done_payload_;
  } else if ((e = decode_envelope(done_payload_))) {
    // Fields longer than a part (a topic of 128 KB): the payload is the
    // buffer's tail, shifted to its front so that it is owned as it is.
    const std::size_t head = done_payload_.size() - e->payload.size();
    done_head_.assign(done_payload_, 0, head);
    done_payload_.erase(0, head);
    e = decode_envelope(done_head_);
    if (e) e->payload = done_payload_;
  }
  from_parts_ = e.has_value();
  return e;
}

}  // namespace host::cluster

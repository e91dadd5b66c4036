// Frame and envelope bytes (wire.hpp).
#include "host/cluster/wire.hpp"

#include <cstring>

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

std::string encode_frame(const Frame& f) {
  std::string out;
  out.reserve(40 + f.text.size());
  put_u8(out, kMagic);
  put_u8(out, static_cast<std::uint8_t>(f.kind));
  put_int(out, f.from_node);
  put_int(out, f.to_node);
  put_int(out, f.from_epoch);
  put_int(out, f.to_epoch);
  switch (f.kind) {
    case FrameKind::Heartbeat:
    case FrameKind::Bye: put_str(out, f.text); break;
    case FrameKind::Data:
      put_int(out, f.seq);
      put_int(out, f.ack);
      out.append(f.text);  // the rest of the frame
      break;
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
    case static_cast<std::uint8_t>(FrameKind::Bye):
      f.kind = static_cast<FrameKind>(kind);
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

std::string encode_envelope(const Envelope& e) {
  std::string out;
  out.reserve(56 + e.name.size() + e.topic.size() + e.payload.size());
  put_u8(out, static_cast<std::uint8_t>(e.op));
  put_pid(out, e.to);
  put_pid(out, e.from);
  put_int(out, e.tag);
  put_u8(out, e.event_kind);
  put_u8(out, e.failed ? 1 : 0);
  put_str(out, e.name);
  put_str(out, e.topic);
  out.append(e.payload);  // the rest
  return out;
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

void put_u64_le(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::uint64_t get_u64_le(std::string_view in) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= std::uint64_t{static_cast<unsigned char>(in[i])} << (8 * i);
  return v;
}

}  // namespace

std::vector<std::string> split_into_bodies(std::string_view envelope, std::uint64_t transfer) {
  std::vector<std::string> bodies;
  if (envelope.size() <= kPartBytes) {
    bodies.emplace_back(1, kWhole).append(envelope);
    return bodies;
  }
  bodies.reserve((envelope.size() + kPartBytes - 1) / kPartBytes);
  for (std::size_t at = 0; at < envelope.size(); at += kPartBytes) {
    const std::string_view part = envelope.substr(at, kPartBytes);
    std::string& body = bodies.emplace_back();
    body.reserve(kPartHeaderBytes + part.size());
    body.push_back(at + part.size() < envelope.size() ? kMore : kLast);
    put_u64_le(body, transfer);
    put_u64_le(body, envelope.size());
    body.append(part);
  }
  return bodies;
}

std::optional<std::string_view> Reassembly::add(std::string_view body) {
  if (body.empty()) return std::nullopt;
  const char kind = body.front();
  if (kind == kWhole) return body.substr(1);
  if ((kind != kMore && kind != kLast) || body.size() < kPartHeaderBytes) return std::nullopt;
  const std::uint64_t transfer = get_u64_le(body.substr(1));
  const std::uint64_t total = get_u64_le(body.substr(9));
  body.remove_prefix(kPartHeaderBytes);
  if (kind == kMore) {
    auto [it, fresh] = partial_.try_emplace(transfer);
    // Room for the whole at its first part (a size past what the
    // sender's parts could make in a day is not believed).
    if (fresh && total <= kMaxReservedBytes) it->second.reserve(total);
    it->second.append(body);
    buffered_ += body.size();
    return std::nullopt;
  }
  auto it = partial_.find(transfer);
  if (it == partial_.end()) return std::nullopt;  // a last part without its first
  buffered_ -= it->second.size();
  done_ = std::move(it->second);
  partial_.erase(it);
  done_.append(body);
  return std::string_view(done_);
}

}  // namespace host::cluster

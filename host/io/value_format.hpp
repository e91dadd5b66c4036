// The codec's byte format, without Lua: the tags and the number and
// varint forms that bindings/codec.cpp writes from Lua values and that the
// I/O layer reads and writes without a Lua state (call_values). Threads:
// any; these are pure functions of their arguments.
//
// A payload is a count (a varint), then that many values; a value is its
// tag, then what the tag needs: an integer its zigzag varint, a double its
// 8 IEEE bytes, a string its length (a varint) and bytes, a table its two
// sizes (array, then other pairs) and its items.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace host {

// How deep tables may nest in a payload, for the encoder and every decoder.
inline constexpr int kMaxDepth = 256;

// The encoding's tags: a value is its tag, then what the tag needs.
// kNullPointer is the NULL light userdata, nothing after it: lua-cjson's
// null is that value, and each process's json.null compares equal to it,
// so a decoded JSON document with nulls can be sent as it is. (Its
// pointer is the only one that means the same in another process.)
enum CodecTag : std::uint8_t { kNil = 0, kFalse, kTrue, kInt, kDouble, kString, kTable, kMoved, kNullPointer };

// Writes v as a varint at p, which has room for its up to 10 bytes;
// returns where it ends.
inline char* write_varint(char* p, std::uint64_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}

// Whether d is encoded as an integer (kInt): a whole number in int64's
// range, not -0.0. Told by its conversion to an integer and back (in
// range, that truncation is exact only for whole numbers), not by
// std::floor: a call into libm without SSE4.1's rounding, paid on
// every number.
inline bool encodes_as_int(double d) {
  return d >= -9.2233720368547758e18 && d < 9.2233720368547758e18 &&
         static_cast<double>(static_cast<std::int64_t>(d)) == d && !(d == 0 && std::signbit(d));
}
// An integer's zigzag form (0, -1, 1, -2, ... as 0, 1, 2, 3, ...).
inline std::uint64_t zigzag(std::int64_t i) {
  return (static_cast<std::uint64_t>(i) << 1) ^ static_cast<std::uint64_t>(i >> 63);
}

// The encoding of one number as a whole payload (its count, then an
// integer's tag and zigzag varint, or a double's tag and 8 bytes: 12
// bytes at most), written into buf; returns its length. Inline: a send of
// a number (ThreadRing's token) paid extra for it through
// encode_small's call and type dispatch.
inline std::size_t encode_number(double d, char* buf) {
  char* p = buf;
  *p++ = 1;  // the count, a one-byte varint
  if (encodes_as_int(d)) {
    *p++ = static_cast<char>(kInt);
    p = write_varint(p, zigzag(static_cast<std::int64_t>(d)));
  } else {
    *p++ = static_cast<char>(kDouble);
    std::memcpy(p, &d, 8);
    p += 8;
  }
  return static_cast<std::size_t>(p - buf);
}

// Reads the varint at p, stopping before end: kOk with its value and p past
// it, or why not (p where it stopped). The decoder's and the short path's.
enum class Varint { kOk, kTruncated, kTooLong };
inline Varint read_varint(const char*& p, const char* end, std::uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (p >= end) return Varint::kTruncated;
    const auto b = static_cast<std::uint8_t>(*p++);
    v |= static_cast<std::uint64_t>(b & 0x7F) << shift;
    if (!(b & 0x80)) return Varint::kOk;
  }
  return Varint::kTooLong;
}

// An integer from its zigzag form (0, -1, 1, -2, ... as 0, 1, 2, 3, ...).
inline std::int64_t unzigzag(std::uint64_t z) { return static_cast<std::int64_t>((z >> 1) ^ (~(z & 1) + 1)); }

// Whether bytes encode one string of under 128 bytes (its length in one
// byte), and if so its bytes in *s: the form push_simple_value_with takes.
inline bool short_string_value(std::string_view bytes, std::string_view* s) {
  if (bytes.size() < 3 || bytes[0] != 1 || static_cast<std::uint8_t>(bytes[1]) != kString) return false;
  const std::size_t n = static_cast<std::uint8_t>(bytes[2]);
  if (n >= 0x80 || bytes.size() != 3 + n) return false;
  *s = bytes.substr(3);
  return true;
}

}  // namespace host

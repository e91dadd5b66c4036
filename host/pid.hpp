// Process identifiers: a slot index plus the generation of that slot, and a
// node id reserved for a future multi-host relay. Rendered "<node.index.gen>"
// like Erlang's "<0.84.0>", and parsed back from that form.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace host {

struct Pid {
  std::uint32_t node = 0;
  std::uint32_t index = 0;
  std::uint32_t generation = 0;  // 0 never names a live process

  bool valid() const { return generation != 0; }
  friend bool operator==(const Pid&, const Pid&) = default;

  std::string to_string() const;
  // Writes the same text into buf without allocating; returns its length.
  // kMaxText holds "<4294967295.4294967295.4294967295>".
  static constexpr std::size_t kMaxText = 36;
  std::size_t format(char (&buf)[kMaxText]) const;
  // The PID text names, or nullopt when it is not of that form. Generation
  // 0 parses (to a PID that is not valid(), naming no process).
  static std::optional<Pid> parse(std::string_view text);
};

}  // namespace host

template <>
struct std::hash<host::Pid> {
  std::size_t operator()(const host::Pid& p) const noexcept {
    std::uint64_t v = (std::uint64_t{p.index} << 32) ^ p.generation ^ (std::uint64_t{p.node} << 52);
    return std::hash<std::uint64_t>{}(v);
  }
};

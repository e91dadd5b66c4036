// A peer's outbox: the session bodies waiting to be sent, in one queue per
// sender->receiver pair, taken round-robin. Threads: none of its own and
// no lock; its owner (NatsNode's Peer) holds one mutex around every call.
//
// Why: a large envelope goes as many 128 KB parts (wire.hpp). Sent all at
// once, its 8 MB would sit in the connection ahead of every later message
// to that node, and a small ping from another process would wait for all
// of it. So the parts wait here and leave a few at a time, while the
// session's unacknowledged bytes stay under its window; a small message of
// a pair with nothing waiting goes at once, past them.
//
// Order. SPEC: messages from one process to another arrive in the order
// sent. Everything one pair sends queues behind that pair's waiting parts
// (a small message after a large one never overtakes it); pairs are
// independent of each other. The receiver delivers in session order, which
// is the order bodies leave here.
#pragma once

#include <cstddef>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "host/cluster/wire.hpp"
#include "host/pid.hpp"

namespace host::cluster {

// A sender->receiver pair (either may be the empty PID: a terminate has no
// sender, a spawn's reply names no process of the asker's node's own).
struct PairKey {
  Pid from, to;
  friend bool operator==(const PairKey&, const PairKey&) = default;
};

struct PairKeyHash {
  std::size_t operator()(const PairKey& k) const noexcept {
    return std::hash<Pid>{}(k.from) * 31 + std::hash<Pid>{}(k.to);
  }
};

class Outbox {
 public:
  // Whether the pair has bodies waiting (then its next must wait too).
  bool holds(const PairKey& key) const { return queues_.count(key) != 0; }
  // Queues the pair's bodies after whatever it has waiting.
  void push(const PairKey& key, std::vector<Body> bodies);
  // The next body to send: the front of the pair whose turn it is; that
  // pair then goes to the back of the turns. nullopt when empty.
  std::optional<Body> next();
  bool empty() const { return turns_.empty(); }
  std::size_t bytes() const { return bytes_; }

 private:
  std::unordered_map<PairKey, std::deque<Body>, PairKeyHash> queues_;
  std::deque<PairKey> turns_;  // each pair with bodies waiting, once
  std::size_t bytes_ = 0;
};

}  // namespace host::cluster

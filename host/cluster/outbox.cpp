// A peer's outbox (outbox.hpp).
#include "host/cluster/outbox.hpp"

namespace host::cluster {

void Outbox::push(const PairKey& key, std::vector<Body> bodies) {
  if (bodies.empty()) return;
  auto [it, fresh] = queues_.try_emplace(key);
  if (fresh) turns_.push_back(key);
  for (Body& b : bodies) {
    bytes_ += b.size();
    it->second.push_back(std::move(b));
  }
}

std::optional<Body> Outbox::next() {
  if (turns_.empty()) return std::nullopt;
  const PairKey key = turns_.front();
  turns_.pop_front();
  auto it = queues_.find(key);
  Body body = std::move(it->second.front());
  it->second.pop_front();
  bytes_ -= body.size();
  if (it->second.empty()) {
    queues_.erase(it);
  } else {
    turns_.push_back(key);
  }
  return body;
}

}  // namespace host::cluster

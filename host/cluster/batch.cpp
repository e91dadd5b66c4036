// Frames to one peer published together (batch.hpp).
#include "host/cluster/batch.hpp"

namespace host::cluster {

bool Batch::hold(std::size_t bytes, bool data, Clock::time_point now) {
  const bool small = bytes <= kBatchFrameMax;
  // Keeping order comes first: behind frames that wait or are being sent.
  bool wait = !chunks_.empty() || flushing_;
  if (small && data) {
    if (now - last_small_ < kBurstGap) wait = true;
    last_small_ = now;
  }
  return wait;
}

void Batch::add(std::string_view frame) {
  if (chunks_.empty() || chunks_.back().size() + 4 + frame.size() > kBatchChunkBytes) {
    // Written over the last flushed chunk's memory when there is one.
    std::string& chunk = chunks_.emplace_back(std::move(spare_));
    spare_ = std::string();
    chunk.clear();
    chunk.push_back(static_cast<char>(kBatchMagic));
  }
  std::string& chunk = chunks_.back();
  const auto n = static_cast<std::uint32_t>(frame.size());
  const char len[4] = {static_cast<char>(n), static_cast<char>(n >> 8), static_cast<char>(n >> 16),
                       static_cast<char>(n >> 24)};
  chunk.append(len, 4);
  chunk.append(frame);
}

std::deque<std::string> Batch::take() {
  flushing_ = true;
  std::deque<std::string> out;
  out.swap(chunks_);
  return out;
}

void Batch::flushed(std::string spare) {
  flushing_ = false;
  if (spare.capacity() > spare_.capacity()) spare_ = std::move(spare);
  flushed_cv_.notify_all();  // a close waiting for this flush (Flusher::close)
}

}  // namespace host::cluster

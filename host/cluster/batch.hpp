// Frames to one peer published together: several frames in one NATS
// message, so that a burst of small messages costs one send() on this
// node and one hand-off from NATS's reader on the peer, not one each.
// Threads: a Batch has none of its own and no lock; its owner (NatsNode's
// Peer) holds one mutex around every call. The node's Flusher (below) is
// one thread that takes the chunks out and publishes them, and decides
// for each frame whether it goes at once or waits (Flusher::emit).
//
// Why: every publish of the connection is written at once (SendAsap, for a
// round trip of about 200 us rather than 2 ms), so a process sending 16-byte
// messages in a loop spent half its time in send(), one system call per
// message, and the peer's NATS threads handed each message on alone.
//
// When a frame waits (hold): while frames wait already or a flush is under
// way (order: a frame never overtakes one sent before it), or when it is
// small and another small data frame went less than kBurstGap ago (a
// burst). A frame alone after a pause goes at once: a round trip does not
// wait for a flusher. A large frame (a part of a large message) goes at
// once too unless it must keep its place: NATS writes it from its own
// bytes, where waiting here would copy it.
//
// Bytes: a batch starts with kBatchMagic (a frame starts with another
// magic byte, wire.cpp), then each frame as a u32 length (little-endian)
// and its bytes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace host::cluster {

inline constexpr std::uint8_t kBatchMagic = 0xC6;
// Small frames closer together than this make a burst.
inline constexpr std::chrono::microseconds kBurstGap{50};
// Frames up to this size may wait for a burst; larger ones go at once.
inline constexpr std::size_t kBatchFrameMax = 4u << 10;
// A chunk (one NATS message) stops growing here: well under NATS's
// max_payload (1 MB by default), and one flush's worth of bytes.
inline constexpr std::size_t kBatchChunkBytes = 64u << 10;

class Batch {
 public:
  using Clock = std::chrono::steady_clock;
  // Whether a frame of `bytes` (a data frame or not) must wait here rather
  // than be published now; records a small data frame's time either way.
  bool hold(std::size_t bytes, bool data, Clock::time_point now);
  void add(std::string_view frame);
  // The chunks to publish, oldest first; the batch is empty after, and
  // flushing() true until flushed() (frames that come meanwhile wait).
  std::deque<std::string> take();
  // The flusher published what take gave; `spare` may be one of its
  // chunks, kept to be written over (no fresh memory per burst). Wakes
  // wait_flushed.
  void flushed(std::string spare);
  bool empty() const { return chunks_.empty(); }
  bool flushing() const { return flushing_; }
  // With the owner's mutex held by `lock`: returns once no flush is under
  // way, releasing the mutex while it waits (what the flusher took is
  // published by then).
  void wait_flushed(std::unique_lock<std::mutex>& lock) {
    flushed_cv_.wait(lock, [this] { return !flushing_; });
  }
  // Whether the owner already asked the flusher for this batch.
  bool queued = false;

 private:
  std::deque<std::string> chunks_;
  std::string spare_;
  bool flushing_ = false;
  Clock::time_point last_small_{};
  std::condition_variable flushed_cv_;  // waited on under the owner's mutex (wait_flushed)
};

// The node's flusher thread: publishes the batches of its owners (the
// peers), each owner's frames in the order emitted. Owner is a class
// shared by shared_ptr with `mu` (a std::mutex guarding the rest),
// `batch` (a Batch) and `down` (nothing more goes out once true). The
// publish function runs outside every lock of this file.
//
// Order at the ends of a flow:
// - close (an owner taken down) returns only once a flush of its batch
//   under way has ended, so that what the caller publishes next (the
//   reset) comes after every frame the flusher took: the peer never sees
//   the reset before frames emitted ahead of it;
// - after stop, nothing waits for the flusher: a frame emitted then (a
//   subscription callback still running while the node stops) goes at
//   once, from the emitting thread, rather than stay in its batch.
template <typename Owner>
class Flusher {
 public:
  using Clock = Batch::Clock;
  using Publish = std::function<void(Owner&, std::string_view)>;
  explicit Flusher(Publish publish) : publish_(std::move(publish)) {}
  Flusher(const Flusher&) = delete;
  Flusher& operator=(const Flusher&) = delete;
  ~Flusher() { stop(); }

  void start() { thread_ = std::thread([this] { loop(); }); }

  // Publishes what waits in the batches handed over, then ends the
  // thread. Idempotent.
  void stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    std::lock_guard lock(mu_);
    ended_ = true;  // also when never started
  }

  // Under owner.mu: a frame to the owner, published now or put in its
  // batch for the thread (Batch::hold says which); `data`: a data frame
  // (a burst is one of data frames; acks keep their place but make
  // none). Nothing goes to an owner taken down.
  void emit(Owner& owner, std::string_view frame, bool data, Clock::time_point now) {
    if (owner.down) return;
    Batch& batch = owner.batch;
    if (!batch.hold(frame.size(), data, now)) {
      publish_(owner, frame);
      return;
    }
    batch.add(frame);
    if (batch.queued) return;  // the thread has it in hand already
    {
      std::lock_guard lock(mu_);
      if (!ended_) {
        batch.queued = true;
        queue_.push_back(owner.shared_from_this());
      }
    }
    if (batch.queued) {
      cv_.notify_one();
      return;
    }
    // The thread has ended (stop): it emptied every batch it was handed
    // and flushes none now, so what waits here goes at once, in order,
    // still under owner.mu.
    std::deque<std::string> chunks = batch.take();
    for (const std::string& chunk : chunks) publish_(owner, chunk);
    batch.flushed(std::move(chunks.back()));
  }

  // With owner.mu held by `lock`: the owner is down (nothing more goes
  // out to it), and a flush of its batch under way has ended; the mutex
  // is released while waiting for that. What waits in the batch is
  // dropped.
  void close(Owner& owner, std::unique_lock<std::mutex>& lock) {
    owner.down = true;
    owner.batch.wait_flushed(lock);
  }

 private:
  void loop() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) {
        ended_ = true;  // stopping, and nothing left to publish
        return;
      }
      std::shared_ptr<Owner> owner = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      flush(*owner);
      lock.lock();
    }
  }

  void flush(Owner& owner) {
    std::unique_lock lock(owner.mu);
    // Published outside the lock, so that senders append meanwhile
    // (behind these chunks: Batch::hold); what came meanwhile goes next,
    // in turn.
    while (!owner.batch.empty() && !owner.down) {
      std::deque<std::string> chunks = owner.batch.take();
      lock.unlock();
      for (const std::string& chunk : chunks) publish_(owner, chunk);
      lock.lock();
      owner.batch.flushed(std::move(chunks.back()));
    }
    owner.batch.queued = false;
  }

  const Publish publish_;
  std::mutex mu_;  // pairs with cv_; guards queue_, stopping_ and ended_
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Owner>> queue_;  // owners whose batch waits for the thread
  bool stopping_ = false;
  bool ended_ = false;  // the thread returned (or never ran): emit publishes itself
  std::thread thread_;
};

// Calls fn(frame) for each frame of the batch `bytes` in order. False when
// bytes are not a batch or a length runs past its end (the frames before
// it were given: each is checked again by decode_frame).
template <typename Fn>
bool for_each_in_batch(std::string_view bytes, Fn&& fn) {
  if (bytes.empty() || static_cast<std::uint8_t>(bytes.front()) != kBatchMagic) return false;
  bytes.remove_prefix(1);
  while (!bytes.empty()) {
    if (bytes.size() < 4) return false;
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
    const std::size_t n = std::size_t{p[0]} | std::size_t{p[1]} << 8 | std::size_t{p[2]} << 16 | std::size_t{p[3]} << 24;
    bytes.remove_prefix(4);
    if (n > bytes.size()) return false;
    fn(bytes.substr(0, n));
    bytes.remove_prefix(n);
  }
  return true;
}

}  // namespace host::cluster

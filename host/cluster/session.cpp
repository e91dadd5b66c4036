// A session's sender and receiver halves (session.hpp).
#include "host/cluster/session.hpp"

namespace host::cluster {

Session::Verdict Session::judge(std::uint32_t from_epoch, std::uint32_t to_epoch) {
  // Addressed to an earlier session of this end.
  if (from_epoch == 0) return Verdict::Stale;
  if (to_epoch != 0 && to_epoch != epoch_) {
    // A wary session still unsettled names the highest epoch of the peer
    // heard, also from a frame addressed to an ended session of this end.
    if (wary_ && !settled_ && from_epoch > floor_ && from_epoch > peer_epoch_) {
      peer_epoch_ = from_epoch;
      epoch_news_ = true;
    }
    return Verdict::Stale;
  }
  if (!settled_) {
    // Not heard from the peer yet: one of its earlier sessions is not
    // mistaken for its current one.
    if (from_epoch <= floor_) {
      if (to_epoch != epoch_) return Verdict::Stale;
      // The reset names the session that carries on: one naming no epoch
      // of the peer's (0, or a wary guess) would be stale there, and the
      // pair would go down here and up again at each of its frames.
      // Still unsettled: the floor does not rise, the next session is wary.
      peer_epoch_ = from_epoch;
      return Verdict::Ended;
    }
    if (wary_ && to_epoch != epoch_) {
      // Maybe of the session that ended unsettled: named in this end's
      // frames (the highest heard: its later sessions have higher ones),
      // taken for nothing else.
      if (from_epoch > peer_epoch_) {
        peer_epoch_ = from_epoch;
        epoch_news_ = true;
      }
      return Verdict::Stale;
    }
    peer_epoch_ = from_epoch;
    settled_ = true;
    epoch_news_ = true;
  } else if (from_epoch < peer_epoch_) {
    return Verdict::Stale;
  } else if (from_epoch > peer_epoch_) {
    peer_epoch_ = from_epoch;
    return Verdict::Newer;
  }
  if (to_epoch == epoch_) peer_knows_epoch_ = true;
  return Verdict::Current;
}

std::uint64_t Session::stamp(Body body, Clock::time_point now) {
  // An empty ring starts the resend clock: an ack is owed from now.
  if (ring_.empty()) last_progress_ = now;
  const std::uint64_t seq = next_seq_++;
  unacked_bytes_ += body.size();
  if (body.part()) {
    unacked_part_bytes_ += body.size();
  } else {
    sent_whole_ = true;
    last_whole_ = now;
  }
  ring_.push_back(Outgoing{seq, std::move(body)});
  return seq;
}

bool Session::room_for_part(Clock::time_point now) const {
  const bool beside_whole = sent_whole_ && now - last_whole_ < limits_.beside_whole_for;
  // Parts only: whole messages in flight (those that make the limit the
  // smaller one) never hold a large message back for as long as they flow.
  return unacked_part_bytes_ < (beside_whole ? limits_.parts_in_flight_beside_whole_bytes : limits_.parts_in_flight_bytes);
}

void Session::acknowledged(std::uint64_t ack, Clock::time_point now) {
  if (ack >= next_seq_) return;  // acknowledges what was never sent
  bool progress = false;
  while (!ring_.empty() && ring_.front().seq <= ack) {
    unacked_bytes_ -= ring_.front().body.size();
    if (ring_.front().body.part()) unacked_part_bytes_ -= ring_.front().body.size();
    ring_.pop_front();
    progress = true;
  }
  if (progress) last_progress_ = now;
}

Session::Arrival Session::arrive(std::uint64_t seq, std::size_t bytes) {
  if (seq <= delivered_) {
    nudge_ = true;  // the sender did not hear our ack: say it again
    return Arrival::Duplicate;
  }
  if (seq != delivered_ + 1) {
    nudge_ = true;
    return Arrival::Gap;
  }
  delivered_ = seq;
  ++since_ack_messages_;
  since_ack_bytes_ += bytes;
  return Arrival::Deliver;
}

bool Session::ack_due_now() const {
  return since_ack_messages_ >= limits_.ack_every_messages || since_ack_bytes_ >= limits_.ack_every_bytes;
}

void Session::ack_sent() {
  ack_sent_ = delivered_;
  since_ack_messages_ = 0;
  since_ack_bytes_ = 0;
  nudge_ = false;
  epoch_news_ = false;
}

}  // namespace host::cluster

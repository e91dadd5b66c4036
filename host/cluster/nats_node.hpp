// This host as a node of a cluster over NATS (SPEC section 12): its
// connection, the directory of the other nodes (heartbeats), and one
// session (session.hpp) per peer carrying the messages to and from it.
// Threads: the calls of RemoteNodes from any thread; NATS's own threads
// run the subscriptions' callbacks (heartbeats, frames to this node); one
// ticker thread of its own sends heartbeats, acks and resends and takes
// silent peers down; one flusher thread publishes the frames that wait in
// the peers' batches (batch.hpp).
//
// Subjects. `host.cluster` carries every node's heartbeat (its id and
// name, every 500 ms) and its bye when it ends; `host.node.<ID>` a node's
// frames (data and acks); `host.name.<NAME>` answers a starting node that
// asks whether NAME is taken (a NATS request: no responder, free).
//
// Incarnation. A node's id is a random nonzero 32-bit number drawn at its
// start and is the node part of its PIDs ("<ID.INDEX.GEN>"), so a PID of
// an earlier run names an id no live node holds: a send to it is
// not_found, and a frame addressed to it is dropped. Two runs drawing the
// same id is a one in four billion chance, which the name check does not
// cover.
//
// Versions. A heartbeat names its sender's wire version (wire.hpp); one
// of another version makes no peer (it is logged once and the node stays
// unknown here): its frames would be misread.
//
// Peers. A heartbeat from an id not known makes a peer (nodeup) and is
// answered at once with this node's heartbeat, so the newcomer learns of
// it within a round trip rather than 500 ms. A heartbeat with a known name
// and a new id is a restarted node: the old run is taken down first. A
// peer silent for the node timeout, or holding more than 8 MB unacked
// while the NATS connection is down, is taken down (nodedown): its session
// ends, frames from its id are dropped from then on, and it is sent a
// reset so that it takes this node down as well (both ends then start new
// sessions when the heartbeats meet again, never one end alone). Each
// session has an epoch at each end (session.hpp), named in every frame
// to the node: a reset, ack or data frame of an earlier session of the
// pair, still in flight when the pair went down and up again (a partition
// healing), is ignored rather than taking the new session down or into
// its sequence numbers.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "host/cluster/batch.hpp"
#include "host/cluster/outbox.hpp"
#include "host/cluster/session.hpp"
#include "host/cluster/wire.hpp"
#include "host/commands.hpp"
#include "host/remote_nodes.hpp"
#include "host/scheduler.hpp"

struct __natsConnection;
struct __natsSubscription;
struct __natsMsg;

namespace host {
class Scheduler;
}

namespace host::cluster {

struct NodeOptions {
  std::string name;
  std::string url;  // nats://HOST:PORT
  std::chrono::milliseconds timeout{5000};
  std::chrono::milliseconds heartbeat_every{500};
  SessionLimits session;
};

class NatsNode final : public RemoteNodes {
 public:
  // Connects and checks that no live node holds the name. On failure,
  // null, with err set and name_taken true when the name was the cause
  // (the program then exits 2, naming it).
  static std::unique_ptr<NatsNode> connect(NodeOptions options, std::string& err, bool& name_taken);
  ~NatsNode() override;

  // This run's id: the node part of its scheduler's PIDs.
  std::uint32_t id() const { return id_; }

  // Joins the cluster: delivers what arrives to `scheduler`'s processes,
  // names looked up with lookup_name; starts the heartbeats. Hooks run on
  // a NATS or ticker thread, outside every lock of this node, when a peer
  // comes up or goes down. Call once, after the scheduler exists.
  using LookupName = std::function<std::optional<Pid>(std::string_view)>;
  using NodeHook = std::function<void(std::uint32_t id, const std::string& name)>;
  // Starts a process for a peer's spawn_on (entry, codec-encoded arguments).
  using SpawnFn = std::function<SpawnResult(const std::string& entry, std::string args)>;
  // Also registers cmd::kSpawnOn's handler in the scheduler's commands.
  void start(Scheduler& scheduler, LookupName lookup_name, SpawnFn spawn, NodeHook up, NodeHook down);
  // Says bye (the peers take this node down at once) and disconnects.
  // Call before the scheduler goes away; idempotent.
  void stop();

  // RemoteNodes.
  const std::string& node_name() const override { return options_.name; }
  std::vector<std::string> node_names() const override;
  std::string send(const Pid& to, std::string_view topic, std::string_view payload, const Pid& from,
                   std::size_t* backlog) override;
  std::string begin_message(const Pid& to, std::string_view name, std::string_view topic, const Pid& from) override;
  std::string send_begun(const Pid& to, std::string_view node, const Pid& from, std::string message,
                         std::size_t* backlog) override;
  std::string deliver_event(const Pid& to, const Event& event) override;
  std::string monitor(const Pid& watcher, const Pid& target, std::uint64_t ref) override;
  void demonitor(const Pid& watcher, const Pid& target, std::uint64_t ref) override;
  Pid monitor_named(const Pid& watcher, std::string_view node, std::string_view name, std::uint64_t ref) override;
  std::string link(const Pid& local, const Pid& remote) override;
  void unlink(const Pid& local, const Pid& remote) override;
  std::string terminate(const Pid& target) override;
  void monitor_node(const Pid& watcher, std::string_view node) override;

  // The id of the connected node called `name`, if any.
  std::optional<std::uint32_t> id_of(std::string_view name) const;

 private:
  struct Peer : std::enable_shared_from_this<Peer> {
    Peer(std::uint32_t id, std::string name, const SessionLimits& limits, std::uint32_t epoch, std::uint32_t floor,
       bool wary);
    const std::uint32_t id;
    const std::string name;
    const std::string subject;  // host.node.<id>
    std::mutex mu;              // guards the rest
    Session session;
    // What waits to enter the session (large envelopes' parts, and what
    // their pairs send after them): see outbox.hpp.
    Outbox outbox;
    // Frames waiting to be published together (batch.hpp).
    Batch batch;
    std::atomic<std::uint64_t> next_transfer{1};  // the next large envelope's number (wire.hpp)
    Session::Clock::time_point last_heard;
    bool down = false;  // taken down: nothing more goes out or comes in
    // Held while a frame from the peer is handled (its delivery included)
    // and while the peer is taken down: no message of the peer reaches a
    // process after the noconnection events that its going down sends.
    std::mutex delivery_mu;
    Reassembly parts;  // guarded by delivery_mu
  };
  // A monitor or link between a local process and one of a peer's, kept
  // so that the peer's going down fires it ("noconnection") exactly once:
  // whichever comes first, its event from the peer or the peer's end,
  // removes it.
  struct Watch {
    bool link = false;
    Pid local;
    Pid remote;
    std::uint64_t ref = 0;  // a monitor's
  };
  using Clock = Session::Clock;

  NatsNode(NodeOptions options, std::uint32_t id);
  static void on_cluster_msg(__natsConnection*, __natsSubscription*, __natsMsg* msg, void* self);
  static void on_node_msg(__natsConnection*, __natsSubscription*, __natsMsg* msg, void* self);
  static void on_name_msg(__natsConnection*, __natsSubscription*, __natsMsg* msg, void* self);
  // `version`: the heartbeat's wire version; a peer of another is refused.
  void heard_heartbeat(std::uint32_t id, std::string_view name, std::uint32_t version);
  void received(std::string_view bytes);
  // `owned`, when given, holds the envelope's payload (a large one put
  // together from parts, Reassembly): it is moved into the delivery, not
  // copied.
  void deliver(Peer& peer, Envelope envelope, std::string* owned = nullptr);
  // Sends an envelope to the node of e.to.
  std::string send_envelope(const Envelope& e, std::size_t* backlog = nullptr);
  void add_watch(std::uint32_t node, const Watch& w);
  // Removes the watch that matches w (link, local, remote, and ref for a
  // monitor; a monitor by name, kept under its node's key, matches any
  // remote PID of that node); true when there was one.
  bool remove_watch(std::uint32_t node, const Watch& w);
  // The node events to the processes that monitor `name`.
  void tell_node_watchers(const std::string& name, bool up);
  // Sends one message into peer's session (the send calls' common part);
  // `pair` is its sender and receiver, whose order the outbox keeps.
  std::string send_to_peer(const std::shared_ptr<Peer>& peer, const PairKey& pair, const Envelope& envelope,
                           std::size_t* backlog);
  // The same for an envelope already in its buffer (wire.hpp).
  std::string send_to_peer(const std::shared_ptr<Peer>& peer, const PairKey& pair, const EnvelopeBuffer& envelope,
                           std::size_t* backlog);
  // Under peer.mu: stamps one body with the next sequence number and
  // publishes it.
  void send_body(Peer& peer, Body body, Clock::time_point now);
  // Under peer.mu: moves bodies from the outbox into the session while it
  // has room for parts in flight (Session::room_for_part).
  void pump(Peer& peer, Clock::time_point now);
  // Bytes held for the peer: unacknowledged plus waiting in the outbox.
  static std::size_t buffered_bytes(const Peer& peer) { return peer.session.unacked_bytes() + peer.outbox.bytes(); }
  void publish(const std::string& subject, std::string_view bytes);
  // Under peer.mu: a frame to the peer, published now or put in its batch
  // for the flusher (Flusher::emit, batch.hpp); `data`: a data frame (a
  // burst is one of data frames; acks keep their place but make none).
  void emit(Peer& peer, std::string_view frame, bool data, Clock::time_point now) {
    flusher_.emit(peer, frame, data, now);
  }
  // Under peer.mu: a frame to the peer with both ends' ids and epochs.
  Frame frame_to(const Peer& peer, FrameKind kind) const;
  void publish_heartbeat(bool bye = false);
  // Removes the peer (if still there) and runs the down hook; `reset`:
  // tell it, so that it ends its half too.
  void take_down(const std::shared_ptr<Peer>& peer, const char* why, bool reset);
  std::shared_ptr<Peer> find(std::uint32_t id) const;
  std::shared_ptr<Peer> find(std::string_view name) const;
  void tick_loop();
  bool transport_connected() const;

  const NodeOptions options_;
  const std::uint32_t id_;
  __natsConnection* conn_ = nullptr;
  std::vector<__natsSubscription*> subs_;
  Scheduler* scheduler_ = nullptr;  // set by start, before any subscription delivers
  LookupName lookup_name_;
  SpawnFn spawn_;
  // cmd::kSpawnOn's handler: the request goes to the node named.
  void start_spawn_on(CommandRequest&& req);
  void spawn_replied(const Pid& asker, std::uint64_t tag, bool failed, std::string_view text);
  NodeHook up_hook_, down_hook_;

  mutable std::shared_mutex peers_mu_;                           // guards peers_
  std::unordered_map<std::uint32_t, std::shared_ptr<Peer>> peers_;  // the connected nodes by id
  // By a peer's id, the highest epoch it used in a session with this node
  // that ended (a new session's floor), and whether the last one ended
  // before its epoch was settled (the new session is then wary): Session's
  // constructor. Guarded by peers_mu_. One entry per run of a peer met: a
  // few bytes each.
  struct Ended {
    std::uint32_t floor = 0;
    bool unsettled = false;
  };
  std::unordered_map<std::uint32_t, Ended> ended_epochs_;
  std::uint32_t next_epoch_ = 1;  // this end's next session's epoch; guarded by peers_mu_
  // The ids of runs heard with another wire version (never peers): each
  // refusal is logged once. Guarded by peers_mu_. A few bytes per run.
  std::unordered_set<std::uint32_t> refused_;

  std::mutex watch_mu_;  // guards watches_, node_watchers_, named_monitors_ and spawns_
  std::unordered_map<std::uint32_t, std::vector<Watch>> watches_;          // by the peer's id
  std::unordered_map<std::string, std::vector<Pid>> node_watchers_;        // by node name
  // The monitors by name a peer's process made here (monitor_named): the
  // ref and the local process the name named, by the remote watcher, so
  // that its demonitor (which names only the node's key) reaches the right
  // monitor. Dropped at the monitor's exit and at the peer's end.
  struct NamedMonitor {
    std::uint64_t ref;
    Pid target;
  };
  std::unordered_map<Pid, std::vector<NamedMonitor>> named_monitors_;
  void monitor_by_name(const Envelope& e);
  // Removes the named monitor (watcher, ref); its target, if there was one.
  std::optional<Pid> take_named_monitor(const Pid& watcher, std::uint64_t ref);
  struct PendingSpawn {
    Pid asker;
    std::uint64_t tag;
  };
  std::unordered_map<std::uint32_t, std::vector<PendingSpawn>> spawns_;    // by the peer's id

  std::mutex tick_mu_;  // pairs with tick_cv_, guards stopping_
  std::condition_variable tick_cv_;
  bool stopping_ = false;
  std::thread ticker_;
  // The flusher thread: publishes the frames that wait in the peers'
  // batches.
  Flusher<Peer> flusher_;
  std::atomic<bool> stopped_{false};
  std::atomic<int> in_callbacks_{0};  // subscription callbacks running now (stop waits for none)
  bool enter_callback();
};

// A --node name: 1 to 64 of letters, digits, '_' and '-' (it is a NATS
// subject token and appears in logs). Empty when good, else why not.
std::string check_node_name(std::string_view name);

}  // namespace host::cluster

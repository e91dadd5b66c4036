// The node over NATS (nats_node.hpp): connection, directory, sessions.
#include "host/cluster/nats_node.hpp"

#include <sys/random.h>

#include <algorithm>

#include <nats/nats.h>

#include "host/cluster/buffer_pool.hpp"
#include "host/cluster/wire.hpp"
#include "host/config.hpp"
#include "host/error.hpp"
#include "host/io/call_values.hpp"
#include "host/log.hpp"
#include "host/scheduler.hpp"

namespace host::cluster {

namespace {

constexpr const char* kClusterSubject = "host.cluster";
// How often the ticker looks at the peers: the resend and ack clocks'
// grain, and how late past the node timeout a silent peer is noticed.
constexpr std::chrono::milliseconds kTick{20};
// The name check's wait for an answer from a live holder of the name.
constexpr int64_t kNameCheckMs = 500;
// NATS's limits for one subscription's queued messages, past which it
// drops them (a slow consumer). Raised far above the defaults (65536
// messages, 64 MB): a drop costs a resend, and the window bounds a peer.
constexpr int kPendingMessages = 1 << 20;
constexpr int kPendingBytes = 256 << 20;

std::string status_text(natsStatus s) { return natsStatus_GetText(s); }

std::uint32_t draw_id() {
  std::uint32_t id = 0;
  while (id == 0) {
    if (getrandom(&id, sizeof id, 0) != static_cast<ssize_t>(sizeof id)) {
      id = static_cast<std::uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count() ^
                                      std::chrono::system_clock::now().time_since_epoch().count());
    }
  }
  return id;
}

// An envelope's common fields; each sender below adds what its op carries
// (wire.hpp's Envelope names which).
Envelope envelope_of(Envelope::Op op, const Pid& to, const Pid& from, std::uint64_t tag = 0) {
  Envelope e;
  e.op = op;
  e.to = to;
  e.from = from;
  e.tag = tag;
  return e;
}

}  // namespace

std::string check_node_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return "--node needs a name of 1 to 64 letters, digits, '_' or '-'";
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!ok) return "--node needs a name of 1 to 64 letters, digits, '_' or '-'";
  }
  return {};
}

NatsNode::Peer::Peer(std::uint32_t id_, std::string name_, const SessionLimits& limits, std::uint32_t epoch,
                     std::uint32_t floor, bool wary)
    : id(id_),
      name(std::move(name_)),
      subject("host.node." + std::to_string(id_)),
      session(limits, epoch, floor, wary) {}

NatsNode::NatsNode(NodeOptions options, std::uint32_t id)
    : options_(std::move(options)),
      id_(id),
      flusher_([this](Peer& peer, std::string_view bytes) { publish(peer.subject, bytes); }) {}

std::unique_ptr<NatsNode> NatsNode::connect(NodeOptions options, std::string& err, bool& name_taken) {
  name_taken = false;
  std::unique_ptr<NatsNode> node(new NatsNode(std::move(options), draw_id()));
  natsOptions* opts = nullptr;
  natsStatus s = natsOptions_Create(&opts);
  if (s == NATS_OK) s = natsOptions_SetURL(opts, node->options_.url.c_str());
  if (s == NATS_OK) s = natsOptions_SetName(opts, ("host " + node->options_.name).c_str());
  // Reconnect forever, every 250 ms: the node timeout, not NATS, decides
  // when a peer is gone. What is published while disconnected waits in a
  // buffer of the session bound's size (and the resend ring keeps it too).
  if (s == NATS_OK) s = natsOptions_SetMaxReconnect(opts, -1);
  if (s == NATS_OK) s = natsOptions_SetReconnectWait(opts, 250);
  if (s == NATS_OK) s = natsOptions_SetReconnectBufSize(opts, static_cast<int>(node->options_.session.max_buffered_bytes));
  if (s == NATS_OK) s = natsOptions_SetTimeout(opts, 2000);
  // Each frame written at once, not left for the client's flusher thread:
  // with it a round trip took about 2 ms (p50) on loopback.
  if (s == NATS_OK) s = natsOptions_SetSendAsap(opts, true);
  if (s == NATS_OK) s = natsConnection_Connect(&node->conn_, opts);
  natsOptions_Destroy(opts);
  if (s != NATS_OK) {
    err = "cannot connect to the cluster at " + node->options_.url + ": " + status_text(s);
    node->conn_ = nullptr;
    return nullptr;
  }
  // Is the name live? A holder answers on host.name.<NAME>; with none,
  // the server answers "no responders" at once.
  const std::string name_subject = "host.name." + node->options_.name;
  natsMsg* reply = nullptr;
  s = natsConnection_Request(&reply, node->conn_, name_subject.c_str(), "?", 1, kNameCheckMs);
  if (s == NATS_OK) {
    err = "node name '" + node->options_.name + "' is already live in the cluster at " + node->options_.url;
    name_taken = true;
    natsMsg_Destroy(reply);
    return nullptr;
  }
  if (s != NATS_NO_RESPONDERS && s != NATS_TIMEOUT) {
    err = "cannot check the node name in the cluster at " + node->options_.url + ": " + status_text(s);
    return nullptr;
  }
  return node;
}

NatsNode::~NatsNode() {
  stop();
  for (natsSubscription* sub : subs_) natsSubscription_Destroy(sub);
  if (conn_) natsConnection_Destroy(conn_);
}

void NatsNode::start(Scheduler& scheduler, LookupName lookup_name, SpawnFn spawn, NodeHook up, NodeHook down) {
  scheduler_ = &scheduler;
  lookup_name_ = std::move(lookup_name);
  spawn_ = std::move(spawn);
  CommandHandler h;
  h.name = "spawn_on";
  h.run = [this](CommandRequest&& req) { start_spawn_on(std::move(req)); };
  scheduler.commands().add(cmd::kSpawnOn, std::move(h));
  up_hook_ = std::move(up);
  down_hook_ = std::move(down);
  const std::string own = "host.node." + std::to_string(id_);
  const std::string name_subject = "host.name." + options_.name;
  struct {
    const char* subject;
    natsMsgHandler handler;
  } wanted[] = {{own.c_str(), on_node_msg}, {kClusterSubject, on_cluster_msg}, {name_subject.c_str(), on_name_msg}};
  for (const auto& w : wanted) {
    natsSubscription* sub = nullptr;
    natsStatus s = natsConnection_Subscribe(&sub, conn_, w.subject, w.handler, this);
    if (s == NATS_OK) {
      (void)natsSubscription_SetPendingLimits(sub, kPendingMessages, kPendingBytes);
      subs_.push_back(sub);
    } else {
      log::logger().error("cluster: cannot subscribe to {}: {}", w.subject, status_text(s));
    }
  }
  publish_heartbeat();
  flusher_.start();
  ticker_ = std::thread([this] { tick_loop(); });
  log::logger().info("cluster: node {} (id {}) joined {}", options_.name, id_, options_.url);
}

void NatsNode::stop() {
  if (stopped_.exchange(true)) return;
  {
    std::lock_guard lock(tick_mu_);
    stopping_ = true;
  }
  tick_cv_.notify_all();
  if (ticker_.joinable()) ticker_.join();
  // What waits in batches goes before the bye: the flusher empties them,
  // then ends; a frame emitted after (by a callback still running) goes
  // at once.
  flusher_.stop();
  if (!conn_) return;
  if (scheduler_) {
    publish_heartbeat(/*bye=*/true);
    (void)natsConnection_FlushTimeout(conn_, 1000);
  }
  for (natsSubscription* sub : subs_) (void)natsSubscription_Unsubscribe(sub);
  // No callback runs into a scheduler that goes away: one that began
  // before stopped_ was set is waited for; one after it returns at once.
  while (in_callbacks_.load(std::memory_order_seq_cst) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  natsConnection_Close(conn_);
}

// A callback's entry and exit: see stop.
bool NatsNode::enter_callback() {
  in_callbacks_.fetch_add(1, std::memory_order_seq_cst);  // pairs with stop's store of stopped_, then its load
  if (!stopped_.load(std::memory_order_seq_cst)) return true;
  in_callbacks_.fetch_sub(1, std::memory_order_seq_cst);
  return false;
}

void NatsNode::publish(const std::string& subject, std::string_view bytes) {
  // A failure (disconnected with a full buffer, closed) loses the frame as
  // NATS itself may: the session resends data, heartbeats repeat.
  (void)natsConnection_Publish(conn_, subject.c_str(), bytes.data(), static_cast<int>(bytes.size()));
}

Frame NatsNode::frame_to(const Peer& peer, FrameKind kind) const {
  Frame f;
  f.kind = kind;
  f.from_node = id_;
  f.to_node = peer.id;
  f.from_epoch = peer.session.epoch();
  f.to_epoch = peer.session.peer_epoch();
  return f;
}

void NatsNode::publish_heartbeat(bool bye) {
  Frame f;
  f.kind = bye ? FrameKind::Bye : FrameKind::Heartbeat;
  f.from_node = id_;
  f.text = options_.name;
  publish(kClusterSubject, encode_frame(f));
}

bool NatsNode::transport_connected() const { return natsConnection_Status(conn_) == NATS_CONN_STATUS_CONNECTED; }

std::shared_ptr<NatsNode::Peer> NatsNode::find(std::uint32_t id) const {
  std::shared_lock lock(peers_mu_);
  auto it = peers_.find(id);
  return it == peers_.end() ? nullptr : it->second;
}

std::shared_ptr<NatsNode::Peer> NatsNode::find(std::string_view name) const {
  std::shared_lock lock(peers_mu_);
  for (const auto& [id, peer] : peers_)
    if (peer->name == name) return peer;
  return nullptr;
}

std::optional<std::uint32_t> NatsNode::id_of(std::string_view name) const {
  if (auto peer = find(name)) return peer->id;
  return std::nullopt;
}

std::vector<std::string> NatsNode::node_names() const {
  std::vector<std::string> names;
  std::shared_lock lock(peers_mu_);
  for (const auto& [id, peer] : peers_) names.push_back(peer->name);
  return names;
}

// --- sending ---

void NatsNode::send_body(Peer& peer, Body body, Clock::time_point now) {
  Frame f = frame_to(peer, FrameKind::Data);
  f.seq = peer.session.next_seq();
  f.ack = peer.session.cumulative_ack();
  body.framed(f, [&](std::string_view frame) { emit(peer, frame, /*data=*/true, now); });
  peer.session.ack_sent();
  (void)peer.session.stamp(std::move(body), now);
}

void NatsNode::pump(Peer& peer, Clock::time_point now) {
  while (!peer.outbox.empty() && peer.session.room_for_part(now))
    send_body(peer, *peer.outbox.next(), now);
}

std::string NatsNode::send_to_peer(const std::shared_ptr<Peer>& peer, const PairKey& pair, const Envelope& e,
                                   std::size_t* backlog) {
  // Encoded outside the lock (the one copy of the payload on this side:
  // the parts and frames are slices of this buffer, wire.hpp's Body).
  return send_to_peer(peer, pair, encode_envelope_buffer(e), backlog);
}

std::string NatsNode::send_to_peer(const std::shared_ptr<Peer>& peer, const PairKey& pair,
                                   const EnvelopeBuffer& envelope, std::size_t* backlog) {
  bool over_bound = false;
  const std::size_t size = envelope->size() - kEnvelopeRoom;
  const bool small = size <= kPartBytes;
  // A large envelope's parts: slices of its buffer, no copy (wire.hpp).
  std::vector<Body> bodies;
  if (!small) bodies = split_into_bodies(envelope, peer->next_transfer.fetch_add(1, std::memory_order_relaxed));
  {
    std::lock_guard lock(peer->mu);
    if (peer->down) return make_error(ErrorKind::NotFound, "node " + peer->name + " is not connected");
    // While the connection is lost nothing drains: past the bound the peer
    // is reported down now, not at the next tick, so that no burst of
    // sends holds more than the bound (SPEC: at most 8 MB per peer).
    over_bound = buffered_bytes(*peer) + size > options_.session.max_buffered_bytes && !transport_connected();
    if (!over_bound) {
      const Clock::time_point now = Clock::now();
      if (small && !peer->outbox.holds(pair)) {
        // Nothing of its pair waits: past the large ones, at once.
        send_body(*peer, whole_body(envelope), now);
      } else {
        if (small) bodies.push_back(whole_body(envelope));
        peer->outbox.push(pair, std::move(bodies));
        pump(*peer, now);
      }
      if (backlog && (peer->session.window_full() || !peer->outbox.empty())) *backlog = config::kSendBacklogYield;
    }
  }
  if (!over_bound) return {};
  take_down(peer, "more than 8 MB waiting while the cluster connection is down", /*reset=*/true);
  return make_error(ErrorKind::NotFound, "node " + peer->name +
                                             " is down: more than 8 MB waiting while the cluster connection is down");
}

std::string NatsNode::send_envelope(const Envelope& e, std::size_t* backlog) {
  auto peer = find(e.to.node);
  if (!peer) return make_error(ErrorKind::NotFound, "no process " + e.to.to_string() + " (no connected node has its id)");
  return send_to_peer(peer, PairKey{e.from, e.to}, e, backlog);
}

std::string NatsNode::send(const Pid& to, std::string_view topic, std::string_view payload, const Pid& from,
                           std::size_t* backlog) {
  Envelope e = envelope_of(Envelope::Op::Message, to, from);
  e.topic = topic;
  e.payload = payload;
  return send_envelope(e, backlog);
}

std::string NatsNode::begin_message(const Pid& to, std::string_view name, std::string_view topic, const Pid& from) {
  Envelope e = name.empty() ? envelope_of(Envelope::Op::Message, to, from)
                            : envelope_of(Envelope::Op::NamedMessage, Pid{}, from);
  e.name = name;
  e.topic = topic;
  // Room for a small payload: the common message's appends grow nothing.
  return encode_envelope_with_room(e, 64);
}

std::string NatsNode::send_begun(const Pid& to, std::string_view node, const Pid& from, std::string message,
                                 std::size_t* backlog) {
  if (!node.empty()) {
    auto peer = find(node);
    if (!peer) return make_error(ErrorKind::NotFound, "node " + std::string(node) + " is not connected");
    // Every name on the node as one receiver: a pair's order holds
    // whatever process holds the name when each arrives.
    return send_to_peer(peer, PairKey{from, Pid{peer->id, 0, 0}}, share_buffer(std::move(message)),
                        backlog);
  }
  auto peer = find(to.node);
  if (!peer) return make_error(ErrorKind::NotFound, "no process " + to.to_string() + " (no connected node has its id)");
  return send_to_peer(peer, PairKey{from, to}, share_buffer(std::move(message)), backlog);
}

std::string NatsNode::deliver_event(const Pid& to, const Event& event) {
  // The exit ends a monitor by name made for `to` here, if it was one.
  if (event.kind == EventKind::Exit) (void)take_named_monitor(to, event.tag);
  Envelope e = envelope_of(Envelope::Op::Event, to, event.from, event.tag);
  e.event_kind = static_cast<std::uint8_t>(event.kind);
  e.failed = event.failed;
  e.payload = event.payload;
  return send_envelope(e);
}

namespace {

Event exit_event(const Pid& from, std::uint64_t ref, std::string error) {
  Event ev;
  ev.kind = EventKind::Exit;
  ev.from = from;
  ev.tag = ref;
  ev.failed = true;
  ev.payload = std::move(error);
  return ev;
}

Event link_down_event(const Pid& from, std::string error) {
  Event ev;
  ev.kind = EventKind::LinkDown;
  ev.from = from;
  ev.failed = true;
  ev.payload = std::move(error);
  return ev;
}

}  // namespace

std::string NatsNode::monitor(const Pid& watcher, const Pid& target, std::uint64_t ref) {
  const Watch w{false, watcher, target, ref};
  add_watch(target.node, w);
  // Not connected (or gone meanwhile: its take_down may have run before
  // the watch was added): the monitor fires at once, as Erlang's does.
  if (!send_envelope(envelope_of(Envelope::Op::Monitor, target, watcher, ref)).empty() && remove_watch(target.node, w))
    (void)scheduler_->deliver(watcher, exit_event(target, ref, "noconnection"));
  return {};
}

void NatsNode::demonitor(const Pid& watcher, const Pid& target, std::uint64_t ref) {
  if (!remove_watch(target.node, Watch{false, watcher, target, ref})) return;
  // A monitor by name (target is its node's key): that node finds the
  // process the name named from the ref (monitor_by_name).
  (void)send_envelope(envelope_of(Envelope::Op::Demonitor, target, watcher, ref));
}

Pid NatsNode::monitor_named(const Pid& watcher, std::string_view node, std::string_view name, std::uint64_t ref) {
  auto peer = find(node);
  const Pid key{peer ? peer->id : 0, 0, 0};
  if (peer) {
    const Watch w{false, watcher, key, ref};
    add_watch(peer->id, w);
    Envelope e = envelope_of(Envelope::Op::Monitor, key, watcher, ref);
    e.name = name;
    // Gone meanwhile: as monitor, whoever removes the watch fires it.
    // In the pair of the watcher's sends by name to that node (send_begun's
    // key): it stays in order with them.
    if (send_to_peer(peer, PairKey{watcher, key}, e, nullptr).empty() ||
        !remove_watch(peer->id, w))
      return key;
  }
  (void)scheduler_->deliver(watcher, exit_event(key, ref, "noconnection"));
  return key;
}

// A peer's process monitors the process registered here as e.name: found,
// a plain monitor of it (its exit goes back as any remote monitor's),
// remembered for the demonitor; not found, noproc at once, from the key.
void NatsNode::monitor_by_name(const Envelope& e) {
  auto pid = lookup_name_ ? lookup_name_(e.name) : std::nullopt;
  if (!pid) {
    (void)deliver_event(e.from, exit_event(e.to, e.tag, "noproc"));
    return;
  }
  {
    std::lock_guard lock(watch_mu_);
    named_monitors_[e.from].push_back(NamedMonitor{e.tag, *pid});
  }
  (void)scheduler_->monitor(e.from, *pid, e.tag);
}

std::optional<Pid> NatsNode::take_named_monitor(const Pid& watcher, std::uint64_t ref) {
  std::lock_guard lock(watch_mu_);
  if (named_monitors_.empty()) return std::nullopt;
  auto it = named_monitors_.find(watcher);
  if (it == named_monitors_.end()) return std::nullopt;
  auto& list = it->second;
  for (auto i = list.begin(); i != list.end(); ++i)
    if (i->ref == ref) {
      const Pid target = i->target;
      list.erase(i);
      if (list.empty()) named_monitors_.erase(it);
      return target;
    }
  return std::nullopt;
}

std::string NatsNode::link(const Pid& local, const Pid& remote) {
  const Watch w{true, local, remote, 0};
  add_watch(remote.node, w);
  std::string err = send_envelope(envelope_of(Envelope::Op::Link, remote, local));
  if (!err.empty()) (void)remove_watch(remote.node, w);
  return err;
}

void NatsNode::unlink(const Pid& local, const Pid& remote) {
  if (!remove_watch(remote.node, Watch{true, local, remote, 0})) return;
  (void)send_envelope(envelope_of(Envelope::Op::Unlink, remote, local));
}

std::string NatsNode::terminate(const Pid& target) {
  return send_envelope(envelope_of(Envelope::Op::Terminate, target, Pid{}));
}

// The waiting call's result: the PID's text as one codec string value.
void NatsNode::spawn_replied(const Pid& asker, std::uint64_t tag, bool failed, std::string_view text) {
  if (failed) {
    (void)scheduler_->complete_yield(asker, tag, {}, std::string(text.empty() ? "spawn_on failed" : text));
    return;
  }
  (void)scheduler_->complete_yield(asker, tag, io::CallResultWriter().string(text).finish());
}

void NatsNode::start_spawn_on(CommandRequest&& req) {
  auto r = decode_spawn_request(req.bytes);
  if (!r) {
    spawn_replied(req.pid, req.tag, true, make_error(ErrorKind::Invalid, "a bad spawn_on request"));
    return;
  }
  auto peer = find(r->node);
  if (!peer) {
    spawn_replied(req.pid, req.tag, true, make_error(ErrorKind::NotFound, "node " + std::string(r->node) + " is not connected"));
    return;
  }
  {
    std::lock_guard lock(watch_mu_);
    spawns_[peer->id].push_back(PendingSpawn{req.pid, req.tag});
  }
  Envelope e = envelope_of(Envelope::Op::Spawn, Pid{peer->id, 0, 0}, req.pid, req.tag);
  e.name = r->entry;
  e.payload = r->args;
  if (std::string err = send_to_peer(peer, PairKey{e.from, e.to}, e, nullptr); !err.empty()) {
    // Gone meanwhile: its take_down may have run before the record was
    // made; whoever removes the record answers.
    bool mine = false;
    {
      std::lock_guard lock(watch_mu_);
      auto& list = spawns_[peer->id];
      for (auto i = list.begin(); i != list.end(); ++i)
        if (i->asker == req.pid && i->tag == req.tag) {
          list.erase(i);
          mine = true;
          break;
        }
    }
    if (mine) spawn_replied(req.pid, req.tag, true, err);
  }
}

void NatsNode::monitor_node(const Pid& watcher, std::string_view node) {
  {
    std::lock_guard lock(watch_mu_);
    auto& list = node_watchers_[std::string(node)];
    if (std::find(list.begin(), list.end(), watcher) == list.end()) list.push_back(watcher);
  }
  if (!find(node)) {
    Event ev;
    ev.kind = EventKind::Node;
    ev.tag = 0;
    ev.payload = std::string(node);
    (void)scheduler_->deliver(watcher, std::move(ev));
  }
}

void NatsNode::tell_node_watchers(const std::string& name, bool up) {
  std::vector<Pid> watchers;
  {
    std::lock_guard lock(watch_mu_);
    if (auto it = node_watchers_.find(name); it != node_watchers_.end()) watchers = it->second;
  }
  std::vector<Pid> gone;
  for (const Pid& w : watchers) {
    Event ev;
    ev.kind = EventKind::Node;
    ev.tag = up ? 1 : 0;
    ev.payload = name;
    if (!scheduler_->deliver(w, std::move(ev)).empty()) gone.push_back(w);
  }
  if (gone.empty()) return;
  std::lock_guard lock(watch_mu_);
  if (auto it = node_watchers_.find(name); it != node_watchers_.end())
    std::erase_if(it->second, [&](const Pid& p) { return std::find(gone.begin(), gone.end(), p) != gone.end(); });
}

void NatsNode::add_watch(std::uint32_t node, const Watch& w) {
  std::lock_guard lock(watch_mu_);
  watches_[node].push_back(w);
}

bool NatsNode::remove_watch(std::uint32_t node, const Watch& w) {
  std::lock_guard lock(watch_mu_);
  auto it = watches_.find(node);
  if (it == watches_.end()) return false;
  auto& list = it->second;
  for (auto i = list.begin(); i != list.end(); ++i) {
    const bool same_remote =
        i->remote == w.remote || (!w.link && !i->remote.valid() && i->remote.node == w.remote.node);
    if (i->link == w.link && i->local == w.local && same_remote && (w.link || i->ref == w.ref)) {
      list.erase(i);
      return true;
    }
  }
  return false;
}

// --- receiving ---

void NatsNode::on_cluster_msg(natsConnection*, natsSubscription*, natsMsg* msg, void* self) {
  auto* node = static_cast<NatsNode*>(self);
  if (!node->enter_callback()) {
    natsMsg_Destroy(msg);
    return;
  }
  const std::string_view bytes(natsMsg_GetData(msg), static_cast<std::size_t>(natsMsg_GetDataLength(msg)));
  if (auto f = decode_frame(bytes); f && f->from_node != node->id_) {
    if (f->kind == FrameKind::Heartbeat) node->heard_heartbeat(f->from_node, f->text, f->version);
    if (f->kind == FrameKind::Bye)
      if (auto peer = node->find(f->from_node)) node->take_down(peer, "it ended", /*reset=*/false);
  }
  natsMsg_Destroy(msg);
  node->in_callbacks_.fetch_sub(1, std::memory_order_seq_cst);
}

void NatsNode::on_name_msg(natsConnection* nc, natsSubscription*, natsMsg* msg, void*) {
  // A starting node asks whether this name is live: it is.
  if (const char* reply = natsMsg_GetReply(msg)) (void)natsConnection_PublishString(nc, reply, "live");
  natsMsg_Destroy(msg);
}

void NatsNode::on_node_msg(natsConnection*, natsSubscription*, natsMsg* msg, void* self) {
  auto* node = static_cast<NatsNode*>(self);
  if (node->enter_callback()) {
    const std::string_view bytes(natsMsg_GetData(msg), static_cast<std::size_t>(natsMsg_GetDataLength(msg)));
    // Several frames in one message (batch.hpp), in the order sent; a
    // batch cut short gives the frames before the cut, each checked again.
    if (!bytes.empty() && static_cast<std::uint8_t>(bytes.front()) == kBatchMagic) {
      (void)for_each_in_batch(bytes, [node](std::string_view frame) { node->received(frame); });
    } else {
      node->received(bytes);
    }
    node->in_callbacks_.fetch_sub(1, std::memory_order_seq_cst);
  }
  natsMsg_Destroy(msg);
}

void NatsNode::heard_heartbeat(std::uint32_t id, std::string_view name, std::uint32_t version) {
  if (check_node_name(name).size()) return;  // not one of ours
  if (version != kWireVersion) {
    // Its frames would be misread here, and ours there: never a peer, so
    // to this node's processes it is a node not connected. Said once per
    // run of it, not at each heartbeat.
    bool first = false;
    {
      std::unique_lock lock(peers_mu_);
      first = refused_.insert(id).second;
    }
    if (first)
      log::logger().error("cluster: node {} (id {}) speaks cluster wire version {}, this node version {}: refused, "
                          "it stays unreachable from here (run one version on every node)",
                          name, id, version, kWireVersion);
    return;
  }
  if (auto peer = find(id)) {
    std::lock_guard lock(peer->mu);
    peer->last_heard = Clock::now();
    return;
  }
  // A new run of a node known under another id: the old run is gone.
  if (auto old = find(name)) take_down(old, "it restarted", /*reset=*/false);
  std::shared_ptr<Peer> peer;
  {
    std::unique_lock lock(peers_mu_);
    if (peers_.contains(id)) return;  // another thread made it first
    auto ended = ended_epochs_.find(id);
    const Ended before = ended == ended_epochs_.end() ? Ended{} : ended->second;
    peer = std::make_shared<Peer>(id, std::string(name), options_.session, next_epoch_++, before.floor,
                                  before.unsettled);
    peer->last_heard = Clock::now();
    peers_.emplace(id, peer);
  }
  log::logger().info("cluster: node {} (id {}) is up", peer->name, id);
  publish_heartbeat();  // let the newcomer know this node now
  {
    // And this session's epoch (an ack of nothing), rather than at the
    // next heartbeat: see tick_loop.
    std::lock_guard lock(peer->mu);
    emit(*peer, encode_frame(frame_to(*peer, FrameKind::Ack)), /*data=*/false, Clock::now());
  }
  tell_node_watchers(peer->name, true);
  if (up_hook_) up_hook_(id, peer->name);
}

void NatsNode::received(std::string_view bytes) {
  auto f = decode_frame(bytes);
  // Not for this run (an earlier run's id), or not a frame.
  if (!f || f->to_node != id_ || (f->kind != FrameKind::Data && f->kind != FrameKind::Ack && f->kind != FrameKind::Bye))
    return;
  auto peer = find(f->from_node);
  if (!peer) return;  // not connected (yet, or any more): the sender resends or was told
  Session::Verdict verdict;
  {
    std::lock_guard lock(peer->mu);
    if (peer->down) return;
    verdict = peer->session.judge(f->from_epoch, f->to_epoch);
  }
  // Of an earlier session of the pair (a reset sent before a partition
  // healed, say): this session goes on untouched.
  if (verdict == Session::Verdict::Stale) return;
  if (verdict == Session::Verdict::Newer) {
    take_down(peer, "it began a new session while this one went on", /*reset=*/true);
    return;
  }
  if (verdict == Session::Verdict::Ended) {
    take_down(peer, "it carries on a session this node ended (its reset was lost)", /*reset=*/true);
    return;
  }
  if (f->kind == FrameKind::Bye) {  // a reset: the peer took this node down
    take_down(peer, "it took this node down", /*reset=*/false);
    return;
  }
  // Held through the delivery: see Peer::delivery_mu.
  std::lock_guard delivering(peer->delivery_mu);
  bool deliver_it = false;
  {
    std::lock_guard lock(peer->mu);
    if (peer->down) return;
    const Clock::time_point now = Clock::now();
    peer->last_heard = now;
    peer->session.acknowledged(f->ack, now);
    pump(*peer, now);  // the window has room again
    if (f->kind == FrameKind::Data) {
      deliver_it = peer->session.arrive(f->seq, f->text.size()) == Session::Arrival::Deliver;
      if (peer->session.ack_due_now()) {
        Frame a = frame_to(*peer, FrameKind::Ack);
        a.ack = peer->session.cumulative_ack();
        emit(*peer, encode_frame(a), /*data=*/false, now);
        peer->session.ack_sent();
      }
    }
  }
  // Outside the peer's lock; this subscription's callbacks run one at a
  // time, so messages reach the scheduler in sequence order.
  if (deliver_it)
    if (auto e = peer->parts.add(f->text)) {
      if (peer->parts.from_parts()) {
        std::string payload = peer->parts.take_payload();
        deliver(*peer, *e, &payload);
      } else {
        deliver(*peer, *e);  // whole in its frame
      }
    }
}

void NatsNode::deliver(Peer& peer, Envelope e, std::string* owned) {
  // The payload a large message's parts were put together into, or a copy
  // of the view (a small one, in NATS's buffer).
  auto payload = [&] { return owned ? std::move(*owned) : std::string(e.payload); };
  Scheduler& s = *scheduler_;
  if (e.op == Envelope::Op::NamedMessage) {
    auto pid = lookup_name_ ? lookup_name_(e.name) : std::nullopt;
    if (!pid) return;  // no such name here: dropped, as a send to a dead PID is
    e.to = *pid;
  }
  // Only to this run's processes: a PID of another node would be sent on.
  if (e.to.node != id_) return;
  switch (e.op) {
    case Envelope::Op::Message:
    case Envelope::Op::NamedMessage:
      // As an event through deliver, not send_copy: the local message
      // path's send and send_copy each have one caller (the Lua send), so
      // that LTO inlines them into it whatever their size (BENCHMARKS.md,
      // issue 55).
      (void)s.deliver(e.to, Event(e.from, e.topic, payload()));
      break;
    case Envelope::Op::Event: {
      Event ev;
      ev.kind = static_cast<EventKind>(e.event_kind);
      if (ev.kind != EventKind::Exit && ev.kind != EventKind::LinkDown && ev.kind != EventKind::Cancel) return;
      ev.from = e.from;
      ev.tag = e.tag;
      ev.failed = e.failed;
      ev.payload = payload();
      // The monitor or link it ends no longer waits for the peer's end.
      if (ev.kind == EventKind::Exit) (void)remove_watch(peer.id, Watch{false, e.to, e.from, e.tag});
      if (ev.kind == EventKind::LinkDown) {
        (void)remove_watch(peer.id, Watch{true, e.to, e.from, 0});
        s.unlink_half(e.to, e.from);
      }
      (void)s.deliver(e.to, std::move(ev));
      break;
    }
    case Envelope::Op::Monitor:
      if (!e.name.empty()) {  // process.monitor({ name, node })
        monitor_by_name(e);
        break;
      }
      // A watcher there: the exit goes back through the session (or, for
      // a target gone, noproc at once).
      (void)s.monitor(e.from, e.to, e.tag);
      break;
    case Envelope::Op::Demonitor:
      if (!e.to.valid()) {  // a monitor by name: the process it found
        if (auto target = take_named_monitor(e.from, e.tag)) (void)s.unmonitor(e.from, *target, e.tag);
        break;
      }
      (void)s.unmonitor(e.from, e.to, e.tag);
      break;
    case Envelope::Op::Link:
      if (s.link_half(e.to, e.from).empty()) {
        add_watch(peer.id, Watch{true, e.to, e.from, 0});
      } else {
        // Linking to a process that is gone fails the linker, as Erlang's
        // link's noproc exit does.
        Event ev = link_down_event(e.to, "noproc");
        (void)deliver_event(e.from, ev);
      }
      break;
    case Envelope::Op::Unlink:
      (void)remove_watch(peer.id, Watch{true, e.to, e.from, 0});
      s.unlink_half(e.to, e.from);
      break;
    case Envelope::Op::Terminate: (void)s.terminate(e.to); break;
    case Envelope::Op::Spawn: {
      SpawnResult r = spawn_ ? spawn_(std::string(e.name), payload())
                             : SpawnResult{Pid{}, make_error(ErrorKind::Invalid, "this node takes no spawn_on")};
      Envelope reply = envelope_of(Envelope::Op::SpawnReply, e.from, Pid{}, e.tag);
      reply.failed = !r;
      const std::string text = r ? r.pid.to_string() : r.error;
      reply.payload = text;
      (void)send_envelope(reply);
      break;
    }
    case Envelope::Op::SpawnReply: {
      bool mine = false;
      {
        std::lock_guard lock(watch_mu_);
        auto& list = spawns_[peer.id];
        for (auto i = list.begin(); i != list.end(); ++i)
          if (i->asker == e.to && i->tag == e.tag) {
            list.erase(i);
            mine = true;
            break;
          }
      }
      if (mine) spawn_replied(e.to, e.tag, e.failed, e.payload);
      break;
    }
  }
}

// --- the ticker ---

void NatsNode::take_down(const std::shared_ptr<Peer>& peer, const char* why, bool reset) {
  {
    std::unique_lock lock(peers_mu_);
    auto it = peers_.find(peer->id);
    if (it == peers_.end() || it->second != peer) return;  // taken down already
    peers_.erase(it);
    // The next session's floor, set before a heartbeat can make that
    // session: this one's frames still in flight are stale in it. Unless
    // the peer's epoch was not settled: then the next session is wary
    // (Session::judge) instead. An epoch only heard in a wary session is
    // no floor: that session of the peer may have learned nothing of this
    // one, and then the next may go on with it.
    std::lock_guard peer_lock(peer->mu);
    Ended& ended = ended_epochs_[peer->id];
    ended.unsettled = !peer->session.settled();
    if (!ended.unsettled) ended.floor = std::max(ended.floor, peer->session.peer_epoch());
  }
  // Waits for a delivery from the peer in progress; none starts after.
  std::lock_guard delivering(peer->delivery_mu);
  Frame f;
  {
    std::unique_lock lock(peer->mu);
    // Down, and after a flush under way: the reset follows every frame
    // emitted before it (Flusher::close).
    flusher_.close(*peer, lock);
    f = frame_to(*peer, FrameKind::Bye);
  }
  if (reset) {
    f.text = options_.name;
    publish(peer->subject, encode_frame(f));
  }
  log::logger().warn("cluster: node {} (id {}) is down: {}", peer->name, peer->id, why);
  // Every monitor and link of a process there fires, once.
  std::vector<Watch> watches;
  {
    std::lock_guard lock(watch_mu_);
    if (auto it = watches_.find(peer->id); it != watches_.end()) {
      watches = std::move(it->second);
      watches_.erase(it);
    }
  }
  for (const Watch& w : watches) {
    if (w.link) {
      scheduler_->unlink_half(w.local, w.remote);
      (void)scheduler_->deliver(w.local, link_down_event(w.remote, "noconnection"));
    } else {
      (void)scheduler_->deliver(w.local, exit_event(w.remote, w.ref, "noconnection"));
    }
  }
  std::vector<PendingSpawn> spawns;
  {
    std::lock_guard lock(watch_mu_);
    // Its processes' monitors by name here end with it (the scheduler's
    // monitors of them send their exits nowhere).
    std::erase_if(named_monitors_, [&](const auto& kv) { return kv.first.node == peer->id; });
    if (auto it = spawns_.find(peer->id); it != spawns_.end()) {
      spawns = std::move(it->second);
      spawns_.erase(it);
    }
  }
  for (const PendingSpawn& sp : spawns)
    spawn_replied(sp.asker, sp.tag, true, make_error(ErrorKind::NotFound, "node " + peer->name + " went down"));
  tell_node_watchers(peer->name, false);
  if (down_hook_) down_hook_(peer->id, peer->name);
}

void NatsNode::tick_loop() {
  Clock::time_point next_heartbeat = Clock::now() + options_.heartbeat_every;
  std::unique_lock tick_lock(tick_mu_);
  while (!tick_cv_.wait_for(tick_lock, kTick, [this] { return stopping_; })) {
    tick_lock.unlock();
    const Clock::time_point now = Clock::now();
    const bool heartbeat = now >= next_heartbeat;
    if (heartbeat) {
      publish_heartbeat();
      next_heartbeat = now + options_.heartbeat_every;
    }
    std::vector<std::shared_ptr<Peer>> peers;
    {
      std::shared_lock lock(peers_mu_);
      for (const auto& [id, peer] : peers_) peers.push_back(peer);
    }
    const bool connected = transport_connected();
    for (const auto& peer : peers) {
      const char* why = nullptr;
      {
        std::lock_guard lock(peer->mu);
        if (now - peer->last_heard > options_.timeout) {
          why = "silent for the node timeout";
        } else if (!connected && buffered_bytes(*peer) > options_.session.max_buffered_bytes) {
          why = "more than 8 MB waiting while the cluster connection is down";
        } else {
          // Until the peer names this end's epoch, an ack frame goes at
          // each heartbeat even with nothing to acknowledge (Session::
          // peer_knows_epoch): an idle pair learns each other's epochs too.
          if (peer->session.ack_due_at_tick() || (heartbeat && !peer->session.peer_knows_epoch())) {
            Frame a = frame_to(*peer, FrameKind::Ack);
            a.ack = peer->session.cumulative_ack();
            emit(*peer, encode_frame(a), /*data=*/false, now);
            peer->session.ack_sent();
          }
          // Not while disconnected: what was published then waits in NATS's
          // reconnect buffer, and resending it would fill that buffer with
          // copies; once connected again, a stall resends what was lost.
          if (connected) peer->session.resend_if_stalled(now, [&](std::uint64_t seq, const Body& body) {
            Frame f = frame_to(*peer, FrameKind::Data);
            f.seq = seq;
            f.ack = peer->session.cumulative_ack();
            body.framed(f, [&](std::string_view frame) { emit(*peer, frame, /*data=*/true, now); });
          });
          pump(*peer, now);
        }
      }
      if (why) take_down(peer, why, /*reset=*/true);
    }
    tick_lock.lock();
  }
}

}  // namespace host::cluster

// What the runtime core and the Lua side see of a cluster (SPEC section
// 12): the other nodes, reached by a message to a PID of theirs or to a
// name registered there. Implemented over NATS by host/cluster/nats_node;
// absent (a null pointer, nothing called, nothing paid) without --cluster.
// Threads: every call may be made from any thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "host/pid.hpp"
#include "host/process.hpp"

namespace host {

class RemoteNodes {
 public:
  virtual ~RemoteNodes() = default;
  // This node's --node name.
  virtual const std::string& node_name() const = 0;
  // The names of the other nodes connected now.
  virtual std::vector<std::string> node_names() const = 0;
  // A message to a process of another node (to.node is not this node's):
  // "" when it went into that node's session, else "not_found: ..." (no
  // connected node has that id: an earlier run's PID, or a node that went
  // away). backlog, when given, is set to config::kSendBacklogYield or
  // more when the session's window is full (the sender should yield).
  virtual std::string send(const Pid& to, std::string_view topic, std::string_view payload, const Pid& from,
                           std::size_t* backlog) = 0;
  // send's two halves for a sender that encodes the payload itself (the
  // Lua send), and the only way to the process registered as `name` on
  // node `node` (an unknown name there drops the message, as a send to a
  // dead PID does): begin_message returns the message's
  // bytes so far (room for the transport's headers, then to or, when
  // `name` is not empty, that name, the topic and from); the caller
  // appends the payload's encoding and hands them to send_begun (`node`
  // empty: to `to`; else to `name` there), which sends them as they lie:
  // the payload is encoded once, in place, and never copied on this node.
  // send_begun answers as send, or not_found when `node` is not connected.
  virtual std::string begin_message(const Pid& to, std::string_view name, std::string_view topic,
                                    const Pid& from) = 0;
  virtual std::string send_begun(const Pid& to, std::string_view node, const Pid& from, std::string message,
                                 std::size_t* backlog) = 0;
  // An event for a process of another node (a monitor's exit, a link's
  // link_down, a cancel): "" when it went into the session, else
  // not_found as for send.
  virtual std::string deliver_event(const Pid& to, const Event& event) = 0;
  // A monitor or link of a local process (watcher, linker) on a process
  // of another node, and their removal, and a terminate of one. When the
  // node goes away, every monitor gets an exit and every link a link_down
  // with error "noconnection", once. A monitor of a process on a node not
  // connected gets that exit at once; a link to one is not_found.
  virtual std::string monitor(const Pid& watcher, const Pid& target, std::uint64_t ref) = 0;
  virtual void demonitor(const Pid& watcher, const Pid& target, std::uint64_t ref) = 0;
  // A monitor of the process registered as `name` on node `node`
  // (process.monitor({ name, node })), as Erlang's monitor of {Name,
  // Node}: that node looks the name up when the request arrives and
  // monitors the process it names, or answers noproc; the node going away
  // fires noconnection (at once when it is not connected). Returns the key
  // the watcher keeps the monitor under: the node's id with index and
  // generation 0, no process's PID. The exit of the process found carries
  // its PID; a noproc or noconnection exit carries the key. demonitor
  // takes the key.
  virtual Pid monitor_named(const Pid& watcher, std::string_view node, std::string_view name, std::uint64_t ref) = 0;
  virtual std::string link(const Pid& local, const Pid& remote) = 0;
  virtual void unlink(const Pid& local, const Pid& remote) = 0;
  virtual std::string terminate(const Pid& target) = 0;
  // process.monitor_node: watcher gets a Node event (host/process.hpp)
  // when `node` goes down (at once if it is not connected) and when it
  // comes up, until watcher ends.
  virtual void monitor_node(const Pid& watcher, std::string_view node) = 0;
};

}  // namespace host

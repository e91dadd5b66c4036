// What a socket object is (bindings/socket_object.cpp makes them, bindings/
// socket_tcp.cpp runs TCP's methods on the worker): shared by those two
// files only. Threads: the one running the process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "bindings/host_finalizers.hpp"
#include "host/io/tcp_socket.hpp"

struct lua_State;

namespace host::lua {

// LuaSocket's classes, and kTls: a TCP client under TLS (ssl.wrap).
enum SocketClass : std::uint8_t { kMaster, kClient, kServer, kUnconnected, kConnected, kTls, kClasses };

struct TcpState;  // socket_tcp.cpp: a TCP socket on the worker

struct SocketRef {
  double id;      // a UDP socket's on the I/O thread (0 for TCP)
  double block;   // seconds, or < 0 for none
  double total;
  TcpState* tcp;  // TCP: its socket, owned here (freed by __gc)
  SocketClass cls;
  bool closed;  // closed here
  bool moved;   // given to another process
  HostFinalizer fin{};  // its end (finalize_socket): its __gc, or the process's
};

// The timeout a call starts with: the smaller of the block and total
// timeouts, or < 0 for none.
inline double call_timeout(const SocketRef* s) {
  double t = s->block;
  if (s->total >= 0 && (t < 0 || s->total < t)) t = s->total;
  return t;
}

// The socket object at idx, or nullptr for any other value (socket_object.cpp).
SocketRef* to_socket(lua_State* L, int idx);
// Pushes a new socket object of class cls (socket_object.cpp).
SocketRef* push_socket(lua_State* L, SocketClass cls);

// TCP on the worker (socket_tcp.cpp). new_tcp_socket(family): socket.tcp's
// master ("unspec", "inet", "inet6"). The methods take the object at
// index 1, already checked to be live and of a class that has them.
int new_tcp_socket(lua_State* L);
int tcp_close(lua_State* L, SocketRef* s);
int tcp_bind(lua_State* L, SocketRef* s);
int tcp_listen(lua_State* L, SocketRef* s);
int tcp_connect(lua_State* L, SocketRef* s);
int tcp_accept(lua_State* L, SocketRef* s);
// send(data, i, j) with i and j already clamped (1 <= i <= j <= #data).
int tcp_send(lua_State* L, SocketRef* s, const char* data, std::size_t i, std::size_t j);
// receive: kind 'l', 'a', 'n' (count n) or 'y' (receiveany, at most n);
// prefix_idx: the prefix's index, or 0.
int tcp_receive(lua_State* L, SocketRef* s, char kind, std::size_t n, int prefix_idx);
int tcp_shutdown(lua_State* L, SocketRef* s, const char* how);
int tcp_name(lua_State* L, SocketRef* s, bool peer);
int tcp_option(lua_State* L, SocketRef* s, bool set);
int tcp_dirty(lua_State* L, SocketRef* s);
int tcp_getstats(lua_State* L, SocketRef* s);
int tcp_setstats(lua_State* L, SocketRef* s);
int tcp_getfd(lua_State* L, SocketRef* s);
int tcp_tlswrap(lua_State* L, SocketRef* s);
int tcp_handshake(lua_State* L, SocketRef* s);
int tcp_sni(lua_State* L, SocketRef* s);
int tcp_info(lua_State* L, SocketRef* s);
// The object's end (its __gc): closes the socket, drops its waits.
void tcp_free(lua_State* L, SocketRef* s);
// Moves: the socket leaves this process (an id for TcpTransit), or
// arrives (pushes the object; a closed one where nobody holds it any more).
std::uint64_t tcp_give(lua_State* L, SocketRef* s);
// http.serve's (bindings/http_conn.cpp): the socket out of its object
// (which answers closed from then on; nullptr where it is not a live TCP
// client with no call waiting); a socket put (back) in an object.
std::unique_ptr<io::TcpSocket> tcp_take(lua_State* L, SocketRef* s);
void tcp_push(lua_State* L, std::unique_ptr<io::TcpSocket> sock, SocketClass cls);
// require("host.http")'s table (bindings/http_conn.cpp).
int open_http_conn(lua_State* L);
void tcp_claim(lua_State* L, std::uint64_t id, SocketClass cls);
// A move that failed: the socket back in s from TcpTransit; false where
// it is gone (claimed or closed meanwhile).
bool tcp_take_back(lua_State* L, SocketRef* s, std::uint64_t id);

}  // namespace host::lua

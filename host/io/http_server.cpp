// The host's own HTTP server (http_server.hpp).
#include "host/io/http_server.hpp"

#include <sys/socket.h>

#include "host/io/call_values.hpp"
#include "host/error.hpp"
#include "host/scheduler.hpp"

namespace host::io {

std::string HttpServer::serve_internal(const std::string& host, int port, const std::string& conn_entry,
                                       const std::string& entry) {
  if (port < 0 || port > 65535) throw CallError{"invalid: port must be from 0 to 65535"};
  const std::string h = host.empty() || host == "*" ? "0.0.0.0" : host == "localhost" ? "127.0.0.1" : host;
  SocketAddress a;
  if (!parse_numeric(h, port, AF_UNSPEC, &a))
    throw CallError{"invalid: address '" + host + "' (a numeric IPv4 or IPv6 address, or localhost)"};
  auto sock = std::make_unique<TcpSocket>(poller_, a.family());
  std::string err = sock->open();
  if (err.empty()) {
    (void)sock->set_option("reuseaddr", true, 0);
    err = sock->bind(a);
  }
  if (err.empty()) err = sock->listen(1024);
  if (!err.empty()) throw CallError{err + " (" + host + ":" + std::to_string(port) + ")"};
  std::string ip;
  int bound_port = 0;
  const char* family = "inet";
  sock->name(false, &ip, &bound_port, &family);
  const std::string address = (a.family() == AF_INET6 ? "[" + ip + "]" : ip) + ":" + std::to_string(bound_port);
  const std::uint64_t id = transit_.give(std::move(sock));
  CallResultWriter args;
  args.moved(id, "~tcp{server}").string(address).string(conn_entry).string(entry);
  SpawnResult r = spawn_("http.server:serve_internal", args.finish());
  if (!r) {
    (void)transit_.claim(id);  // closed
    throw CallError{"cannot start the server's process: " + r.error};
  }
  note_internal(1);  // the acceptor, which lives as long as the host
  return address;
}

}  // namespace host::io

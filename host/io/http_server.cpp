// HTTP/1.1 on the I/O thread (http_server.hpp).
#include "host/io/http_server.hpp"

#include <http_parser.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <uv.h>

#include <algorithm>
#include <chrono>
#include <cctype>
#include <climits>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <future>
#include <memory>
#include <random>
#include <string_view>
#include <unordered_map>

#include "host/io/tls_session.hpp"
#include "host/error.hpp"
#include "host/log.hpp"
#include "host/scheduler.hpp"

namespace host::io {
namespace {

[[noreturn]] void fail(std::string text) { throw CallError{std::move(text)}; }

const CallValue& arg(const std::vector<CallValue>& args, std::size_t i) {
  static const CallValue nil;
  return i < args.size() ? args[i] : nil;
}

std::string ended() { return CallResultWriter().finish(); }  // no values: the connection is done

// A server's limits (serve's opts), copied into each connection, which
// may outlive its server.
struct Limits {
  std::size_t max_header_bytes = 32 * 1024;
  std::size_t max_body_bytes = 1024 * 1024;
  // A body larger than this is streamed to the handler (req:read_body())
  // instead of arriving whole in req.body.
  std::size_t buffer_body_bytes = 1024 * 1024;
  std::uint64_t request_timeout_ms = 30000;
  std::uint64_t keepalive_timeout_ms = 60000;
  // An idle keep-alive connection gives its process up after this long
  // (0: never): its next request starts a new one.
  std::uint64_t hibernate_ms = 100;
  std::size_t max_connections = 10000;
  // Who serves a connection: the process's entry (conn_entry), which
  // calls entry's method per request. Shared by a server's connections.
  std::shared_ptr<const std::pair<std::string, std::string>> entries;
  // https: the server's certificate and key (opts.tls), or none.
  std::shared_ptr<const TlsContext> tls;
  // The address a server of the host's own is bound to, given to each of
  // its connection processes (the inspector checks Host against it).
  std::string bound;
};

// A parsed request, or in its place an error response owed (400, 408,
// 413, 431, 503, 505), after which the connection closes.
struct Request {
  int error = 0;
  bool keep_alive = true;
  bool head = false;
  bool streamed = false;  // its body follows through "body" calls
  unsigned short minor = 1;
  std::string method, url, body;
  std::vector<std::pair<std::string, std::string>> headers;  // names in lower case
};

// A connection's queue holds a request or two: a vector, which allocates
// nothing while empty (std::deque allocates its first block as it is made).
struct Fifo : std::vector<Request> {
  void pop_front() { erase(begin()); }
};

enum class TimerMode : unsigned char { None, Request, Idle, Hibernate, Linger };

// The loop's reads land here: each is parsed before the next is read.
thread_local char t_read_buffer[64 * 1024];

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

int hex_digit(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

// %XX escapes decoded (and '+' as a space in a query); a malformed escape
// stays as it is.
std::string percent_decode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char ch = s[i];
    if (ch == '%' && i + 2 < s.size()) {
      const int hi = hex_digit(s[i + 1]), lo = hex_digit(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(plus_is_space && ch == '+' ? ' ' : ch);
  }
  return out;
}

// A request's header names and query keys are the client's choice: they
// are grouped through a hash whose key is drawn at random for each run
// (SipHash-1-3), so that no set of names can be made to collide and turn
// the grouping quadratic.
struct NameHash {
  static std::pair<std::uint64_t, std::uint64_t> draw() {
    try {
      std::random_device rd;
      const auto word = [&] { return (static_cast<std::uint64_t>(rd()) << 32) ^ rd(); };
      return {word(), word()};
    } catch (const std::exception&) {  // no entropy source: a worse key, never a failed request
      const auto t = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
      return {t * 0x9e3779b97f4a7c15ULL, reinterpret_cast<std::uintptr_t>(&t) ^ t};
    }
  }
  static std::uint64_t rotl(std::uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }
  std::size_t operator()(std::string_view s) const {
    static const std::pair<std::uint64_t, std::uint64_t> key = draw();
    std::uint64_t v0 = key.first ^ 0x736f6d6570736575ULL, v1 = key.second ^ 0x646f72616e646f6dULL;
    std::uint64_t v2 = key.first ^ 0x6c7967656e657261ULL, v3 = key.second ^ 0x7465646279746573ULL;
    const auto round = [&] {
      v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32);
      v2 += v3; v3 = rotl(v3, 16); v3 ^= v2;
      v0 += v3; v3 = rotl(v3, 21); v3 ^= v0;
      v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32);
    };
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    const std::size_t n = s.size(), whole = n - n % 8;
    for (std::size_t i = 0; i < whole; i += 8) {
      std::uint64_t m = 0;
      for (int j = 0; j < 8; ++j) m |= static_cast<std::uint64_t>(p[i + j]) << (8 * j);
      v3 ^= m;
      round();
      v0 ^= m;
    }
    std::uint64_t last = static_cast<std::uint64_t>(n) << 56;
    for (std::size_t j = 0; j < n % 8; ++j) last |= static_cast<std::uint64_t>(p[whole + j]) << (8 * j);
    v3 ^= last;
    round();
    v0 ^= last;
    v2 ^= 0xff;
    round();
    round();
    round();
    return static_cast<std::size_t>(v0 ^ v1 ^ v2 ^ v3);
  }
};

// "a=1&b=2&b=3" as its keys in order, a key given more than once with all
// its values.
std::vector<std::pair<std::string, std::vector<std::string>>> parse_query(std::string_view q) {
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  std::unordered_map<std::string, std::size_t, NameHash> at;  // a key's place in out
  at.reserve(static_cast<std::size_t>(std::count(q.begin(), q.end(), '&')) + 1);  // no rehash as it fills
  while (!q.empty()) {
    const std::size_t amp = q.find('&');
    const std::string_view part = q.substr(0, amp);
    q = amp == std::string_view::npos ? std::string_view{} : q.substr(amp + 1);
    if (part.empty()) continue;
    const std::size_t eq = part.find('=');
    std::string key = percent_decode(part.substr(0, eq), true);
    std::string value = eq == std::string_view::npos ? std::string() : percent_decode(part.substr(eq + 1), true);
    const auto [it, fresh] = at.try_emplace(key, out.size());
    if (fresh)
      out.push_back({std::move(key), {std::move(value)}});
    else
      out[it->second].second.push_back(std::move(value));
  }
  return out;
}

// RFC 9110's token characters, which a header name is made of.
bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (unsigned char ch : s) {
    if (std::isalnum(ch)) continue;
    if (!std::strchr("!#$%&'*+-.^_`|~", ch) || ch == 0) return false;
  }
  return true;
}

// A header value may not hold CR, LF or NUL: each would end the header
// early, letting a value chosen by a client write headers of its own
// (response splitting).
bool is_field_value(std::string_view s) {
  for (unsigned char ch : s)
    if (ch == '\r' || ch == '\n' || ch == 0) return false;
  return true;
}

std::string number_text(double d) {
  char buf[64];
  if (d == static_cast<double>(static_cast<long long>(d)))
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(d));
  else
    std::snprintf(buf, sizeof buf, "%.14g", d);
  return buf;
}

// The Date header's value, made once a second.
const std::string& date_header() {
  thread_local std::time_t made = 0;
  thread_local std::string line;
  const std::time_t now = std::time(nullptr);
  if (now != made) {
    made = now;
    std::tm tm{};
    gmtime_r(&now, &tm);
    char buf[64];
    std::strftime(buf, sizeof buf, "Date: %a, %d %b %Y %H:%M:%S GMT\r\n", &tm);
    line = buf;
  }
  return line;
}

const char* reason(int status) {
  const char* r = http_status_str(static_cast<enum http_status>(status));
  return std::strcmp(r, "<unknown>") == 0 ? "" : r;
}

// A response the loop writes by itself, for a request that never reaches
// a handler (or whose handler's process ended).
std::string error_response(int status) {
  const std::string body = std::string(reason(status)) + "\n";
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason(status) + "\r\n";
  out += date_header();
  out += "Content-Type: text/plain; charset=utf-8\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n";
  out += body;
  return out;
}

// "IP:PORT", or "[IPv6]:PORT".
std::string address_text(const sockaddr_storage& ss) {
  char ip[INET6_ADDRSTRLEN] = "";
  if (ss.ss_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    uv_ip6_name(in6, ip, sizeof ip);
    return "[" + std::string(ip) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  auto* in = reinterpret_cast<const sockaddr_in*>(&ss);
  uv_ip4_name(in, ip, sizeof ip);
  return std::string(ip) + ":" + std::to_string(ntohs(in->sin_port));
}

std::string peer_text(const uv_tcp_t* tcp) {
  sockaddr_storage ss{};
  int len = sizeof ss;
  if (uv_tcp_getpeername(tcp, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "";
  return address_text(ss);
}

std::string bind_error(int rc) {
  switch (rc) {
    case UV_EADDRINUSE: return "address already in use";
    case UV_EACCES: return "permission denied";
    case UV_EADDRNOTAVAIL: return "address not available";
    default: return uv_strerror(rc);
  }
}

}  // namespace

struct HttpServer::Server {
  HttpServer* svc = nullptr;
  std::uint64_t id = 0;
  Pid owner;
  uv_tcp_t tcp{};
  bool internal = false;  // the host's own (serve_internal)
  Limits limits;
  std::unordered_set<Conn*> conns;
  bool closed = false;
};

struct HttpServer::Conn {
  HttpServer* svc = nullptr;
  std::uint64_t id = 0;
  Server* server = nullptr;  // nullptr once the server closed
  Pid pid;                   // the process serving it; none for a refused one
  bool internal = false;     // of a server of the host's own
  Limits limits;
  std::string remote;
  uv_tcp_t tcp{};
  uv_timer_t timer{};
  uv_shutdown_t shutdown{};
  int open_handles = 0;
  TimerMode timer_mode = TimerMode::None;

  std::unique_ptr<TlsSession> tls;  // https: what is read and written passes through it
  http_parser parser{};
  Request cur;             // the request being parsed
  bool new_header = true;  // the next header-name bytes start a header (after a value, at a message's start)
  bool in_message = false; // some of a request has come
  bool in_trailers = false; // past the head: header lines now are a chunked body's trailers
  std::size_t header_bytes = 0;
  int parse_error = 0;     // a limit a callback hit: the response it owes

  Fifo ready;              // parsed, not yet handed to the process
  bool waiting = false;    // the process waits in next/respond
  std::uint64_t wait_tag = 0;
  bool in_flight = false;  // a request handed over, not yet answered
  bool responding_head = false;  // it is a HEAD request
  bool head_written = false;     // its response's head is written (a stream)
  bool no_body = false;          // its response has no body (HEAD, 204, 304): a stream writes nothing
  bool raw_stream = false;       // its streamed body goes out as it is, ended by the close (HTTP/1.0)
  bool keep_alive = true;        // of the request in flight
  unsigned short minor = 1;      // its HTTP/1.x version
  bool chunk_waiting = false;
  std::uint64_t chunk_tag = 0;
  std::uint64_t served = 0;

  // A streamed body (larger than buffer_body_bytes): the parser is inside
  // it (streaming), its bytes wait in stream_buf for the process's "body"
  // calls; the in-flight request is the streamed one (flight_streamed).
  bool streaming = false;
  bool flight_streamed = false;
  bool stream_done = false;      // all of it came (and stream_buf holds its rest)
  bool discarding = false;       // answered before it was read: the rest is dropped
  std::string stream_error;      // why it ended early ("too_large: ...", "closed", "timeout")
  std::size_t stream_total = 0;
  std::string stream_buf;
  bool body_waiting = false;
  std::uint64_t body_tag = 0;

  bool reading = false;
  bool no_more = false;    // parse nothing more (closing after what is queued)
  bool eof = false;        // the client sent all it will
  bool draining = false;   // the server closed: close once the request in flight is answered
  bool closing = false;    // out of the tables; handles closing
  bool shut = false;       // write side shut down: lingering, discarding reads
};

struct HttpOps {
  using Server = HttpServer::Server;
  using Conn = HttpServer::Conn;

  static uv_stream_t* stream(Conn* c) { return reinterpret_cast<uv_stream_t*>(&c->tcp); }
  static Scheduler& sched(Conn* c) { return c->svc->scheduler_; }

  // ---- parsing
  static const http_parser_settings& settings() {
    static const http_parser_settings s = [] {
      http_parser_settings st{};
      st.on_message_begin = on_message_begin;
      st.on_url = on_url;
      st.on_header_field = on_header_field;
      st.on_header_value = on_header_value;
      st.on_headers_complete = on_headers_complete;
      st.on_body = on_body;
      st.on_message_complete = on_message_complete;
      return st;
    }();
    return s;
  }
  static Conn* conn_of(http_parser* p) { return static_cast<Conn*>(p->data); }

  static bool count_header(Conn* c, std::size_t n) {
    c->header_bytes += n;
    if (c->header_bytes <= c->limits.max_header_bytes) return true;
    c->parse_error = 431;
    return false;
  }
  // The last header's name in lower case, once it is complete.
  static void end_header(Conn* c) {
    if (!c->cur.headers.empty()) c->cur.headers.back().first = lower(std::move(c->cur.headers.back().first));
  }
  static int on_message_begin(http_parser* p) {
    Conn* c = conn_of(p);
    c->cur = Request{};
    c->header_bytes = 0;
    c->new_header = true;
    c->in_message = true;
    c->in_trailers = false;
    if (!c->in_flight && c->ready.empty()) set_timer(c, TimerMode::Request);
    return 0;
  }
  static int on_url(http_parser* p, const char* at, std::size_t n) {
    Conn* c = conn_of(p);
    if (!count_header(c, n)) return 1;
    c->cur.url.append(at, n);
    return 0;
  }
  static int on_header_field(http_parser* p, const char* at, std::size_t n) {
    Conn* c = conn_of(p);
    if (!count_header(c, n)) return 1;
    // http-parser lets a space into a name ("Content-Length : 5") and still
    // reads it as the header it names; a proxy in front may not, and the
    // two would then frame the body differently.
    if (std::memchr(at, ' ', n) != nullptr) {
      c->parse_error = 400;
      return 1;
    }
    // A chunked body's trailers are not the request's headers: a handler
    // must not find in req.headers what came after the body it read.
    if (c->in_trailers) return 0;
    if (c->new_header) {
      end_header(c);
      c->cur.headers.emplace_back();
      c->new_header = false;
    }
    c->cur.headers.back().first.append(at, n);
    return 0;
  }
  static int on_header_value(http_parser* p, const char* at, std::size_t n) {
    Conn* c = conn_of(p);
    if (!count_header(c, n)) return 1;
    if (c->in_trailers) return 0;
    c->cur.headers.back().second.append(at, n);
    c->new_header = true;
    return 0;
  }
  static int on_headers_complete(http_parser* p) {
    Conn* c = conn_of(p);
    end_header(c);
    c->new_header = true;
    c->in_trailers = true;
    Request& r = c->cur;
    r.method = http_method_str(static_cast<enum http_method>(p->method));
    r.head = p->method == HTTP_HEAD;
    r.minor = p->http_minor;
    r.keep_alive = http_should_keep_alive(p) != 0;
    if (p->http_major != 1) {
      c->parse_error = 505;
      return -1;
    }
    // A URL in another form than "/path?query" is split by http-parser,
    // which holds offsets in 16 bits.
    if (r.url.size() > 65535 && r.url[0] != '/') {
      c->parse_error = 414;
      return -1;
    }
    // HTTP/1.1 requires one Host: a request without, or with two a proxy
    // and this server could each read differently, is refused.
    std::size_t hosts = 0;
    for (const auto& h : r.headers) hosts += h.first == "host";
    if (hosts > 1 || (hosts == 0 && p->http_minor >= 1)) {
      c->parse_error = 400;
      return -1;
    }
    if (p->content_length != ULLONG_MAX && p->content_length > c->limits.max_body_bytes) {
      c->parse_error = 413;
      return -1;
    }
    // A client that asked to be told before it sends its body is told
    // now, when nothing is being answered before it (else it sends after
    // its own wait, as RFC 9110 lets it).
    if (p->http_major == 1 && p->http_minor >= 1 && !c->in_flight && c->ready.empty()) {
      for (const auto& [name, value] : r.headers)
        if (name == "expect" && iequals(value, "100-continue")) {
          write_bytes(c, "HTTP/1.1 100 Continue\r\n\r\n");
          break;
        }
    }
    if (p->content_length != ULLONG_MAX && p->content_length > c->limits.buffer_body_bytes) begin_stream(c);
    return 0;
  }
  // The request being parsed goes to the queue now, its body to follow.
  static void begin_stream(Conn* c) {
    c->streaming = true;
    c->stream_done = false;
    c->discarding = false;
    c->stream_error.clear();
    c->stream_buf = std::move(c->cur.body);
    c->stream_total = c->stream_buf.size();
    c->cur.body.clear();
    c->cur.streamed = true;
    c->ready.push_back(std::move(c->cur));
    c->cur = Request{};
  }
  // A streamed body's bytes came, ended or failed: a waiting "body" call
  // gets them.
  static void body_news(Conn* c) {
    if (!c->body_waiting || !c->flight_streamed) return;
    if (c->stream_buf.empty() && !c->stream_done && c->stream_error.empty()) return;
    c->body_waiting = false;
    const std::uint64_t tag = c->body_tag;
    set_timer(c, TimerMode::None);
    sched(c).complete_yield(c->pid, tag, take_body(c));
  }
  // What a "body" call returns: the bytes waiting, else nothing at the end,
  // else nil and why it ended early.
  static std::string take_body(Conn* c) {
    if (!c->stream_buf.empty()) {
      std::string out = CallResultWriter().string(c->stream_buf).finish();
      c->stream_buf.clear();
      return out;
    }
    if (!c->stream_error.empty() && !c->stream_done) return CallResultWriter().nil().string(c->stream_error).finish();
    return ended();
  }
  static int on_body(http_parser* p, const char* at, std::size_t n) {
    Conn* c = conn_of(p);
    if (c->streaming) {
      c->stream_total += n;
      if (c->stream_total > c->limits.max_body_bytes) {
        c->stream_error = "too_large: the body is over " + std::to_string(c->limits.max_body_bytes) + " bytes";
        return 1;
      }
      if (!c->discarding) c->stream_buf.append(at, n);
      return 0;
    }
    if (c->cur.body.size() + n > c->limits.max_body_bytes) {
      c->parse_error = 413;
      return 1;
    }
    c->cur.body.append(at, n);
    if (c->cur.body.size() > c->limits.buffer_body_bytes) begin_stream(c);  // a chunked body grew past it
    return 0;
  }
  static int on_message_complete(http_parser* p) {
    Conn* c = conn_of(p);
    c->in_message = false;
    c->in_trailers = false;
    if (c->streaming) {  // the streamed request is queued already (or answered)
      c->streaming = false;
      c->stream_done = true;
      c->discarding = false;
      // The stream's state is the connection's: nothing after a streamed
      // request is parsed, and the connection closes once it is answered
      // (a client that pipelined after an upload sends the rest again).
      c->no_more = true;
      if (!c->ready.empty()) c->ready.back().keep_alive = false;
      else c->keep_alive = false;
      http_parser_pause(p, 1);
      return 0;
    }
    c->ready.push_back(std::move(c->cur));
    c->cur = Request{};
    if (p->upgrade) c->ready.back().keep_alive = false;  // answered (not switched), then closed
    if (!c->ready.back().keep_alive) {
      c->no_more = true;  // answered, then closed
      http_parser_pause(p, 1);
    }
    return 0;
  }

  // Feeds what came; queues an error response in the place of a request
  // that does not parse.
  static void parse(Conn* c, const char* data, std::size_t n) {
    if (c->no_more) return;
    const std::size_t used = http_parser_execute(&c->parser, &settings(), data, n);
    const auto err = HTTP_PARSER_ERRNO(&c->parser);
    if (err == HPE_OK || err == HPE_PAUSED) {
      (void)used;
      return;
    }
    c->no_more = true;
    c->in_message = false;
    if (c->streaming) {  // the handler has (or will have) this request: its read_body says what went wrong
      c->streaming = false;
      if (c->stream_error.empty()) c->stream_error = n == 0 ? "closed" : "invalid: the body does not parse";
      return;
    }
    Request bad;
    bad.error = c->parse_error ? c->parse_error : err == HPE_HEADER_OVERFLOW ? 431 : 400;
    c->ready.push_back(std::move(bad));
  }

  // ---- reading
  static void on_alloc(uv_handle_t*, std::size_t, uv_buf_t* buf) {
    *buf = uv_buf_init(t_read_buffer, sizeof t_read_buffer);
  }
  static void on_read(uv_stream_t* st, ssize_t nread, const uv_buf_t* buf) {
    Conn* c = static_cast<Conn*>(st->data);
    if (nread == 0) return;
    if (c->shut) {  // lingering: what the client still sends is dropped
      if (nread < 0) close_handles(c);
      return;
    }
    if (nread < 0) {
      stop_reading(c);
      if (nread != UV_EOF) {  // reset: nothing more can be written either
        finish(c, false);
        return;
      }
      c->eof = true;
      if (c->in_message && !c->no_more) parse(c, nullptr, 0);  // a body that ends at the close
      if (c->in_message) c->in_message = false;  // cut off: never answered
      if (c->streaming) {
        c->streaming = false;
        if (c->stream_error.empty()) c->stream_error = "closed";
      }
      body_news(c);
      serve(c);
      return;
    }
    if (c->tls) {
      if (!tls_input(c, buf->base, static_cast<std::size_t>(nread))) return;
    } else {
      parse(c, buf->base, static_cast<std::size_t>(nread));
    }
    body_news(c);
    if (!may_read(c)) stop_reading(c);  // even while a request is being answered (serve returns early then)
    serve(c);
  }
  // Reading pauses while a streamed body holds this much nobody took.
  static constexpr std::size_t kStreamHighWater = 256 * 1024;
  static bool may_read(const Conn* c) {
    return c->ready.size() < HttpServer::kMaxQueued && c->stream_buf.size() < kStreamHighWater;
  }

  // https: ciphertext in, the handshake advanced, plaintext parsed. False
  // when the connection is done for (a failed handshake: closed at once).
  static bool tls_input(Conn* c, const char* data, std::size_t n) {
    TlsSession& t = *c->tls;
    t.feed({data, n});
    if (t.state() == TlsSession::State::Handshaking) t.handshake();
    std::string plain;
    while (!c->closing && (t.state() == TlsSession::State::Open || t.state() == TlsSession::State::Closed)) {
      plain.clear();
      if (t.read(plain, sizeof t_read_buffer) == 0) break;
      parse(c, plain.data(), plain.size());
    }
    flush_tls(c);
    if (t.state() == TlsSession::State::Failed) {
      log::logger().debug("http: TLS with {} failed: {}", c->remote, t.error());
      finish(c, false);
      return false;
    }
    if (t.state() == TlsSession::State::Closed && !c->eof) {  // the client's close_notify: nothing more comes
      stop_reading(c);
      c->eof = true;
      if (c->in_message) c->in_message = false;
      if (c->streaming) {
        c->streaming = false;
        if (c->stream_error.empty()) c->stream_error = "closed";
      }
    }
    return true;
  }
  static void flush_tls(Conn* c) {
    std::string out;
    if (c->tls->take_output(out) != 0) write_raw(c, std::move(out));
  }
  static void start_reading(Conn* c) {
    if (c->reading || c->closing || c->eof) return;
    if (uv_read_start(stream(c), on_alloc, on_read) == 0) c->reading = true;
  }
  static void stop_reading(Conn* c) {
    if (!c->reading) return;
    uv_read_stop(stream(c));
    c->reading = false;
  }

  // ---- writing
  struct WriteReq {
    uv_write_t req;
    std::string data;
  };
  // Plaintext to the client: through the TLS session where there is one.
  static void write_bytes(Conn* c, std::string data) {
    if (!c->tls) return write_raw(c, std::move(data));
    if (c->closing || c->shut || data.empty()) return;
    const auto st = c->tls->state();
    if (st != TlsSession::State::Open && st != TlsSession::State::Closed) return;  // no handshake: nothing to answer on
    if (!c->tls->write(data)) {
      finish(c, false);
      return;
    }
    flush_tls(c);
  }
  static void write_raw(Conn* c, std::string data) {
    if (c->closing || c->shut || data.empty()) return;
    uv_stream_t* s = stream(c);
    if (uv_stream_get_write_queue_size(s) == 0) {
      uv_buf_t b = uv_buf_init(data.data(), static_cast<unsigned>(data.size()));
      const int n = uv_try_write(s, &b, 1);
      if (n == static_cast<int>(data.size())) return;
      if (n > 0)
        data.erase(0, static_cast<std::size_t>(n));
      else if (n != UV_EAGAIN) {
        finish(c, false);
        return;
      }
    }
    auto* w = new WriteReq{{}, std::move(data)};
    uv_buf_t b = uv_buf_init(w->data.data(), static_cast<unsigned>(w->data.size()));
    if (uv_write(&w->req, s, &b, 1, on_written) != 0) {
      delete w;
      finish(c, false);
    }
  }
  static void on_written(uv_write_t* req, int status) {
    auto* w = reinterpret_cast<WriteReq*>(req);
    Conn* c = static_cast<Conn*>(req->handle->data);
    delete w;
    if (status == UV_ECANCELED) return;  // closing
    if (status < 0) {
      finish(c, false);
      return;
    }
    if (c->chunk_waiting && uv_stream_get_write_queue_size(stream(c)) < HttpServer::kWriteLowWater) {
      c->chunk_waiting = false;
      sched(c).complete_yield(c->pid, c->chunk_tag, CallResultWriter().boolean(true).finish());
    }
  }

  // ---- the timer: a request's deadline, an idle keep-alive's, a lingering close's
  static void set_timer(Conn* c, TimerMode mode) {
    if (c->timer_mode == mode || (c->closing && mode != TimerMode::Linger)) return;
    const TimerMode was = c->timer_mode;
    c->timer_mode = mode;
    std::uint64_t ms = 0;
    switch (mode) {
      case TimerMode::None: uv_timer_stop(&c->timer); return;
      case TimerMode::Request: ms = c->limits.request_timeout_ms; break;
      case TimerMode::Idle:
        ms = c->limits.keepalive_timeout_ms;
        // Idle since it hibernated: the keep-alive counts from the last request.
        if (was == TimerMode::Hibernate) ms = ms > c->limits.hibernate_ms ? ms - c->limits.hibernate_ms : 1;
        break;
      case TimerMode::Hibernate: ms = c->limits.hibernate_ms; break;
      case TimerMode::Linger: ms = c->shut ? 2000 : 10000; break;
    }
    uv_timer_start(&c->timer, on_timer, ms, 0);
  }
  static void on_timer(uv_timer_t* t) {
    Conn* c = static_cast<Conn*>(t->data);
    const TimerMode mode = c->timer_mode;
    c->timer_mode = TimerMode::None;
    switch (mode) {
      case TimerMode::Request: {  // too slow: 408, then closed
        if (c->in_flight) {  // a streamed body that stopped coming: its read fails
          c->stream_error = "timeout";
          c->streaming = false;
          c->no_more = true;
          c->in_message = false;
          c->keep_alive = false;  // closed once answered
          stop_reading(c);
          body_news(c);
          return;
        }
        if (c->discarding) {  // the unread rest of an answered body stopped coming
          finish(c, true);
          return;
        }
        Request late;
        late.error = 408;
        c->ready.push_back(std::move(late));
        c->no_more = true;
        c->in_message = false;
        stop_reading(c);
        serve(c);
        return;
      }
      case TimerMode::Idle: finish(c, true); return;
      case TimerMode::Hibernate:
        c->timer_mode = TimerMode::Hibernate;  // so that Idle counts what passed
        if (c->waiting && c->ready.empty() && !c->in_message) detach_process(c);
        serve(c);
        return;
      case TimerMode::Linger: close_handles(c); return;
      case TimerMode::None: return;
    }
  }

  // ---- handing requests over
  static std::string encode(Conn* c, Request& r) {
    http_parser_url u;
    http_parser_url_init(&u);
    std::string path = "/", query_text;
    if (r.url == "*") {
      path = "*";
    } else if (r.url[0] == '/') {
      // The usual form, split here: http_parser_url holds offsets in 16
      // bits, so a longer URL (a long query) would come out cut.
      const std::string_view u = std::string_view(r.url).substr(0, r.url.find('#'));
      const std::size_t q = u.find('?');
      path = percent_decode(u.substr(0, q), false);
      if (q != std::string_view::npos) query_text.assign(u.substr(q + 1));
    } else if (http_parser_parse_url(r.url.data(), r.url.size(), r.method == "CONNECT", &u) == 0) {
      if (u.field_set & (1 << UF_PATH)) path = percent_decode({r.url.data() + u.field_data[UF_PATH].off, u.field_data[UF_PATH].len}, false);
      if (u.field_set & (1 << UF_QUERY)) query_text.assign(r.url.data() + u.field_data[UF_QUERY].off, u.field_data[UF_QUERY].len);
    }
    // A header given more than once is one value, joined as RFC 9110
    // allows (cookies with "; ").
    std::vector<std::pair<std::string, std::string>> headers;
    // A name's place in headers; the views are of r.headers' names, which
    // stay where they are.
    std::unordered_map<std::string_view, std::size_t, NameHash> at;
    at.reserve(r.headers.size());
    for (auto& [name, value] : r.headers) {
      const auto [it, fresh] = at.try_emplace(std::string_view(name), headers.size());
      if (fresh) {
        headers.emplace_back(name, std::move(value));
      } else {
        std::string& joined = headers[it->second].second;
        joined += name == "cookie" ? "; " : ", ";
        joined += value;
      }
    }
    const auto query = parse_query(query_text);
    CallResultWriter w;
    w.table(0, r.streamed ? 6 : 7);
    w.key("method").string(r.method);
    w.key("path").string(path);
    w.key("query").table(0, query.size());
    for (const auto& [k, vs] : query) {
      w.key(k);
      if (vs.size() == 1) {
        w.string(vs[0]);
      } else {
        w.table(vs.size(), 0);
        for (const auto& v : vs) w.string(v);
      }
    }
    w.key("headers").table(0, headers.size());
    for (const auto& [name, value] : headers) w.key(name).string(value);
    if (!r.streamed) w.key("body").string(r.body);
    w.key("remote").string(c->remote);
    w.key("version").string(r.minor == 0 ? "1.0" : "1.1");
    return w.finish();
  }

  // Moves the connection on: hands the next request to a waiting process,
  // writes an error response owed, closes a connection that is done, and
  // keeps the timer and reading right.
  static void serve(Conn* c) {
    if (c->closing || c->shut || c->in_flight) return;
    if (c->ready.empty()) {
      if (c->draining || (c->no_more && !c->in_message) || c->eof) {
        finish(c, true);
        return;
      }
      if (c->in_message || c->served == 0)
        set_timer(c, TimerMode::Request);
      else if (c->waiting && c->limits.hibernate_ms != 0 && c->limits.hibernate_ms < c->limits.keepalive_timeout_ms)
        set_timer(c, TimerMode::Hibernate);
      else
        set_timer(c, TimerMode::Idle);
      if (may_read(c)) start_reading(c);
      else stop_reading(c);
      return;
    }
    if (c->draining) {
      finish(c, true);
      return;
    }
    Request& head = c->ready.front();
    if (head.error) {
      write_bytes(c, error_response(head.error));
      c->ready.clear();
      finish(c, true);
      return;
    }
    set_timer(c, TimerMode::None);
    if (!c->pid.valid() && !start_process(c)) {  // 503, then closed
      serve(c);
      return;
    }
    if (c->waiting) {
      Request r = std::move(head);
      c->ready.pop_front();
      c->waiting = false;
      c->in_flight = true;
      c->responding_head = r.head;
      c->keep_alive = r.keep_alive;
      c->minor = r.minor;
      c->flight_streamed = r.streamed;
      c->head_written = false;
      ++c->served;
      sched(c).complete_yield(c->pid, c->wait_tag, encode(c, r));
    }
    if (may_read(c))
      start_reading(c);
    else
      stop_reading(c);
  }

  // The request in flight is answered: wait for the next, or close.
  static void answered(Conn* c, std::uint64_t tag) {
    if (c->closing) {  // the client went away meanwhile
      sched(c).complete_yield(c->pid, tag, ended());
      return;
    }
    c->in_flight = false;
    c->head_written = false;
    if (c->body_waiting) {  // another coroutine still reading the body it answered
      c->body_waiting = false;
      sched(c).complete_yield(c->pid, c->body_tag, CallResultWriter().nil().string("closed").finish());
    }
    if (c->flight_streamed) {  // what the handler did not read of its body is dropped as it comes
      c->flight_streamed = false;
      c->stream_buf.clear();
      if (c->streaming) c->discarding = true;
    }
    c->waiting = true;
    c->wait_tag = tag;
    if (!c->keep_alive) {  // its response said Connection: close: what else was sent goes unanswered
      c->ready.clear();
      finish(c, true);
      return;
    }
    serve(c);
  }

  // ---- responses
  // The head of a response from the handler's status and headers; throws
  // CallError on a status or header that cannot be written.
  static std::string response_head(Conn* c, const CallValue& status_v, const CallValue& headers_v, long long length,
                                    bool chunked, bool* close_after) {
    if (!status_v.is_number() || !(status_v.number >= 200 && status_v.number <= 999) ||
        status_v.number != static_cast<int>(status_v.number))
      fail("invalid: status " + (status_v.is_number() ? number_text(status_v.number) : std::string("not a number")) +
           " (an integer from 200 to 999)");
    const int status = static_cast<int>(status_v.number);
    const bool no_body = status == 204 || status == 304;
    std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason(status) + "\r\n";
    bool has_date = false;
    bool asked_close = false;
    auto add = [&](const std::string& name, const CallValue& v) {
      std::string text;
      if (v.is_string())
        text = v.string;
      else if (v.is_number())
        text = number_text(v.number);
      else
        fail("invalid: header '" + name + "' has a value that is not a string or number");
      if (!is_field_value(text)) fail("invalid: header '" + name + "' holds CR, LF or NUL");
      out += name;
      out += ": ";
      out += text;
      out += "\r\n";
    };
    if (headers_v.is_table()) {
      if (!headers_v.array.empty()) fail("invalid: headers must be a table of names to values");
      for (const auto& [k, v] : headers_v.fields) {
        if (!k.is_string() || !is_token(k.string))
          fail("invalid: header name " + (k.is_string() ? "'" + k.string + "'" : std::string("not a string")) +
               " (letters, digits and !#$%&'*+-.^_`|~)");
        const std::string name = lower(k.string);
        // The host frames the body itself.
        if (name == "content-length" || name == "transfer-encoding") continue;
        if (name == "date") has_date = true;
        if (name == "connection") {
          if (v.is_string() && iequals(v.string, "close")) asked_close = true;
          continue;
        }
        if (v.is_table()) {
          if (!v.fields.empty()) fail("invalid: header '" + k.string + "' has a table value that is not a list");
          for (const auto& item : v.array) add(k.string, item);
        } else {
          add(k.string, v);
        }
      }
    } else if (!headers_v.is_nil()) {
      fail("invalid: headers must be a table");
    }
    if (!has_date) out += date_header();
    // A stream to an HTTP/1.0 client, which knows no chunks, is ended by
    // the close.
    const bool raw = chunked && c->minor == 0;
    if (!no_body) {
      if (raw) {
      } else if (chunked) {
        out += "Transfer-Encoding: chunked\r\n";
      } else {
        out += "Content-Length: " + std::to_string(length) + "\r\n";
      }
    }
    // Closed after it: asked for, the request's own (HTTP/1.0, close, an
    // upgrade), the server closing, or the client done sending with
    // nothing more queued.
    *close_after = asked_close || raw || !c->keep_alive || c->draining || c->flight_streamed ||
                   (c->eof && c->ready.empty() && !c->in_message);
    if (*close_after)
      out += "Connection: close\r\n";
    else if (c->minor == 0)
      out += "Connection: keep-alive\r\n";
    out += "\r\n";
    return out;
  }

  static void respond(Conn* c, std::uint64_t tag, const std::vector<CallValue>& args) {
    // args: "respond", conn, status, headers, body (a string, or nil), stream
    const bool stream_body = arg(args, 5).type == CallValue::Type::Boolean && arg(args, 5).boolean;
    const CallValue& body = arg(args, 4);
    if (!body.is_nil() && !body.is_string()) fail("invalid: body must be a string");
    bool close_after = false;
    std::string out = response_head(c, arg(args, 2), arg(args, 3), static_cast<long long>(body.string.size()),
                                    stream_body, &close_after);
    const int status = static_cast<int>(arg(args, 2).number);  // checked by response_head
    if (close_after) c->keep_alive = false;
    c->no_body = c->responding_head || status == 204 || status == 304;
    c->raw_stream = stream_body && c->minor == 0;
    if (!c->no_body) out += body.string;
    write_bytes(c, std::move(out));
    if (stream_body) {
      c->head_written = true;
      sched(c).complete_yield(c->pid, tag, CallResultWriter().boolean(true).finish());
      return;
    }
    answered(c, tag);
  }

  static void chunk(Conn* c, std::uint64_t tag, const CallValue& data) {
    if (!data.is_string()) fail("invalid: a body chunk must be a string");
    if (!c->no_body && !data.string.empty() && c->raw_stream) {
      write_bytes(c, data.string);
    } else if (!c->no_body && !data.string.empty()) {
      char size[32];
      std::snprintf(size, sizeof size, "%zx\r\n", data.string.size());
      std::string out = size;
      out += data.string;
      out += "\r\n";
      write_bytes(c, std::move(out));
    }
    if (c->closing) {  // the write failed: the client is gone
      sched(c).complete_yield(c->pid, tag, {}, "closed");
      return;
    }
    if (uv_stream_get_write_queue_size(stream(c)) >= HttpServer::kWriteLowWater) {
      c->chunk_waiting = true;
      c->chunk_tag = tag;
      return;
    }
    sched(c).complete_yield(c->pid, tag, CallResultWriter().boolean(true).finish());
  }

  // ---- accepting
  static void on_connection(uv_stream_t* st, int status) {
    Server* srv = static_cast<Server*>(st->data);
    if (status < 0) {
      log::logger().debug("http: accept failed: {}", uv_strerror(status));
      return;
    }
    HttpServer* svc = srv->svc;
    auto* c = new Conn;
    c->svc = svc;
    c->id = ++svc->next_id_;
    c->limits = srv->limits;
    c->internal = srv->internal;
    uv_tcp_init(st->loop, &c->tcp);
    uv_timer_init(st->loop, &c->timer);
    c->tcp.data = c;
    c->timer.data = c;
    c->open_handles = 2;
    if (uv_accept(st, stream(c)) != 0) {
      c->closing = true;
      close_handles(c);
      return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    c->remote = peer_text(&c->tcp);
    if (c->limits.tls) c->tls = std::make_unique<TlsSession>(c->limits.tls);
    http_parser_init(&c->parser, HTTP_REQUEST);
    c->parser.data = c;
    svc->conns_.emplace(c->id, c);
    svc->conn_count_.fetch_add(1, std::memory_order_relaxed);
    c->server = srv;
    srv->conns.insert(c);
    // Past the limit the client is told 503 and the connection closes.
    // Else its process starts with its first request (start_process).
    if (srv->conns.size() > srv->limits.max_connections) refuse(c);
    serve(c);
  }

  static void refuse(Conn* c) {
    Request busy;
    busy.error = 503;
    c->ready.clear();
    c->ready.push_back(std::move(busy));
    c->no_more = true;
  }

  // A process for the connection, to serve the requests queued: false
  // (and a 503 queued) when none can be made.
  static bool start_process(Conn* c) {
    HttpServer* svc = c->svc;
    CallResultWriter args;
    args.number(static_cast<double>(c->id)).string(c->limits.entries->second);
    if (c->internal) args.string(c->limits.bound);
    SpawnResult r = svc->spawn_(c->limits.entries->first, args.finish());
    if (!r) {
      log::logger().warn("http: cannot start a process for a connection from {}: {}", c->remote, r.error);
      refuse(c);
      return false;
    }
    c->pid = r.pid;
    if (c->internal) {  // counted until it exits (close_owned)
      std::lock_guard lock(svc->owners_mu_);
      svc->internal_pids_.insert(c->pid);
      svc->internal_processes_.store(svc->internal_pids_.size(), std::memory_order_relaxed);
    }
    svc->owned_[c->pid].push_back(c->id);
    svc->note_owner(c->pid, 1);
    // It ended already (its exit hook may have missed it).
    if (!svc->scheduler_.alive(c->pid)) {
      if (c->internal) {
        std::lock_guard lock(svc->owners_mu_);
        svc->internal_pids_.erase(c->pid);
        svc->internal_processes_.store(svc->internal_pids_.size(), std::memory_order_relaxed);
      }
      process_ended(c);
      return false;
    }
    return true;
  }

  // An idle keep-alive connection's process is let go (it returns from
  // its wait with no request, and ends); the next request starts another.
  static void detach_process(Conn* c) {
    HttpServer* svc = c->svc;
    const Pid pid = c->pid;
    c->waiting = false;
    c->pid = Pid{};
    auto it = svc->owned_.find(pid);
    if (it != svc->owned_.end()) {
      std::erase(it->second, c->id);
      if (it->second.empty()) svc->owned_.erase(it);
    }
    svc->note_owner(pid, -1);
    sched(c).complete_yield(pid, c->wait_tag, ended());
  }

  // ---- closing
  static void close_handles(Conn* c) {
    if (uv_is_closing(reinterpret_cast<uv_handle_t*>(&c->tcp))) return;
    auto on_closed = [](uv_handle_t* h) {
      Conn* conn = static_cast<Conn*>(h->data);
      if (--conn->open_handles == 0) delete conn;
    };
    uv_timer_stop(&c->timer);
    uv_close(reinterpret_cast<uv_handle_t*>(&c->timer), on_closed);
    uv_close(reinterpret_cast<uv_handle_t*>(&c->tcp), on_closed);
  }
  // Out of the tables: a process waiting on it is told it ended. Graceful:
  // what is queued to write is written, the write side shut, and what the
  // client still sends read and dropped for a moment (closing at once with
  // unread bytes would reset the connection and could lose the response
  // at the client); otherwise closed at once.
  static void finish(Conn* c, bool graceful) {
    if (c->closing) {
      if (!graceful) close_handles(c);
      return;
    }
    if (graceful && c->tls && c->tls->state() == TlsSession::State::Open) {  // its close_notify
      c->tls->close();
      flush_tls(c);
      if (c->closing) return;  // the write failed: closed already
    }
    c->closing = true;
    c->no_more = true;
    stop_reading(c);  // (a graceful close reads again, to drop what comes, once its write side is shut)
    c->ready.clear();
    c->stream_buf.clear();
    HttpServer* svc = c->svc;
    if (c->waiting) sched(c).complete_yield(c->pid, c->wait_tag, ended());
    if (c->chunk_waiting) sched(c).complete_yield(c->pid, c->chunk_tag, {}, "closed");
    if (c->body_waiting) sched(c).complete_yield(c->pid, c->body_tag, CallResultWriter().nil().string("closed").finish());
    c->waiting = c->chunk_waiting = c->body_waiting = false;
    svc->conns_.erase(c->id);
    svc->conn_count_.fetch_sub(1, std::memory_order_relaxed);
    if (c->server) c->server->conns.erase(c);
    c->server = nullptr;
    if (c->pid.valid()) {
      auto it = svc->owned_.find(c->pid);
      if (it != svc->owned_.end()) {
        std::erase(it->second, c->id);
        if (it->second.empty()) svc->owned_.erase(it);
      }
      svc->note_owner(c->pid, -1);
    }
    if (!graceful) {
      close_handles(c);
      return;
    }
    // A client that reads nothing of what is queued holds it at most this
    // long.
    set_timer(c, TimerMode::Linger);
    if (uv_shutdown(&c->shutdown, stream(c), [](uv_shutdown_t* req, int status) {
          Conn* conn = static_cast<Conn*>(req->handle->data);
          if (status < 0 || conn->eof) {
            close_handles(conn);
            return;
          }
          conn->shut = true;
          conn->timer_mode = TimerMode::None;
          set_timer(conn, TimerMode::Linger);
          conn->reading = false;
          start_lingering_read(conn);
        }) != 0)
      close_handles(c);
  }
  static void start_lingering_read(Conn* c) {
    if (uv_read_start(stream(c), on_alloc, on_read) == 0) c->reading = true;
  }

  static void close_server(Server* srv) {
    if (srv->closed) return;
    srv->closed = true;
    HttpServer* svc = srv->svc;
    svc->servers_.erase(srv->id);
    svc->server_count_.fetch_sub(1, std::memory_order_relaxed);
    if (srv->owner.valid()) {
      auto it = svc->owned_.find(srv->owner);
      if (it != svc->owned_.end()) {
        std::erase(it->second, srv->id);
        if (it->second.empty()) svc->owned_.erase(it);
      }
      svc->note_owner(srv->owner, -1);
    }
    // Connections finish the request they serve, then close.
    const auto conns = srv->conns;
    for (Conn* c : conns) {
      c->draining = true;
      c->server = nullptr;
      serve(c);
    }
    srv->conns.clear();
    uv_close(reinterpret_cast<uv_handle_t*>(&srv->tcp), [](uv_handle_t* h) { delete static_cast<Server*>(h->data); });
  }

  // The process behind a connection ended: a request it was answering is
  // answered 500 (when nothing of its response went out yet).
  static void process_ended(Conn* c) {
    if (c->in_flight && !c->head_written) write_bytes(c, error_response(500));
    c->in_flight = false;
    c->ready.clear();
    c->waiting = false;
    c->chunk_waiting = false;
    c->body_waiting = false;
    finish(c, true);
  }

  // ---- serve's listener
  static std::string listen(HttpServer* svc, uv_loop_t* loop, const Pid& owner, const std::vector<CallValue>& args,
                            const std::string& conn_entry = HttpServer::kConnEntry) {
    // args: "serve", host, port, entry, opts
    const std::string& host = arg(args, 1).string;
    const double port_v = arg(args, 2).is_number() ? arg(args, 2).number : -1;
    const int port = port_v >= 0 && port_v <= 65535 ? static_cast<int>(port_v) : -1;
    const std::string& entry = arg(args, 3).string;
    if (port < 0 || port > 65535) fail("invalid: port must be from 0 to 65535");
    const std::string module = entry.substr(0, entry.find(':'));
    if (entry.empty() || module.empty()) fail("invalid: entry must be \"module\" or \"module:method\"");
    if (svc->module_exists_ && !svc->module_exists_(module))
      fail("not_found: no module '" + module + "' in the script directory or stdlib (entry '" + entry + "')");
    Limits lim;
    const CallValue& opts = arg(args, 4);
    auto size_opt = [&](const char* name, std::size_t& out) {
      if (const CallValue* v = opts.field(name)) {
        if (!v->is_number() || !(v->number >= 1 && v->number < 1e15))
          fail(std::string("invalid: opts.") + name + " must be a positive number");
        out = static_cast<std::size_t>(v->number);
      }
    };
    auto secs_opt = [&](const char* name, std::uint64_t& out) {
      if (const CallValue* v = opts.field(name)) {
        if (!v->is_number() || !(v->number > 0 && v->number < 1e9))
          fail(std::string("invalid: opts.") + name + " must be a positive number of seconds");
        out = static_cast<std::uint64_t>(v->number * 1000.0 + 0.5);
        if (out == 0) out = 1;
      }
    };
    size_opt("max_header_bytes", lim.max_header_bytes);
    size_opt("max_body_bytes", lim.max_body_bytes);
    size_opt("max_connections", lim.max_connections);
    size_opt("buffer_body_bytes", lim.buffer_body_bytes);
    secs_opt("request_timeout", lim.request_timeout_ms);
    secs_opt("keepalive_timeout", lim.keepalive_timeout_ms);
    if (const CallValue* tls = opts.field("tls"); tls && tls->is_table()) {
      const CallValue* cert = tls->field("cert");
      const CallValue* key = tls->field("key");
      if (!cert || !cert->is_string() || !key || !key->is_string())
        fail("invalid: opts.tls needs cert and key, the PEM files of the server's certificate chain and key");
      TlsContext::Options o;
      o.server = true;
      o.verify = false;
      o.cert_file = cert->string;
      o.key_file = key->string;
      // Their contents, read by the calling process (stdlib/http/server.lua):
      // this thread opens no file.
      const CallValue* cert_pem = tls->field("cert_pem");
      const CallValue* key_pem = tls->field("key_pem");
      if (!cert_pem || !cert_pem->is_string() || !key_pem || !key_pem->is_string())
        fail("invalid: opts.tls needs cert_pem and key_pem, the files' contents");
      o.in_memory = true;
      o.cert_pem = cert_pem->string;
      o.key_pem = key_pem->string;
      std::string err;
      lim.tls = TlsContext::make(o, &err);
      if (!lim.tls) fail(err);
    }
    if (const CallValue* v = opts.field("hibernate_after")) {
      if (v->type == CallValue::Type::Boolean && !v->boolean)
        lim.hibernate_ms = 0;
      else
        secs_opt("hibernate_after", lim.hibernate_ms);
    }

    sockaddr_storage ss{};
    std::string h = host.empty() || host == "*" ? "0.0.0.0" : host == "localhost" ? "127.0.0.1" : host;
    if (uv_ip4_addr(h.c_str(), port, reinterpret_cast<sockaddr_in*>(&ss)) != 0 &&
        uv_ip6_addr(h.c_str(), port, reinterpret_cast<sockaddr_in6*>(&ss)) != 0)
      fail("invalid: address '" + host + "' (a numeric IPv4 or IPv6 address, or localhost)");
    auto* srv = new Server;
    srv->svc = svc;
    srv->owner = owner;
    lim.entries = std::make_shared<const std::pair<std::string, std::string>>(conn_entry, entry);
    srv->internal = !owner.valid();
    srv->limits = lim;
    uv_tcp_init(loop, &srv->tcp);
    srv->tcp.data = srv;
    int rc = uv_tcp_bind(&srv->tcp, reinterpret_cast<const sockaddr*>(&ss), 0);
    if (rc == 0) rc = uv_listen(reinterpret_cast<uv_stream_t*>(&srv->tcp), 1024, on_connection);
    if (rc != 0) {
      uv_close(reinterpret_cast<uv_handle_t*>(&srv->tcp), [](uv_handle_t* hd) { delete static_cast<Server*>(hd->data); });
      fail(bind_error(rc) + " (" + host + ":" + std::to_string(port) + ")");
    }
    sockaddr_storage bound{};
    int len = sizeof bound;
    uv_tcp_getsockname(&srv->tcp, reinterpret_cast<sockaddr*>(&bound), &len);
    const std::string address = address_text(bound);
    if (srv->internal) srv->limits.bound = address;
    srv->id = ++svc->next_id_;
    svc->servers_.emplace(srv->id, srv);
    svc->server_count_.fetch_add(1, std::memory_order_relaxed);
    if (!owner.valid()) return address;  // the host's own (serve_internal)
    svc->owned_[owner].push_back(srv->id);
    svc->note_owner(owner, 1);
    if (!svc->scheduler_.alive(owner)) {  // ended while this call came: its exit hook may have missed it
      close_server(srv);
      return {};
    }
    return CallResultWriter().number(static_cast<double>(srv->id)).string(address).finish();
  }
};

HttpServer::HttpServer(Scheduler& scheduler, IoLoop& loop) : scheduler_(scheduler), loop_(loop) {
  // The servers' own limit (max_header_bytes) governs; http-parser's
  // compiled-in bound (80 KB) would otherwise cap it.
  http_parser_set_max_header_size(UINT32_MAX / 2);
  loop_.on_stop([this](uv_loop_t*) { stop_all(); });
}

HttpServer::~HttpServer() = default;

std::string HttpServer::serve_internal(const std::string& host, int port, const std::string& conn_entry,
                                       const std::string& entry) {
  auto done = std::make_shared<std::promise<std::pair<bool, std::string>>>();
  auto answer = done->get_future();
  std::vector<CallValue> args(5);
  args[0].type = args[1].type = args[3].type = CallValue::Type::String;
  args[0].string = "serve";
  args[1].string = host;
  args[2].type = CallValue::Type::Number;
  args[2].number = port;
  args[3].string = entry;
  if (!loop_.post([this, args = std::move(args), conn_entry, done](uv_loop_t* loop) {
        try {
          done->set_value({true, HttpOps::listen(this, loop, Pid{}, args, conn_entry)});
        } catch (const CallError& e) {
          done->set_value({false, e.text});
        }
      }))
    throw CallError{"closed: the I/O thread has stopped"};
  auto [ok, text] = answer.get();
  if (!ok) throw CallError{text};
  return text;
}

void HttpServer::dispatch(CommandRequest&& req) {
  std::vector<CallValue> args;
  if (!read_call_request(req, args)) return;
  const Pid pid = req.pid;
  const std::uint64_t tag = req.tag;
  if (!loop_.post([this, pid, tag, a = std::move(args)](uv_loop_t* loop) mutable { run_op(loop, pid, tag, std::move(a)); }))
    scheduler_.complete_yield(pid, tag, {}, "closed");
}

void HttpServer::run_op(uv_loop_t* loop, const Pid& caller, std::uint64_t tag, std::vector<CallValue> args) {
  using Ops = HttpOps;
  try {
    const std::string& op = arg(args, 0).string;
    if (op == "serve") {
      std::string result = Ops::listen(this, loop, caller, args);
      if (!result.empty()) scheduler_.complete_yield(caller, tag, std::move(result));
      return;
    }
    if (op == "close") {
      const double id = arg(args, 1).number;
      auto it = id >= 1 && id < 9.0e15 ? servers_.find(static_cast<std::uint64_t>(id)) : servers_.end();
      // Ids are small and counted up: only the process that made a server
      // may close it (the host's own servers have no such process).
      if (it != servers_.end() && it->second->owner != caller)
        fail("denied: server " + number_text(id) + " belongs to another process");
      if (it != servers_.end()) Ops::close_server(it->second);
      scheduler_.complete_yield(caller, tag, CallResultWriter().boolean(true).finish());
      return;
    }
    // Calls on a connection, from the process serving it. A connection
    // that is gone (the client left, the server closed) ends the process's
    // loop: no values.
    const double id = arg(args, 1).number;
    auto it = id >= 1 && id < 9.0e15 ? conns_.find(static_cast<std::uint64_t>(id)) : conns_.end();
    Conn* c = it == conns_.end() ? nullptr : it->second;
    if (!c || c->pid != caller) {
      if (op == "chunk" || op == "body")
        scheduler_.complete_yield(caller, tag, {}, "closed");
      else
        scheduler_.complete_yield(caller, tag, ended());
      return;
    }
    if (op == "next") {
      if (c->waiting || c->in_flight) fail("invalid: a request is already being served on this connection");
      c->waiting = true;
      c->wait_tag = tag;
      Ops::serve(c);
      return;
    }
    if (op == "respond") {
      if (!c->in_flight || c->head_written) fail("invalid: no request waits for a response on this connection");
      Ops::respond(c, tag, args);
      return;
    }
    if (op == "chunk") {
      if (!c->in_flight || !c->head_written) fail("invalid: no streamed response is open on this connection");
      Ops::chunk(c, tag, arg(args, 2));
      return;
    }
    if (op == "body") {
      if (!c->in_flight || !c->flight_streamed || c->body_waiting) {
        scheduler_.complete_yield(caller, tag, ended());
        return;
      }
      if (c->stream_buf.empty() && !c->stream_done && c->stream_error.empty()) {
        c->body_waiting = true;
        c->body_tag = tag;
        Ops::set_timer(c, TimerMode::Request);  // a body that stops coming fails the read
        return;
      }
      scheduler_.complete_yield(caller, tag, Ops::take_body(c));
      if (Ops::may_read(c) && !c->no_more) Ops::start_reading(c);
      return;
    }
    if (op == "finish") {
      if (!c->in_flight || !c->head_written) fail("invalid: no streamed response is open on this connection");
      if (!c->no_body && !c->raw_stream) Ops::write_bytes(c, "0\r\n\r\n");
      if (c->closing) {
        scheduler_.complete_yield(caller, tag, ended());
        return;
      }
      Ops::answered(c, tag);
      return;
    }
    fail("invalid: unknown http operation '" + op + "'");
  } catch (const CallError& e) {
    scheduler_.complete_yield(caller, tag, {}, e.text);
  }
}

void HttpServer::note_owner(const Pid& owner, int delta) {
  std::lock_guard lock(owners_mu_);
  int& n = owners_[owner];
  n += delta;
  if (n <= 0) owners_.erase(owner);
  any_owners_.store(!owners_.empty(), std::memory_order_release);
}

void HttpServer::close_owned(const Pid& owner) {
  // Every process's exit comes here; while nothing is served it takes no
  // lock.
  if (internal_processes_.load(std::memory_order_relaxed) != 0) {
    std::lock_guard lock(owners_mu_);
    if (internal_pids_.erase(owner)) internal_processes_.store(internal_pids_.size(), std::memory_order_relaxed);
  }
  if (!any_owners_.load(std::memory_order_acquire)) return;
  {
    std::lock_guard lock(owners_mu_);
    if (!owners_.count(owner)) return;
  }
  loop_.post([this, owner](uv_loop_t*) {
    auto it = owned_.find(owner);
    if (it == owned_.end()) return;
    const std::vector<std::uint64_t> ids = it->second;
    for (std::uint64_t id : ids) {
      if (auto s = servers_.find(id); s != servers_.end()) {
        HttpOps::close_server(s->second);
      } else if (auto c = conns_.find(id); c != conns_.end()) {
        HttpOps::process_ended(c->second);
      }
    }
  });
}

void HttpServer::stop_serving() {
  if (server_count_.load(std::memory_order_relaxed) == 0) return;  // (and no I/O thread started for it)
  loop_.post([this](uv_loop_t*) {
    std::vector<Server*> servers;
    for (auto& [id, s] : servers_) servers.push_back(s);
    for (Server* s : servers) HttpOps::close_server(s);
  });
}

void HttpServer::stop_all() {
  std::vector<Server*> servers;
  for (auto& [id, s] : servers_) servers.push_back(s);
  for (Server* s : servers) HttpOps::close_server(s);
  std::vector<Conn*> conns;
  for (auto& [id, c] : conns_) conns.push_back(c);
  for (Conn* c : conns) {
    c->waiting = c->chunk_waiting = false;  // the processes are ending with the host
    HttpOps::finish(c, false);
  }
}

}  // namespace host::io

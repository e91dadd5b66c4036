// HTTP/1.1 requests parsed where they are served (docs/ARCHITECTURE.md,
// "HTTP on the workers"): the distribution's http-parser behind a
// Lua-free class that a connection's process feeds with what its socket
// read (bindings/http_conn.cpp). What a bad client can do is bounded
// here, before any Lua runs: a request that does not parse queues as a
// 400 owed, headers over max_header_bytes as 431, a body over
// max_body_bytes as 413, a version other than 1.x as 505, an
// absolute-form URL over 64 KB as 414; nothing after such a request is
// parsed. A body over buffer_body_bytes is streamed: its request queues
// at once, its bytes follow in stream_buf. A head of the usual shape
// (a GET or HEAD with no body, take_plain) is read in one pass beside
// http-parser; anything else goes through http-parser.
//
// Also here, for the binding: the request's path and query split off its
// URL (a URL of the usual form is split by hand: http-parser holds
// offsets in 16 bits), its headers grouped by name through a hash keyed
// at random (no set of names can turn the grouping quadratic), the
// checks of a response's header names and values, and the responses the
// server writes by itself (error_response).
//
// Threads: one at a time (the connection's process's).
#pragma once

#include <http_parser.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace host::io {

// A server's limits (http.serve's opts).
struct HttpLimits {
  std::size_t max_header_bytes = 32 * 1024;
  std::size_t max_body_bytes = 1024 * 1024;
  // A body larger than this is streamed to the handler (req:read_body())
  // instead of arriving whole in req.body.
  std::size_t buffer_body_bytes = 1024 * 1024;
  double request_timeout = 30;    // seconds
  double keepalive_timeout = 60;  // seconds
  // An idle keep-alive connection gives its process up after this long
  // (0: never); its next request starts a new one.
  double hibernate_after = 0.1;
};

// A parsed request, or in its place an error response owed (error: 400,
// 408, 413, 414, 431, 503, 505), after which the connection closes.
struct HttpRequest {
  int error = 0;
  bool keep_alive = true;
  bool head = false;
  bool streamed = false;  // its body follows in the parser's stream_buf
  unsigned short minor = 1;
  std::string method, url, body;
  std::vector<std::pair<std::string, std::string>> headers;  // names in lower case, in order
};

class HttpRequestParser {
 public:
  explicit HttpRequestParser(const HttpLimits& limits);
  HttpRequestParser(const HttpRequestParser&) = delete;
  HttpRequestParser& operator=(const HttpRequestParser&) = delete;

  // Feeds what came; n == 0: the client closed its side. Parsed requests
  // (and an error owed) queue in ready.
  void feed(const char* data, std::size_t n);
  // The client sent all it will: a message cut off is never answered, a
  // streamed body ends with "closed".
  void ended();

  std::vector<HttpRequest> ready;  // in order; front() is the next to serve
  bool no_more = false;     // parse nothing more (an error owed, a close asked, a streamed body)
  bool in_message = false;  // some of a request has come, not all
  // A request began since the caller last cleared it (the request
  // timeout counts from here).
  bool began = false;
  // "100 Continue" owed: the caller writes it, then clears it. The
  // caller sets answering while a request is being answered (it is then
  // not owed: the client sends after its own wait).
  bool continue_owed = false;
  bool answering = false;

  // A streamed body: its bytes not yet taken, whether all came, why it
  // ended early ("too_large: ...", "closed", "timeout", "invalid: ...").
  bool streaming = false;
  bool stream_done = false;
  bool discarding = false;  // answered before it was read: the rest is dropped
  std::string stream_buf;
  std::string stream_error;
  std::size_t stream_total = 0;

  const HttpLimits& limits() const { return limits_; }

 private:
  // The differential test (tests/test_http_request_parser.cpp) calls
  // take_plain alone, to see which heads it takes: no counter on the
  // served path.
  friend struct HttpRequestParserProbe;

  static const http_parser_settings& settings();
  static HttpRequestParser* of(http_parser* p) { return static_cast<HttpRequestParser*>(p->data); }
  static int on_message_begin(http_parser* p);
  static int on_url(http_parser* p, const char* at, std::size_t n);
  static int on_header_field(http_parser* p, const char* at, std::size_t n);
  static int on_header_value(http_parser* p, const char* at, std::size_t n);
  static int on_headers_complete(http_parser* p);
  static int on_body(http_parser* p, const char* at, std::size_t n);
  static int on_message_complete(http_parser* p);
  std::size_t take_plain(const char* data, std::size_t n);
  bool count_header(std::size_t n);
  void end_header();
  void begin_stream();

  HttpLimits limits_;
  http_parser parser_{};
  HttpRequest cur_;
  bool new_header_ = true;   // the next header-name bytes start a header
  bool in_trailers_ = false; // past the head: header lines now are a chunked body's trailers
  std::size_t header_bytes_ = 0;
  int parse_error_ = 0;      // a limit a callback hit: the response it owes
};

// The request's path (percent-decoded) and query ("a=1&b=2&b=3" as its
// keys in order, a key given more than once with all its values).
using HttpQuery = std::vector<std::pair<std::string, std::vector<std::string>>>;
void split_target(const HttpRequest& r, std::string* path, HttpQuery* query);
// r.headers with a header given more than once made one value, joined as
// RFC 9110 allows (cookies with "; "), in the order of each name's first.
void group_headers(HttpRequest& r);

// RFC 9110's token characters, which a header name is made of.
bool is_token(std::string_view s);
// A header value may not hold CR, LF or NUL (response splitting).
bool is_field_value(std::string_view s);
std::string lower(std::string s);
bool iequals(std::string_view a, std::string_view b);
// The status's reason phrase ("" for one http-parser does not know).
const char* reason(int status);
// "HTTP/1.1 200 OK\r\n": made once for each status from 200 to 999, each
// call for another (valid until the next such call on the thread).
const std::string& status_line(int status);
// "Date: ...\r\n", made once a second.
const std::string& date_header();
// A response the server writes by itself (a request that never reaches
// a handler, or whose handler's process ended): Connection: close.
std::string error_response(int status);

}  // namespace host::io

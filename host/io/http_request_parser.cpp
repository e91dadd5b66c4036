// HTTP requests parsed where they are served (http_request_parser.hpp).
#include "host/io/http_request_parser.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
#include <unordered_map>

namespace host::io {
namespace {

int hex_digit(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

// %XX escapes decoded (and '+' as a space in a query); a malformed escape
// stays as it is.
std::string percent_decode(std::string_view s, bool plus_is_space) {
  // The usual path has nothing to decode: copied whole, not a byte at a time.
  if (s.find('%') == std::string_view::npos && !(plus_is_space && s.find('+') != std::string_view::npos))
    return std::string(s);
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
  if (q.empty()) return out;
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

}  // namespace

namespace {

// ASCII only, by table: std::tolower and std::isalnum are calls into the
// C library (its locale) for each character, and these run over each
// response header's name.
constexpr char ascii_lower(char ch) { return ch >= 'A' && ch <= 'Z' ? static_cast<char>(ch - 'A' + 'a') : ch; }

// RFC 9110's token characters (tchar).
constexpr bool is_tchar(unsigned char ch) {
  return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
         (ch != 0 && std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(ch)) != std::string_view::npos);
}

struct TokenTable {
  bool ok[256] = {};
  constexpr TokenTable() {
    for (int i = 0; i < 256; ++i) ok[i] = is_tchar(static_cast<unsigned char>(i));
  }
};
constexpr TokenTable kToken;

}  // namespace

std::string lower(std::string s) {
  for (char& ch : s) ch = ascii_lower(ch);
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (ascii_lower(a[i]) != ascii_lower(b[i])) return false;
  return true;
}

bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (unsigned char ch : s)
    if (!kToken.ok[ch]) return false;
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

// Made once for each status a handler may give, rather than from their
// parts for each response.
const std::string& status_line(int status) {
  static const std::vector<std::string> lines = [] {
    std::vector<std::string> v;
    v.reserve(800);
    for (int s = 200; s <= 999; ++s) v.push_back("HTTP/1.1 " + std::to_string(s) + " " + reason(s) + "\r\n");
    return v;
  }();
  if (status >= 200 && status <= 999) return lines[static_cast<std::size_t>(status - 200)];
  // Outside what a handler may give (http.error_response takes any
  // number): made each time, never read past the table.
  thread_local std::string other;
  other = "HTTP/1.1 " + std::to_string(status) + " " + reason(status) + "\r\n";
  return other;
}

// A response the loop writes by itself, for a request that never reaches
// a handler (or whose handler's process ended).
std::string error_response(int status) {
  const std::string body = std::string(reason(status)) + "\n";
  std::string out = status_line(status);
  out += date_header();
  out += "Content-Type: text/plain; charset=utf-8\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n";
  out += body;
  return out;
}


// ---- the parser

HttpRequestParser::HttpRequestParser(const HttpLimits& limits) : limits_(limits) {
  // The server's own limit (max_header_bytes) governs; http-parser's
  // compiled-in bound (80 KB) would otherwise cap it.
  static const bool unbounded = [] {
    http_parser_set_max_header_size(UINT32_MAX / 2);
    return true;
  }();
  (void)unbounded;
  http_parser_init(&parser_, HTTP_REQUEST);
  parser_.data = this;
}

const http_parser_settings& HttpRequestParser::settings() {
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

bool HttpRequestParser::count_header(std::size_t n) {
  header_bytes_ += n;
  if (header_bytes_ <= limits_.max_header_bytes) return true;
  parse_error_ = 431;
  return false;
}

// The last header's name in lower case, once it is complete.
void HttpRequestParser::end_header() {
  if (!cur_.headers.empty()) cur_.headers.back().first = lower(std::move(cur_.headers.back().first));
}

int HttpRequestParser::on_message_begin(http_parser* p) {
  HttpRequestParser* c = of(p);
  c->cur_ = HttpRequest{};
  c->header_bytes_ = 0;
  c->new_header_ = true;
  c->in_message = true;
  c->in_trailers_ = false;
  c->began = true;
  return 0;
}

int HttpRequestParser::on_url(http_parser* p, const char* at, std::size_t n) {
  HttpRequestParser* c = of(p);
  if (!c->count_header(n)) return 1;
  c->cur_.url.append(at, n);
  return 0;
}

int HttpRequestParser::on_header_field(http_parser* p, const char* at, std::size_t n) {
  HttpRequestParser* c = of(p);
  if (!c->count_header(n)) return 1;
  // http-parser lets a space into a name ("Content-Length : 5") and still
  // reads it as the header it names; a proxy in front may not, and the
  // two would then frame the body differently.
  if (std::memchr(at, ' ', n) != nullptr) {
    c->parse_error_ = 400;
    return 1;
  }
  // A chunked body's trailers are not the request's headers: a handler
  // must not find in req.headers what came after the body it read.
  if (c->in_trailers_) return 0;
  if (c->new_header_) {
    c->end_header();
    c->cur_.headers.emplace_back();
    c->new_header_ = false;
  }
  c->cur_.headers.back().first.append(at, n);
  return 0;
}

int HttpRequestParser::on_header_value(http_parser* p, const char* at, std::size_t n) {
  HttpRequestParser* c = of(p);
  if (!c->count_header(n)) return 1;
  if (c->in_trailers_) return 0;
  c->cur_.headers.back().second.append(at, n);
  c->new_header_ = true;
  return 0;
}

int HttpRequestParser::on_headers_complete(http_parser* p) {
  HttpRequestParser* c = of(p);
  c->end_header();
  c->new_header_ = true;
  c->in_trailers_ = true;
  HttpRequest& r = c->cur_;
  r.method = http_method_str(static_cast<enum http_method>(p->method));
  r.head = p->method == HTTP_HEAD;
  r.minor = p->http_minor;
  r.keep_alive = http_should_keep_alive(p) != 0;
  if (p->http_major != 1) {
    c->parse_error_ = 505;
    return -1;
  }
  // A URL in another form than "/path?query" is split by http-parser,
  // which holds offsets in 16 bits.
  if (r.url.size() > 65535 && r.url[0] != '/') {
    c->parse_error_ = 414;
    return -1;
  }
  // HTTP/1.1 requires one Host: a request without, or with two a proxy
  // and this server could each read differently, is refused.
  std::size_t hosts = 0;
  for (const auto& h : r.headers) hosts += h.first == "host";
  if (hosts > 1 || (hosts == 0 && p->http_minor >= 1)) {
    c->parse_error_ = 400;
    return -1;
  }
  if (p->content_length != ULLONG_MAX && p->content_length > c->limits_.max_body_bytes) {
    c->parse_error_ = 413;
    return -1;
  }
  // A client that asked to be told before it sends its body is told
  // now, when nothing is being answered before it (else it sends after
  // its own wait, as RFC 9110 lets it).
  if (p->http_minor >= 1 && !c->answering && c->ready.empty()) {
    for (const auto& [name, value] : r.headers)
      if (name == "expect" && iequals(value, "100-continue")) {
        c->continue_owed = true;
        break;
      }
  }
  if (p->content_length != ULLONG_MAX && p->content_length > c->limits_.buffer_body_bytes) c->begin_stream();
  return 0;
}

// The request being parsed goes to the queue now, its body to follow.
void HttpRequestParser::begin_stream() {
  streaming = true;
  stream_done = false;
  discarding = false;
  stream_error.clear();
  stream_buf = std::move(cur_.body);
  stream_total = stream_buf.size();
  cur_.body.clear();
  cur_.streamed = true;
  ready.push_back(std::move(cur_));
  cur_ = HttpRequest{};
}

int HttpRequestParser::on_body(http_parser* p, const char* at, std::size_t n) {
  HttpRequestParser* c = of(p);
  if (c->streaming) {
    c->stream_total += n;
    if (c->stream_total > c->limits_.max_body_bytes) {
      c->stream_error = "too_large: the body is over " + std::to_string(c->limits_.max_body_bytes) + " bytes";
      return 1;
    }
    if (!c->discarding) c->stream_buf.append(at, n);
    return 0;
  }
  if (c->cur_.body.size() + n > c->limits_.max_body_bytes) {
    c->parse_error_ = 413;
    return 1;
  }
  c->cur_.body.append(at, n);
  if (c->cur_.body.size() > c->limits_.buffer_body_bytes) c->begin_stream();  // a chunked body grew past it
  return 0;
}

int HttpRequestParser::on_message_complete(http_parser* p) {
  HttpRequestParser* c = of(p);
  c->in_message = false;
  c->in_trailers_ = false;
  if (c->streaming) {  // the streamed request is queued already (or answered)
    c->streaming = false;
    c->stream_done = true;
    c->discarding = false;
    // Nothing after a streamed request is parsed, and the connection
    // closes once it is answered (a client that pipelined after an upload
    // sends the rest again).
    c->no_more = true;
    for (HttpRequest& r : c->ready)
      if (r.streamed) r.keep_alive = false;
    http_parser_pause(p, 1);
    return 0;
  }
  c->ready.push_back(std::move(c->cur_));
  c->cur_ = HttpRequest{};
  if (p->upgrade) c->ready.back().keep_alive = false;  // answered (not switched), then closed
  if (!c->ready.back().keep_alive) {
    c->no_more = true;  // answered, then closed
    http_parser_pause(p, 1);
  }
  return 0;
}

namespace {

// What take_plain reads without http-parser: a URL's bytes (all that
// http-parser takes in one, less '#', whose fragment it reads apart) and
// a header value's (visible ASCII and the space).
struct PlainTable {
  bool url[256] = {};
  bool value[256] = {};
  constexpr PlainTable() {
    for (int i = 0x21; i <= 0x7e; ++i) url[i] = value[i] = true;
    url[static_cast<unsigned char>('#')] = false;
    value[static_cast<unsigned char>(' ')] = true;
  }
};
constexpr PlainTable kPlain;

}  // namespace

// A request head of the usual shape, whole at data, queued without
// http-parser, whose byte loop and callbacks were the larger part of a
// small keep-alive request's cost: GET or HEAD of an origin-form URL,
// HTTP/1.1, one Host, each header a token, a colon and a plain value
// (no trailing space), none that frames a body (Content-Length,
// Transfer-Encoding), asks for 100-continue or an upgrade, and
// Connection, if given, "close" or "keep-alive". Returns the bytes it
// took, or 0: anything else, or a head not all there, http-parser reads
// as before, which keeps its answers (400, 431, ...) to what is not of
// this shape. Called only between requests (http-parser holds none).
std::size_t HttpRequestParser::take_plain(const char* data, std::size_t n) {
  const char* p = data;
  const char* const end = data + n;
  const auto starts = [&](std::string_view s) {
    return static_cast<std::size_t>(end - p) >= s.size() && std::memcmp(p, s.data(), s.size()) == 0;
  };
  HttpRequest r;
  if (starts("GET /")) {
    p += 4;
  } else if (starts("HEAD /")) {
    p += 5;
    r.head = true;
  } else {
    return 0;
  }
  const char* const url = p;
  while (p < end && kPlain.url[static_cast<unsigned char>(*p)]) ++p;
  std::size_t bytes = static_cast<std::size_t>(p - url);
  if (!starts(" HTTP/1.1\r\n")) return 0;
  r.url.assign(url, bytes);
  p += 11;
  int hosts = 0;
  for (;;) {
    if (starts("\r\n")) {
      p += 2;
      break;
    }
    const char* const name = p;
    while (p < end && kToken.ok[static_cast<unsigned char>(*p)]) ++p;
    const std::size_t name_len = static_cast<std::size_t>(p - name);
    if (name_len == 0 || p == end || *p != ':') return 0;
    ++p;
    while (p < end && (*p == ' ' || *p == '\t')) ++p;
    const char* const value = p;
    while (p < end && kPlain.value[static_cast<unsigned char>(*p)]) ++p;
    const std::string_view v(value, static_cast<std::size_t>(p - value));
    if (v.empty() || v.back() == ' ' || !starts("\r\n")) return 0;
    p += 2;
    bytes += name_len + v.size();
    if (bytes > limits_.max_header_bytes) return 0;
    std::string key = lower(std::string(name, name_len));
    if (key == "host") {
      ++hosts;
    } else if (key == "connection") {
      if (iequals(v, "close")) r.keep_alive = false;
      else if (!iequals(v, "keep-alive")) return 0;
    } else if (key == "content-length" || key == "transfer-encoding" || key == "expect" || key == "upgrade" ||
               key == "proxy-connection") {
      return 0;
    }
    r.headers.emplace_back(std::move(key), std::string(v));
  }
  if (hosts != 1) return 0;
  r.method = r.head ? "HEAD" : "GET";
  began = true;
  ready.push_back(std::move(r));
  if (!ready.back().keep_alive) no_more = true;  // answered, then closed
  return static_cast<std::size_t>(p - data);
}

void HttpRequestParser::feed(const char* data, std::size_t n) {
  if (no_more) return;
  if (n > 0) {  // n == 0 tells http-parser of the end
    while (n > 0 && !in_message && !no_more) {
      const std::size_t took = take_plain(data, n);
      if (took == 0) break;
      data += took;
      n -= took;
    }
    if (n == 0 || no_more) return;
  }
  http_parser_execute(&parser_, &settings(), data, n);
  const auto err = HTTP_PARSER_ERRNO(&parser_);
  if (err == HPE_OK || err == HPE_PAUSED) return;
  no_more = true;
  in_message = false;
  if (streaming) {  // the handler has (or will have) this request: its read_body says what went wrong
    streaming = false;
    if (stream_error.empty()) stream_error = n == 0 ? "closed" : "invalid: the body does not parse";
    return;
  }
  HttpRequest bad;
  bad.error = parse_error_ ? parse_error_ : err == HPE_HEADER_OVERFLOW ? 431 : 400;
  ready.push_back(std::move(bad));
}

void HttpRequestParser::ended() {
  if (in_message && !no_more) feed(nullptr, 0);  // a body that ends at the close
  in_message = false;                            // cut off: never answered
  no_more = true;
  if (streaming) {
    streaming = false;
    if (stream_error.empty()) stream_error = "closed";
  }
}

// ---- the request as the handler gets it

void split_target(const HttpRequest& r, std::string* path, HttpQuery* query) {
  http_parser_url u;
  http_parser_url_init(&u);
  std::string query_text;
  *path = "/";
  if (r.url == "*") {
    *path = "*";
  } else if (!r.url.empty() && r.url[0] == '/') {
    // The usual form, split here: http_parser_url holds offsets in 16
    // bits, so a longer URL (a long query) would come out cut.
    const std::string_view v = std::string_view(r.url).substr(0, r.url.find('#'));
    const std::size_t q = v.find('?');
    *path = percent_decode(v.substr(0, q), false);
    if (q != std::string_view::npos) query_text.assign(v.substr(q + 1));
  } else if (http_parser_parse_url(r.url.data(), r.url.size(), r.method == "CONNECT", &u) == 0) {
    if (u.field_set & (1 << UF_PATH))
      *path = percent_decode({r.url.data() + u.field_data[UF_PATH].off, u.field_data[UF_PATH].len}, false);
    if (u.field_set & (1 << UF_QUERY))
      query_text.assign(r.url.data() + u.field_data[UF_QUERY].off, u.field_data[UF_QUERY].len);
  }
  *query = parse_query(query_text);
}

void group_headers(HttpRequest& r) {
  auto& hs = r.headers;
  const auto join = [](std::string& joined, const std::string& name, const std::string& value) {
    joined += name == "cookie" ? "; " : ", ";
    joined += value;
  };
  // A few names (the usual request) are grouped where they are, by
  // looking through those kept before: nothing to allocate. Many go
  // through the hash, whose time stays linear whatever the names.
  if (hs.size() <= 16) {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < hs.size(); ++i) {
      std::size_t j = 0;
      while (j < kept && hs[j].first != hs[i].first) ++j;
      if (j < kept) {
        join(hs[j].second, hs[j].first, hs[i].second);
      } else {
        if (kept != i) hs[kept] = std::move(hs[i]);
        ++kept;
      }
    }
    hs.resize(kept);
    return;
  }
  // A name's place in grouped; the views are of the names in hs, which
  // stay where they are until grouped replaces them.
  std::vector<std::pair<std::string, std::string>> grouped;
  grouped.reserve(hs.size());
  std::unordered_map<std::string_view, std::size_t, NameHash> at;
  at.reserve(hs.size());
  for (auto& [name, value] : hs) {
    const auto [it, fresh] = at.try_emplace(std::string_view(name), grouped.size());
    if (fresh)
      grouped.emplace_back(name, std::move(value));
    else
      join(grouped[it->second].second, name, value);
  }
  hs = std::move(grouped);
}

}  // namespace host::io

// The request parser's one-pass path (HttpRequestParser::take_plain)
// against http-parser: each generated buffer is fed whole to one parser
// and to others that never take the one-pass path, which needs a head
// whole and is not tried once http-parser holds part of a message. One
// is fed the first byte alone and the rest at once (http-parser sees the
// same bytes in one call: it must queue the same, field by field);
// another a byte at a time, which must queue the same but for which of
// 400 and 431 a head both malformed and too large gets (http-parser
// counts a header's bytes as its calls end: cut finer, the count runs
// over before the malformed byte is reached). A last one is fed each
// head in a read of its own, so that the one-pass path is tried after a
// request http-parser read.
#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <string>
#include <vector>

#include "host/io/http_request_parser.hpp"
#include "tests/watchdog.hpp"

namespace host::io {

// take_plain called alone (a friend of the parser).
struct HttpRequestParserProbe {
  static std::size_t take_plain(HttpRequestParser& p, const std::string& s) { return p.take_plain(s.data(), s.size()); }
};

}  // namespace host::io

namespace {

using host::io::HttpLimits;
using host::io::HttpQuery;
using host::io::HttpRequest;
using host::io::HttpRequestParser;
using host::io::HttpRequestParserProbe;

// A fixed sequence (xorshift64*): the same requests on every run and
// every standard library.
struct Rng {
  std::uint64_t s;
  std::uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545f4914f6cdd1dULL;
  }
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(next() % n); }
  bool one_in(std::size_t n) { return below(n) == 0; }
  template <typename T, std::size_t N>
  const T& pick(const T (&a)[N]) {
    return a[below(N)];
  }
};

// One head (and its body) from the grammar around the usual shape; plain:
// no mutation took it out of that shape, so take_plain must take it.
struct Generated {
  std::string text;
  bool plain = true;
};

std::string url_of(Rng& rng, bool& plain) {
  static const char* const kSegments[] = {"a", "index.html", "api", "v1", "users", "42", "x-y_z.~", "%41", "a+b"};
  std::string u = "/";
  const std::size_t parts = rng.below(4);
  for (std::size_t i = 0; i < parts; ++i) {
    if (i) u += '/';
    u += rng.pick(kSegments);
  }
  if (rng.one_in(3)) {
    static const char* const kQueries[] = {"?a=1", "?a=1&b=2&a=3", "?q=hello+world", "?x=%20y", "?", "?a=&=b&&c",
                                           "?k=%zz", "?p=/a/b?c"};
    u += rng.pick(kQueries);
  }
  if (rng.one_in(4)) {  // a mutation
    static const char* const kOdd[] = {"#frag", "?a#b", " ", "\x80", "\xff", "\t", "\x01", "\x7f", "%", "\"<>\\^`{|}"};
    const std::string odd = rng.pick(kOdd);
    u.insert(rng.below(u.size()) + 1, odd);
    if (odd.find_first_of("# \t\x01\x7f\x80\xff") != std::string::npos) plain = false;
  }
  if (rng.one_in(40)) {  // not origin-form
    static const char* const kForms[] = {"*", "http://example.com/a?b=1", "", "a/b"};
    u = rng.pick(kForms);
    plain = false;
  }
  return u;
}

// A header's value: usually plain; sometimes with what take_plain may
// leave to http-parser (a tab or a trailing space it declines, though
// http-parser keeps both in the value as they are).
std::string value_of(Rng& rng, bool& plain) {
  static const char* const kValues[] = {"text/html", "*/*", "gzip, deflate", "Mozilla/5.0 (X11; Linux)", "1",
                                        "a=b; c=d", "\"quoted\"", "x,y,,z", "!#$%&'*+-.^_`|~"};
  std::string v = rng.pick(kValues);
  if (rng.one_in(5)) {
    static const char* const kOdd[] = {"\t", "\x80", "\xfe", "\x7f", "\x01", "\r", "\n", "\r\n ", "\r\n\t", "\0"};
    const std::size_t which = rng.below(std::size(kOdd));
    const std::string odd = which == 9 ? std::string(1, '\0') : kOdd[which];
    v.insert(rng.below(v.size() + 1), odd);
    plain = false;
  }
  if (rng.one_in(8)) {  // leading white space, which both skip
    v.insert(0, rng.one_in(2) ? " " : "\t");
  }
  if (rng.one_in(10)) {
    v += rng.one_in(2) ? " " : "\t";
    plain = false;
  }
  if (rng.one_in(30)) {
    v.clear();
    plain = false;
  }
  return v;
}

// A header line: a name, a colon, a space (usually) and a value.
std::string line(const std::string& name, const std::string& value, const char* eol, bool space = true) {
  return name + ":" + (space ? " " : "") + value + eol;
}

Generated head_of(Rng& rng, std::size_t max_header_bytes) {
  Generated g;
  bool& plain = g.plain;
  std::string method = "GET";
  if (rng.one_in(4)) method = "HEAD";
  if (rng.one_in(8)) {
    static const char* const kMethods[] = {"POST", "get", "PUT", "OPTIONS", "DELETE", "GETX", "G"};
    method = rng.pick(kMethods);
    plain = false;
  }
  const std::string url = url_of(rng, plain);
  std::string version = "HTTP/1.1";
  if (rng.one_in(10)) {
    static const char* const kVersions[] = {"HTTP/1.0", "HTTP/1.11", "HTTP/2.0", "http/1.1", "HTTP/1.1 ", "HTTP/0.9",
                                            "HTTP/1.2"};
    version = rng.pick(kVersions);
    plain = false;
  }
  const char* eol = "\r\n";
  if (rng.one_in(30)) {
    eol = "\n";
    plain = false;
  }
  std::string sep = " ";
  if (rng.one_in(40)) {
    sep = "  ";
    plain = false;
  }
  g.text = method + sep + url + sep + version + eol;

  std::vector<std::string> lines;
  // Host: one, usually; sometimes none, two, or in another case.
  static const char* const kHostNames[] = {"Host", "host", "HOST", "hOsT"};
  std::size_t hosts = 1;
  if (rng.one_in(15)) hosts = 0;
  if (rng.one_in(15)) hosts = 2;
  if (hosts != 1) plain = false;
  for (std::size_t i = 0; i < hosts; ++i) lines.push_back(line(rng.pick(kHostNames), "example.com", eol));

  static const char* const kNames[] = {"Accept", "User-Agent", "Accept-Encoding", "Cookie", "X-Request-Id",
                                       "x-forwarded-for", "If-None-Match", "Cache-Control", "X!#$%&'*+-.^_`|~"};
  const std::size_t common = rng.below(5);
  for (std::size_t i = 0; i < common; ++i) {
    std::string name = rng.pick(kNames);
    if (rng.one_in(25)) {  // a name that is not a token
      static const char* const kOdd[] = {"", "X Y", "X ", "X@Y", "X\x80", "X\t", "X(", "X\"", " X"};
      name = rng.pick(kOdd);
      plain = false;
    }
    if (rng.one_in(6))  // names in any case
      for (char& ch : name) ch = rng.one_in(2) ? static_cast<char>(std::toupper(static_cast<unsigned char>(ch))) : ch;
    lines.push_back(line(name, value_of(rng, plain), eol, !rng.one_in(6)));
  }

  // Connection.
  if (rng.one_in(3)) {
    static const char* const kPlainConn[] = {"close", "keep-alive", "Keep-Alive", "CLOSE", "Close"};
    static const char* const kOddConn[] = {"close, foo", "upgrade", "keep-alive, close", "te", "closed", "close ",
                                           " keep-alive", "foo", "Upgrade, keep-alive"};
    std::string v = rng.one_in(3) ? (plain = false, rng.pick(kOddConn)) : rng.pick(kPlainConn);
    lines.push_back(line("Connection", v, eol));
    if (rng.one_in(5)) lines.push_back(line("connection", rng.pick(kPlainConn), eol));  // repeated
  }

  // Framing, 100-continue, upgrades: left to http-parser, with their bodies.
  std::string body;
  if (rng.one_in(8)) {
    plain = false;
    switch (rng.below(7)) {
      case 0: {
        const std::size_t n = rng.below(12);
        lines.push_back(line("Content-Length", std::to_string(n), eol));
        body.assign(n, 'b');
        break;
      }
      case 1:
        lines.push_back(line("Transfer-Encoding", "chunked", eol));
        body = "3\r\nabc\r\n0\r\nX-Trailer: t\r\n\r\n";
        break;
      case 2:
        lines.push_back(line("Expect", "100-continue", eol));
        break;
      case 3:
        lines.push_back(line("Upgrade", "websocket", eol));
        if (rng.one_in(2)) lines.push_back(line("Connection", "Upgrade", eol));
        break;
      case 4:
        lines.push_back(line("Content-Length", "abc", eol));
        break;
      case 5:
        lines.push_back(line("Proxy-Connection", "close", eol));
        break;
      default:
        lines.push_back(line("Content-Length", "2", eol));
        lines.push_back(line("Content-Length", "3", eol));
        body = "xyz";
        break;
    }
  }
  // Over (or near) the server's limit on header bytes.
  if (rng.one_in(12)) lines.push_back(line("X-Big", std::string(max_header_bytes - rng.below(40), 'v'), eol));
  // An obs-fold continuation line.
  if (rng.one_in(30)) {
    lines.push_back(std::string(rng.one_in(2) ? " " : "\t") + "folded" + eol);
    plain = false;
  }
  // Lines in any order.
  for (std::size_t i = lines.size(); i > 1; --i) std::swap(lines[i - 1], lines[rng.below(i)]);
  for (const std::string& l : lines) g.text += l;
  g.text += eol;
  g.text += body;
  return g;
}

// What a test failure prints: the buffer with its odd bytes escaped.
std::string escaped(const std::string& s) {
  std::string out;
  for (unsigned char ch : s) {
    if (ch == '\r') out += "\\r";
    else if (ch == '\n') out += "\\n\n";
    else if (ch == '\t') out += "\\t";
    else if (ch < 0x20 || ch >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", ch);
      out += buf;
    } else out += static_cast<char>(ch);
  }
  return out;
}

// The two parsers' queues, field by field; errors_alike: 400 and 431
// taken as one.
void require_same(const HttpRequestParser& whole, const HttpRequestParser& bytes, bool errors_alike = false) {
  REQUIRE(whole.ready.size() == bytes.ready.size());
  for (std::size_t i = 0; i < whole.ready.size(); ++i) {
    const HttpRequest& a = whole.ready[i];
    const HttpRequest& b = bytes.ready[i];
    INFO("request " << i);
    const auto alike = [&](int e) { return errors_alike && e == 431 ? 400 : e; };
    CHECK(alike(a.error) == alike(b.error));
    CHECK(a.method == b.method);
    CHECK(a.url == b.url);
    CHECK(a.keep_alive == b.keep_alive);
    CHECK(a.head == b.head);
    CHECK(a.streamed == b.streamed);
    CHECK(a.minor == b.minor);
    CHECK(a.body == b.body);
    CHECK(a.headers == b.headers);
    for (const auto& [name, value] : a.headers) CHECK(name == host::io::lower(name));
    std::string pa, pb;
    HttpQuery qa, qb;
    host::io::split_target(a, &pa, &qa);
    host::io::split_target(b, &pb, &qb);
    CHECK(pa == pb);
    CHECK(qa == qb);
  }
  CHECK(whole.no_more == bytes.no_more);
  CHECK(whole.in_message == bytes.in_message);
  CHECK(whole.began == bytes.began);
  CHECK(whole.continue_owed == bytes.continue_owed);
  CHECK(whole.streaming == bytes.streaming);
}

}  // namespace

TEST_CASE("a buffer fed whole queues what http-parser alone queues, field by field") {
  Rng rng{0x9e3779b97f4a7c15ULL};
  const int cases = host::testing::scaled(40000);
  int taken = 0, plain_cases = 0, errors = 0;
  for (int c = 0; c < cases; ++c) {
    HttpLimits limits;
    limits.max_header_bytes = rng.one_in(4) ? 200 + rng.below(200) : 4096;
    limits.max_body_bytes = 64;
    // Pipelined heads: one, two or three in one buffer.
    const std::size_t heads = 1 + (rng.one_in(4) ? 1 + rng.below(2) : 0);
    std::string buf;
    Generated first;
    std::vector<std::size_t> ends;  // where each head (and its body) ends in buf
    for (std::size_t h = 0; h < heads; ++h) {
      Generated g = head_of(rng, limits.max_header_bytes);
      if (h == 0) first = g;
      if (h > 0 && rng.one_in(20)) buf += "\r\n";  // a blank line between
      buf += g.text;
      ends.push_back(buf.size());
    }
    if (rng.one_in(20)) buf.resize(rng.below(buf.size()) + 1);  // cut off
    if (rng.one_in(50)) {                                        // a blank line before
      buf.insert(0, "\r\n");
      for (std::size_t& e : ends) e += 2;
    }

    const std::string shown = escaped(buf.substr(0, 600));
    INFO("case " << c << ":\n" << shown);
    HttpRequestParser whole(limits), alone(limits), bytes(limits), split(limits), probe(limits);
    whole.feed(buf.data(), buf.size());
    // Each head in a read of its own: the one-pass path tried after a
    // request http-parser read.
    std::size_t from = 0;
    for (std::size_t e : ends) {
      e = std::min(e, buf.size());
      if (e > from) split.feed(buf.data() + from, e - from);
      from = e;
    }
    std::size_t at = 0;  // leading blank lines begin no message: a byte at a time until one begins
    while (at < buf.size() && !alone.in_message && !alone.no_more) alone.feed(&buf[at++], 1);
    if (at < buf.size()) alone.feed(buf.data() + at, buf.size() - at);  // (feeding none is the close)
    for (char ch : buf) bytes.feed(&ch, 1);
    require_same(whole, alone);
    require_same(whole, bytes, true);
    require_same(whole, split, true);
    whole.ended();
    alone.ended();
    bytes.ended();
    split.ended();
    require_same(whole, alone);
    require_same(whole, bytes, true);
    require_same(whole, split, true);

    // The usual shape is read in one pass (and only a whole head is).
    const std::size_t took = HttpRequestParserProbe::take_plain(probe, buf);
    const bool whole_first = buf.compare(0, first.text.size(), first.text) == 0;
    if (first.plain && whole_first && first.text.size() - first.text.find("\r\n\r\n") == 4 &&
        first.text.size() <= limits.max_header_bytes) {
      ++plain_cases;
      CHECK(took == first.text.size());
    }
    if (took > 0) {
      ++taken;
      CHECK(took <= buf.size());
      CHECK(buf.compare(took - 4, 4, "\r\n\r\n") == 0);
      HttpRequestParser cut(limits);
      CHECK(HttpRequestParserProbe::take_plain(cut, buf.substr(0, took - 1)) == 0);
    }
    for (const HttpRequest& r : whole.ready) errors += r.error != 0;
  }
  // Both paths, and the answers to bad requests, were exercised.
  CHECK(plain_cases > cases / 10);
  CHECK(taken >= plain_cases);
  CHECK(taken < cases);
  CHECK(errors > cases / 20);
}

TEST_CASE("a response the server writes by itself has its status line for any status, cached or not") {
  // http.error_response takes any number; the cached lines cover 200-999.
  CHECK(host::io::error_response(404).rfind("HTTP/1.1 404 Not Found\r\n", 0) == 0);
  CHECK(host::io::error_response(100).rfind("HTTP/1.1 100 Continue\r\n", 0) == 0);
  CHECK(host::io::error_response(0).rfind("HTTP/1.1 0 \r\n", 0) == 0);
  CHECK(host::io::error_response(1000).rfind("HTTP/1.1 1000 \r\n", 0) == 0);
  CHECK(host::io::error_response(-5).rfind("HTTP/1.1 -5 \r\n", 0) == 0);
  CHECK(host::io::status_line(200) == "HTTP/1.1 200 OK\r\n");
  CHECK(host::io::status_line(999) == "HTTP/1.1 999 \r\n");
}

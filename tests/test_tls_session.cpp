// TlsContext and TlsSession alone (host/io/tls_session.hpp): a client and
// a server session pumping bytes into each other in memory, with a CA and
// a server certificate made by the openssl program for the test.
#include <doctest/doctest.h>

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "host/io/tls_session.hpp"

using namespace host::io;

namespace {

// The test's certificates, made once: ca.pem (the CA), server.pem and
// server.key (for localhost and 127.0.0.1, signed by the CA), other.pem
// (an unrelated CA).
struct Certificates {
  std::string dir;
  Certificates() {
    char tmpl[] = "/tmp/host-tls-test-XXXXXX";
    const char* d = mkdtemp(tmpl);
    REQUIRE(d != nullptr);
    dir = d;
    const std::string q = "cd '" + dir + "' && ";
    const std::string quiet = " >/dev/null 2>&1";
    auto run = [&](const std::string& cmd) { REQUIRE_MESSAGE(std::system((q + cmd + quiet).c_str()) == 0, cmd); };
    run("openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj '/CN=host test CA'");
    run("openssl req -x509 -newkey rsa:2048 -nodes -keyout other.key -out other.pem -days 2 -subj '/CN=another CA'");
    run("openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=localhost");
    std::FILE* ext = std::fopen(path("ext.cnf").c_str(), "w");
    REQUIRE(ext != nullptr);
    std::fputs("subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n", ext);
    std::fclose(ext);
    run("openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 "
        "-extfile ext.cnf");
  }
  ~Certificates() { std::system(("rm -rf '" + dir + "'").c_str()); }
  std::string path(const char* name) const { return dir + "/" + name; }
};

const Certificates& certificates() {
  static Certificates c;
  return c;
}

std::shared_ptr<TlsContext> server_context() {
  TlsContext::Options o;
  o.server = true;
  o.verify = false;
  o.cert_file = certificates().path("server.pem");
  o.key_file = certificates().path("server.key");
  std::string err;
  auto ctx = TlsContext::make(o, &err);
  REQUIRE_MESSAGE(ctx, err);
  return ctx;
}

std::shared_ptr<TlsContext> client_context(const char* ca, bool verify = true, const char* protocol = "any") {
  TlsContext::Options o;
  o.verify = verify;
  o.protocol = protocol;
  if (ca) o.ca_file = certificates().path(ca);
  std::string err;
  auto ctx = TlsContext::make(o, &err);
  REQUIRE_MESSAGE(ctx, err);
  return ctx;
}

// Moves each side's output to the other until neither has any; returns
// how many rounds it took.
int pump(TlsSession& a, TlsSession& b) {
  int rounds = 0;
  for (; rounds < 20; ++rounds) {
    std::string ab, ba;
    a.take_output(ab);
    b.take_output(ba);
    if (ab.empty() && ba.empty()) break;
    b.feed(ab);
    a.feed(ba);
    if (a.state() == TlsSession::State::Handshaking) a.handshake();
    if (b.state() == TlsSession::State::Handshaking) b.handshake();
  }
  return rounds;
}

void handshake(TlsSession& client, TlsSession& server) {
  client.handshake();
  server.handshake();
  pump(client, server);
}

}  // namespace

TEST_CASE("a client and a server session handshake and exchange data through memory") {
  TlsSession server(server_context());
  TlsSession client(client_context("ca.pem"), "localhost");
  CHECK(client.protocol().empty());
  handshake(client, server);
  REQUIRE_MESSAGE(client.state() == TlsSession::State::Open, client.error());
  REQUIRE_MESSAGE(server.state() == TlsSession::State::Open, server.error());
  CHECK(client.protocol().rfind("TLSv1", 0) == 0);
  CHECK(!client.cipher().empty());
  CHECK(server.server());
  CHECK(!client.server());

  // 1 MB from the client, 100 KB back, in pieces.
  std::string big(1 << 20, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i % 26);
  for (std::size_t at = 0; at < big.size(); at += 65536) REQUIRE(client.write(std::string_view(big).substr(at, 65536)));
  std::string wire;
  CHECK(client.take_output(wire) > big.size());
  std::string got;
  for (std::size_t at = 0; at < wire.size(); at += 1000) {  // as a network would cut it
    server.feed(std::string_view(wire).substr(at, 1000));
    server.read(got, SIZE_MAX);
  }
  CHECK(got == big);
  CHECK(!server.readable());
  REQUIRE(server.write(std::string(100000, 'z')));
  pump(server, client);
  std::string back;
  CHECK(client.read(back, 4096) == 4096);  // at most what was asked
  CHECK(client.readable());
  client.read(back, SIZE_MAX);
  CHECK(back == std::string(100000, 'z'));

  // The server's close_notify closes the client's reading; the client may
  // still write its last words.
  server.close();
  pump(server, client);
  std::string none;
  CHECK(client.read(none, 100) == 0);
  CHECK(client.state() == TlsSession::State::Closed);
  CHECK(client.write("last words"));
}

TEST_CASE("any, TLS 1.2 only and TLS 1.3 only contexts negotiate, checking an IP address") {
  for (const char* version : {"any", "tlsv1_2", "tlsv1_3"}) {
    CAPTURE(version);
    TlsSession server(server_context());
    TlsSession client(client_context("ca.pem", true, version), "127.0.0.1");
    handshake(client, server);
    REQUIRE_MESSAGE(client.state() == TlsSession::State::Open, client.error());
    if (std::string(version) != "any") CHECK(client.protocol() == (std::string(version) == "tlsv1_2" ? "TLSv1.2" : "TLSv1.3"));
  }
}

TEST_CASE("a certificate its CA does not sign, or for another name, fails the handshake, saying why") {
  {
    TlsSession server(server_context());
    TlsSession client(client_context("other.pem"), "localhost");
    handshake(client, server);
    CHECK(client.state() == TlsSession::State::Failed);
    CHECK(client.error().rfind("certificate verify failed: ", 0) == 0);
    CHECK(server.state() == TlsSession::State::Failed);  // the client's alert
    CHECK(server.error().rfind("handshake failed: ", 0) == 0);
  }
  {
    TlsSession server(server_context());
    TlsSession client(client_context("ca.pem"), "wrong.example");
    handshake(client, server);
    CHECK(client.state() == TlsSession::State::Failed);
    CHECK_MESSAGE(client.error().find("hostname mismatch") != std::string::npos, client.error());
  }
  {  // without verification, the same succeeds
    TlsSession server(server_context());
    TlsSession client(client_context(nullptr, false), "wrong.example");
    handshake(client, server);
    CHECK(client.state() == TlsSession::State::Open);
  }
}

TEST_CASE("bytes that are not TLS fail the handshake; abort fails a session once") {
  TlsSession server(server_context());
  server.feed("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(server.handshake() == TlsSession::State::Failed);
  CHECK(server.error().rfind("handshake failed: ", 0) == 0);
  CHECK(!server.write("x"));

  TlsSession client(client_context(nullptr, false));
  client.handshake();
  client.abort("closed");
  CHECK(client.state() == TlsSession::State::Failed);
  CHECK(client.error() == "closed");
  client.abort("again");
  CHECK(client.error() == "closed");
}

TEST_CASE("a context's bad options and files are errors naming them") {
  std::string err;
  TlsContext::Options o;
  o.protocol = "sslv3";
  CHECK(!TlsContext::make(o, &err));
  CHECK(err == "invalid: unknown protocol 'sslv3' (any, tlsv1_2 or tlsv1_3)");
  o = {};
  o.server = true;
  CHECK(!TlsContext::make(o, &err));
  CHECK(err == "invalid: a server needs a certificate and a key");
  o = {};
  o.ca_file = certificates().path("missing.pem");
  CHECK(!TlsContext::make(o, &err));
  CHECK(err.rfind("not_found: CA file ", 0) == 0);
  o.ca_file = certificates().path("ext.cnf");
  CHECK(!TlsContext::make(o, &err));
  CHECK(err.rfind("invalid: CA file ", 0) == 0);
  o = {};
  o.server = true;
  o.cert_file = certificates().path("server.pem");
  o.key_file = certificates().path("ca.key");
  CHECK(!TlsContext::make(o, &err));
  CHECK_MESSAGE(err.rfind("invalid: key file ", 0) == 0, err);
  CHECK_MESSAGE(err.find("mismatch") != std::string::npos, err);
}

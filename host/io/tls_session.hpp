// TLS over memory (docs/LUA_API.md, ssl): OpenSSL driven through two memory BIOs,
// so that whoever owns the connection's bytes (the socket service's I/O
// thread, the HTTP server's loop) moves them, and OpenSSL only turns
// ciphertext into plaintext and back. The shape of Skynet's ltls.c: the
// caller feeds what it read from the network, takes plaintext out, gives
// plaintext to send, and takes the ciphertext to write. Nothing here
// knows libuv or the sockets.
//
// Threads: a TlsContext is immutable once made and may be shared by
// sessions on any threads (OpenSSL's SSL_CTX allows it). A TlsSession is
// one thread's at a time; every call clears and reads the calling
// thread's OpenSSL error queue, so sessions of one thread do not see each
// other's errors.
//
// Errors are strings: a context's as "kind: detail" (host/error.hpp's
// kinds: "invalid: unknown protocol 'x'", "not_found: certificate file
// /x: no such file"); a session's name what failed ("certificate verify
// failed: self-signed certificate in certificate chain", "handshake
// failed: wrong version number", "tls: decryption failed or bad record
// mac").
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;
typedef struct bio_st BIO;

namespace host::io {

class TlsContext {
 public:
  struct Options {
    bool server = false;
    // "any" (the highest both sides have; "sslv23" is the same),
    // "tlsv1_2" or "tlsv1_3" (that version only).
    std::string protocol = "any";
    // Whether the peer's certificate is checked: a client checks the
    // server's chain (and its name, where the session names a host); a
    // server asks for a client certificate and refuses a client without
    // one. Against ca_file (PEM) where given, else the system's store.
    bool verify = true;
    std::string ca_file;
    // A server's certificate chain and private key (PEM files); a client
    // may give both to present a certificate.
    std::string cert_file;
    std::string key_file;
    // The files' contents, read by the caller: then no file is opened
    // here (the I/O threads make contexts, and a file that blocks, a FIFO,
    // would stop every socket of the thread), and the names above only
    // name them in errors. An empty string is an empty file.
    bool in_memory = false;
    std::string ca_pem;
    std::string cert_pem;
    std::string key_pem;
  };
  // The context, or nullptr with *err set ("kind: detail").
  static std::shared_ptr<TlsContext> make(const Options& options, std::string* err);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  bool server() const { return server_; }
  bool verify() const { return verify_; }
  SSL_CTX* native() const { return ctx_; }

 private:
  TlsContext(SSL_CTX* ctx, bool server, bool verify) : ctx_(ctx), server_(server), verify_(verify) {}
  SSL_CTX* ctx_;
  bool server_;
  bool verify_;
};

class TlsSession {
 public:
  enum class State {
    Handshaking,  // feed what comes, call handshake() again
    Open,         // the handshake is done: read() and write()
    Closed,       // the peer sent its close_notify: nothing more comes
    Failed,       // error() says why; nothing more to do but send output
  };

  // A session under ctx: a client's names host_name (sent as SNI unless it
  // is an IP address, and checked against the server's certificate where
  // the context verifies); a server's ignores it.
  explicit TlsSession(std::shared_ptr<const TlsContext> ctx, std::string_view host_name = {});
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  // Sets the name a client sends (SNI) and checks, as the constructor's
  // host_name; ignored by a server and once the handshake has started.
  void set_host_name(std::string_view host_name);

  // Ciphertext read from the network, all of it kept.
  void feed(std::string_view ciphertext);
  // Advances the handshake with what was fed; its state afterwards (Open
  // once done). Output to send may follow it (take_output).
  State handshake();
  // Decrypts what was fed, appending at most max plaintext bytes to out;
  // returns how many. A close_notify makes the state Closed, an error
  // Failed. Input it did not need stays fed.
  std::size_t read(std::string& out, std::size_t max);
  // Whether read() would give bytes without more input.
  bool readable() const;
  // Encrypts plaintext (Open, or Closed: the peer may close its half first), all of it: the ciphertext waits for
  // take_output. False, with the state Failed, on an error.
  bool write(std::string_view plaintext);
  // Appends the ciphertext waiting to be sent to out; returns how many
  // bytes. Handshake messages and alerts come out here too.
  std::size_t take_output(std::string& out);
  std::size_t output_size() const;
  // Queues a close_notify (once; take_output then sends it).
  void close();
  // The connection underneath ended or broke: the session fails with why
  // (unless it failed already).
  void abort(std::string_view why);

  State state() const { return state_; }
  const std::string& error() const { return error_; }
  bool server() const { return server_; }
  // After the handshake: the protocol's and cipher's names ("TLSv1.3",
  // "TLS_AES_256_GCM_SHA384"), empty before.
  std::string protocol() const;
  std::string cipher() const;

 private:
  void fail(int rc, const char* during);

  std::shared_ptr<const TlsContext> ctx_;
  SSL* ssl_ = nullptr;
  BIO* in_ = nullptr;   // the network's ciphertext, read by OpenSSL (owned by ssl_)
  BIO* out_ = nullptr;  // ciphertext OpenSSL wrote, for the network (owned by ssl_)
  State state_ = State::Handshaking;
  std::string error_;
  bool server_ = false;
  bool closed_ = false;  // close() queued the close_notify
  bool started_ = false;  // handshake() was called: the host name is sent
};

}  // namespace host::io

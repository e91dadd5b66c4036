// TLS over memory BIOs (tls_session.hpp).
#include "host/io/tls_session.hpp"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "host/error.hpp"

namespace host::io {
namespace {

// The reason of the oldest error in this thread's queue (OpenSSL's words:
// "wrong version number"), or fallback; empties the queue.
std::string openssl_reason(const char* fallback) {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return fallback;
  if (const char* r = ERR_reason_error_string(e)) return r;
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

bool is_ip(std::string_view name) {
  const std::string s(name);
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(AF_INET, s.c_str(), buf) == 1 || inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

// A file's error: not_found where it does not exist, else invalid (it is
// there but not what was asked for).
std::string file_error(const char* what, const std::string& path, const char* fallback) {
  std::string reason = openssl_reason(fallback);
  if (std::FILE* f = std::fopen(path.c_str(), "rb")) {
    std::fclose(f);
    return make_error(ErrorKind::Invalid, std::string(what) + " " + path + ": " + reason);
  }
  const int e = errno;
  return make_error(e == EACCES ? ErrorKind::Denied : ErrorKind::NotFound,
                    std::string(what) + " " + path + ": " + std::strerror(e));
}

// A key is never asked for a passphrase (OpenSSL's default would prompt
// on the terminal): an encrypted key is refused.
int no_passphrase(char*, int, int, void*) { return 0; }

// PEM bytes in a read-only memory BIO, freed with it.
class PemBio {
 public:
  explicit PemBio(const std::string& pem) : bio_(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()))) {}
  ~PemBio() { BIO_free(bio_); }
  PemBio(const PemBio&) = delete;
  BIO* get() const { return bio_; }

 private:
  BIO* bio_;
};

// The certificates of pem into ctx's trust store; whether there was one.
bool load_ca_pem(SSL_CTX* ctx, const std::string& pem) {
  PemBio bio(pem);
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  int added = 0;
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, no_passphrase, nullptr)) {
    if (X509_STORE_add_cert(store, x) == 1) ++added;
    X509_free(x);
  }
  if (added > 0) ERR_clear_error();  // the end of the bytes reads as an error
  return added > 0;
}

// A certificate chain as SSL_CTX_use_certificate_chain_file takes it: the
// certificate, then the certificates that sign it.
bool use_chain_pem(SSL_CTX* ctx, const std::string& pem) {
  PemBio bio(pem);
  X509* leaf = PEM_read_bio_X509_AUX(bio.get(), nullptr, no_passphrase, nullptr);
  if (!leaf) return false;
  const bool used = SSL_CTX_use_certificate(ctx, leaf) == 1;
  X509_free(leaf);
  if (!used) return false;
  SSL_CTX_clear_chain_certs(ctx);
  while (X509* ca = PEM_read_bio_X509(bio.get(), nullptr, no_passphrase, nullptr)) {
    if (SSL_CTX_add0_chain_cert(ctx, ca) != 1) {
      X509_free(ca);
      return false;
    }
  }
  ERR_clear_error();
  return true;
}

bool use_key_pem(SSL_CTX* ctx, const std::string& pem) {
  PemBio bio(pem);
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio.get(), nullptr, no_passphrase, nullptr);
  if (!key) return false;
  const bool used = SSL_CTX_use_PrivateKey(ctx, key) == 1;
  EVP_PKEY_free(key);
  return used;
}

// The error of a file whose bytes the caller read: it is there, but not
// what was asked for.
std::string content_error(const char* what, const std::string& path, const char* fallback) {
  return make_error(ErrorKind::Invalid, std::string(what) + " " + path + ": " + openssl_reason(fallback));
}

}  // namespace

std::shared_ptr<TlsContext> TlsContext::make(const Options& o, std::string* err) {
  ERR_clear_error();
  int version = 0;
  if (o.protocol == "tlsv1_2") version = TLS1_2_VERSION;
  else if (o.protocol == "tlsv1_3") version = TLS1_3_VERSION;
  else if (o.protocol != "any" && o.protocol != "sslv23") {
    *err = make_error(ErrorKind::Invalid, "unknown protocol '" + o.protocol + "' (any, tlsv1_2 or tlsv1_3)");
    return nullptr;
  }
  if (o.server && (o.cert_file.empty() || o.key_file.empty())) {
    *err = make_error(ErrorKind::Invalid, "a server needs a certificate and a key");
    return nullptr;
  }
  if (o.cert_file.empty() != o.key_file.empty()) {
    *err = make_error(ErrorKind::Invalid, o.cert_file.empty() ? "a key without a certificate" : "a certificate without a key");
    return nullptr;
  }
  SSL_CTX* ctx = SSL_CTX_new(o.server ? TLS_server_method() : TLS_client_method());
  if (!ctx) {
    *err = make_error(ErrorKind::Io, "cannot make a TLS context: " + openssl_reason("out of memory"));
    return nullptr;
  }
  std::shared_ptr<TlsContext> out(new TlsContext(ctx, o.server, o.verify));
  if (version != 0 && (!SSL_CTX_set_min_proto_version(ctx, version) || !SSL_CTX_set_max_proto_version(ctx, version))) {
    *err = make_error(ErrorKind::Invalid, "protocol " + o.protocol + ": " + openssl_reason("not available"));
    return nullptr;
  }
  // Idle connections keep no read and write buffers (about 34 KB each).
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_default_passwd_cb(ctx, no_passphrase);
  if (o.in_memory && !o.cert_file.empty()) {
    if (!use_chain_pem(ctx, o.cert_pem)) {
      *err = content_error("certificate file", o.cert_file, "not a PEM certificate");
      return nullptr;
    }
    if (!use_key_pem(ctx, o.key_pem)) {
      *err = content_error("key file", o.key_file, "not a PEM private key");
      return nullptr;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
      *err = make_error(ErrorKind::Invalid, "key file " + o.key_file + " does not match certificate " + o.cert_file);
      ERR_clear_error();
      return nullptr;
    }
  } else if (!o.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, o.cert_file.c_str()) != 1) {
      *err = file_error("certificate file", o.cert_file, "not a PEM certificate");
      return nullptr;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, o.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      *err = file_error("key file", o.key_file, "not a PEM private key");
      return nullptr;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
      *err = make_error(ErrorKind::Invalid, "key file " + o.key_file + " does not match certificate " + o.cert_file);
      ERR_clear_error();
      return nullptr;
    }
  }
  if (o.verify) {
    if (o.in_memory && !o.ca_file.empty()) {
      if (!load_ca_pem(ctx, o.ca_pem)) {
        *err = content_error("CA file", o.ca_file, "no PEM certificates in it");
        return nullptr;
      }
    } else if (!o.ca_file.empty()) {
      if (SSL_CTX_load_verify_locations(ctx, o.ca_file.c_str(), nullptr) != 1) {
        *err = file_error("CA file", o.ca_file, "no PEM certificates in it");
        return nullptr;
      }
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
      *err = make_error(ErrorKind::Io, "the system's CA store: " + openssl_reason("cannot be loaded"));
      return nullptr;
    }
    SSL_CTX_set_verify(ctx, o.server ? SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT : SSL_VERIFY_PEER, nullptr);
  } else {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
  }
  ERR_clear_error();
  return out;
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

TlsSession::TlsSession(std::shared_ptr<const TlsContext> ctx, std::string_view host_name)
    : ctx_(std::move(ctx)), server_(ctx_->server()) {
  ERR_clear_error();
  ssl_ = SSL_new(ctx_->native());
  in_ = BIO_new(BIO_s_mem());
  out_ = BIO_new(BIO_s_mem());
  if (!ssl_ || !in_ || !out_) {
    BIO_free(in_);
    BIO_free(out_);
    in_ = out_ = nullptr;
    state_ = State::Failed;
    error_ = "tls: " + openssl_reason("out of memory");
    return;
  }
  // An empty input is "come back later", not the end.
  BIO_set_mem_eof_return(in_, -1);
  BIO_set_mem_eof_return(out_, -1);
  SSL_set_bio(ssl_, in_, out_);  // ssl_ owns both now
  if (server_) {
    SSL_set_accept_state(ssl_);
  } else {
    SSL_set_connect_state(ssl_);
    if (!host_name.empty()) set_host_name(host_name);
  }
}

TlsSession::~TlsSession() {
  if (ssl_) SSL_free(ssl_);
}

void TlsSession::set_host_name(std::string_view host_name) {
  if (!ssl_ || server_ || started_ || state_ != State::Handshaking) return;
  const std::string name(host_name);
  ERR_clear_error();
  if (is_ip(name)) {
    // No SNI for an address (RFC 6066); its check is against the
    // certificate's IP addresses.
    if (ctx_->verify()) X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_), name.c_str());
  } else {
    SSL_set_tlsext_host_name(ssl_, name.c_str());
    if (ctx_->verify()) SSL_set1_host(ssl_, name.c_str());
  }
  ERR_clear_error();
}

void TlsSession::feed(std::string_view ciphertext) {
  if (!in_ || ciphertext.empty()) return;
  BIO_write(in_, ciphertext.data(), static_cast<int>(ciphertext.size()));
}

void TlsSession::fail(int rc, const char* during) {
  const int e = SSL_get_error(ssl_, rc);
  state_ = State::Failed;
  // A chain or name the check refused: its reason, in OpenSSL's words.
  const long verify = SSL_get_verify_result(ssl_);
  if (verify != X509_V_OK) {
    error_ = std::string("certificate verify failed: ") + X509_verify_cert_error_string(verify);
    ERR_clear_error();
    return;
  }
  if (e == SSL_ERROR_SYSCALL || e == SSL_ERROR_SSL) {
    error_ = std::string(during) + " failed: " + openssl_reason("the connection broke");
  } else {
    error_ = std::string(during) + " failed: unexpected state " + std::to_string(e);
    ERR_clear_error();
  }
}

TlsSession::State TlsSession::handshake() {
  if (state_ != State::Handshaking) return state_;
  started_ = true;
  ERR_clear_error();
  const int rc = SSL_do_handshake(ssl_);
  if (rc == 1) {
    state_ = State::Open;
    return state_;
  }
  const int e = SSL_get_error(ssl_, rc);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return state_;
  fail(rc, "handshake");
  return state_;
}

std::size_t TlsSession::read(std::string& out, std::size_t max) {
  if (state_ != State::Open) return 0;
  std::size_t got = 0;
  char buf[16384];
  ERR_clear_error();
  while (got < max) {
    const int want = static_cast<int>(std::min(sizeof buf, max - got));
    const int n = SSL_read(ssl_, buf, want);
    if (n > 0) {
      out.append(buf, static_cast<std::size_t>(n));
      got += static_cast<std::size_t>(n);
      continue;
    }
    const int e = SSL_get_error(ssl_, n);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) break;
    if (e == SSL_ERROR_ZERO_RETURN) {
      state_ = State::Closed;
      break;
    }
    state_ = State::Failed;
    error_ = "tls: " + openssl_reason("the connection broke");
    break;
  }
  return got;
}

bool TlsSession::readable() const {
  return ssl_ && state_ == State::Open && (SSL_pending(ssl_) > 0 || BIO_ctrl_pending(in_) > 0);
}

bool TlsSession::write(std::string_view plaintext) {
  if (state_ != State::Open && state_ != State::Closed) {
    if (state_ != State::Failed) {
      state_ = State::Failed;
      error_ = "tls: write on a session that is not open";
    }
    return false;
  }
  ERR_clear_error();
  std::size_t done = 0;
  while (done < plaintext.size()) {
    const int chunk = static_cast<int>(std::min<std::size_t>(plaintext.size() - done, 1 << 30));
    const int n = SSL_write(ssl_, plaintext.data() + done, chunk);
    if (n <= 0) {
      state_ = State::Failed;
      error_ = "tls: " + openssl_reason("write failed");
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  return true;
}

std::size_t TlsSession::output_size() const { return out_ ? BIO_ctrl_pending(out_) : 0; }

std::size_t TlsSession::take_output(std::string& out) {
  const std::size_t n = output_size();
  if (n == 0) return 0;
  const std::size_t at = out.size();
  out.resize(at + n);
  const int got = BIO_read(out_, out.data() + at, static_cast<int>(n));
  out.resize(at + static_cast<std::size_t>(got > 0 ? got : 0));
  return got > 0 ? static_cast<std::size_t>(got) : 0;
}

void TlsSession::close() {
  if (closed_ || !ssl_) return;
  closed_ = true;
  if (state_ != State::Open && state_ != State::Closed) return;
  ERR_clear_error();
  SSL_shutdown(ssl_);  // queues the close_notify; the peer's is not waited for
  ERR_clear_error();
}

void TlsSession::abort(std::string_view why) {
  if (state_ == State::Failed) return;
  state_ = State::Failed;
  error_ = why;
}

std::string TlsSession::protocol() const {
  if (!ssl_ || state_ == State::Handshaking) return {};
  return SSL_get_version(ssl_);
}

std::string TlsSession::cipher() const {
  if (!ssl_ || state_ == State::Handshaking) return {};
  const char* c = SSL_get_cipher_name(ssl_);
  return c ? c : "";
}

}  // namespace host::io

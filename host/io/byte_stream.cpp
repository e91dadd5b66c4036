// The buffered stream (byte_stream.hpp).
#include "host/io/byte_stream.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <csignal>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <system_error>

namespace host::io {
namespace {

// One read's landing place: what came is appended to the stream's buffer,
// so an idle stream holds no chunk of its own, or answered from here
// (read_answer).
thread_local char tls_chunk[ByteStream::kReadChunk];
// The stream whose receive answered with a view of tls_chunk, until its
// taken() or its next call. A read of another stream meanwhile (a
// finalizer's, which the collector may run while that answer is made
// into a Lua string) lands in a buffer of its own.
thread_local const ByteStream* chunk_lent_to = nullptr;

char* landing(const ByteStream* self, std::unique_ptr<char[]>& spare) {
  if (chunk_lent_to == nullptr || chunk_lent_to == self) return tls_chunk;
  spare.reset(new char[ByteStream::kReadChunk]);
  return spare.get();
}

// A line's bytes without the carriage returns (LuaSocket drops every CR
// of a line, not only the last).
void append_line(std::string& out, const char* p, std::size_t n) {
  const char* end = p + n;
  while (p < end) {
    const void* cr = std::memchr(p, '\r', static_cast<std::size_t>(end - p));
    const char* stop = cr ? static_cast<const char*>(cr) : end;
    out.append(p, static_cast<std::size_t>(stop - p));
    p = stop + (cr ? 1 : 0);
  }
}

// A write to a pipe whose reader is gone raises SIGPIPE on the writing
// thread, and its default ends the whole host (an embedder may not ignore
// it as the host program does): blocked on each thread that writes a
// pipe, once, the write returns EPIPE instead. The signal stays pending on
// that thread, blocked, and harms nothing.
void block_sigpipe_here() {
  thread_local bool blocked = false;
  if (blocked) return;
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
  blocked = true;
}

}  // namespace

ssize_t ByteStream::read_some(void* buf, std::size_t n) { return pipe_ ? ::read(fd_, buf, n) : ::recv(fd_, buf, n, 0); }

ssize_t ByteStream::write_some(const void* buf, std::size_t n) {
  if (!pipe_) return ::send(fd_, buf, n, MSG_NOSIGNAL);
  block_sigpipe_here();
  return ::write(fd_, buf, n);
}

std::string socket_errno_text(int err) {
  switch (err) {
    case EADDRINUSE: return "address already in use";
    case ECONNREFUSED: return "connection refused";
    case EISCONN: return "already connected";
    case EACCES: return "permission denied";
    case ECONNABORTED:
    case ECONNRESET:
    case EPIPE:
    case ENOTCONN:
    case EBADF: return "closed";
    case ETIMEDOUT: return "timeout";
    case EADDRNOTAVAIL: return "address not available";
    case ENETUNREACH: return "network is unreachable";
    case EHOSTUNREACH: return "host is unreachable";
    default: return std::system_category().message(err);
  }
}

ByteStream::~ByteStream() { close(); }

void ByteStream::close() {
  if (fd_ < 0) return;
  if (tls_ && tls_->state() == TlsSession::State::Open) {
    tls_->close();
    tls_->take_output(wbuf_);
  }
  if (!wbuf_.empty()) (void)::send(fd_, wbuf_.data(), wbuf_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  wbuf_.clear();
  ::close(fd_);
  fd_ = -1;
  if (chunk_lent_to == this) chunk_lent_to = nullptr;
  rbuf_.clear();
  rbuf_.shrink_to_fit();
  rpos_ = scan_ = 0;
}

ByteStream::Io ByteStream::end(std::string why) {
  if (error_.empty()) error_ = std::move(why);
  return Io::kEnd;
}

ByteStream::Io ByteStream::end_errno(int err) { return end(socket_errno_text(err)); }

void ByteStream::compact() {
  if (rpos_ == rbuf_.size()) {
    // Empty: an idle stream keeps no large buffer (an idle connection's
    // whole cost is a few KB).
    if (rbuf_.capacity() > 4096) std::string().swap(rbuf_);
    else rbuf_.clear();
    rpos_ = scan_ = 0;
  } else if (rpos_ > 4096 && rpos_ * 2 > rbuf_.size()) {
    rbuf_.erase(0, rpos_);
    rpos_ = 0;
  }
}

ByteStream::Io ByteStream::after_recv(ssize_t n, int err) {
  if (n > 0) {
    bytes_in_ += static_cast<double>(n);
    return Io::kDone;
  }
  if (n < 0 && (err == EAGAIN || err == EWOULDBLOCK || err == EINTR)) {
    want_ = Want::kRead;
    return Io::kAgain;
  }
  // The peer closed or the connection failed: a TLS session can go no
  // further either.
  if (n == 0) eof_ = true;
  if (tls_) tls_->abort("closed");
  return n == 0 ? end("closed") : end_errno(err);
}

ByteStream::Io ByteStream::recv_ciphertext() {
  std::unique_ptr<char[]> spare;
  char* buf = landing(this, spare);
  const ssize_t n = ::recv(fd_, buf, kReadChunk, 0);
  const int err = errno;
  if (n > 0) tls_->feed(std::string_view(buf, static_cast<std::size_t>(n)));
  return after_recv(n, err);
}

ByteStream::Io ByteStream::fill(std::size_t want) {
  if (fd_ < 0) return end("closed");
  if (ended_reading()) return Io::kEnd;
  if (tls_) return fill_tls(want);
  // A large receive reads straight into the buffer; others through the
  // chunk, so that the buffer grows only by what came.
  if (want > kReadChunk) {
    const std::size_t old = rbuf_.size();
    rbuf_.resize(old + want);
    const ssize_t n = read_some(rbuf_.data() + old, want);
    const int err = errno;
    rbuf_.resize(old + static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
    return after_recv(n, err);
  }
  std::unique_ptr<char[]> spare;
  char* buf = landing(this, spare);
  const ssize_t n = read_some(buf, kReadChunk);
  const int err = errno;
  if (n > 0) rbuf_.append(buf, static_cast<std::size_t>(n));
  return after_recv(n, err);
}

ByteStream::Io ByteStream::read_answer(std::string_view* got, std::size_t min, std::size_t max) {
  *got = {};
  if (fd_ < 0) return end("closed");
  if (ended_reading()) return Io::kEnd;
  if (tls_) return fill_tls(min);
  compact();  // empty: an idle stream keeps no buffer
  std::unique_ptr<char[]> spare;
  char* buf = landing(this, spare);
  const ssize_t n = read_some(buf, kReadChunk);
  const int err = errno;
  const Io r = after_recv(n, err);
  if (r != Io::kDone) return r;
  const auto came = static_cast<std::size_t>(n);
  if (came < min || spare) {  // not enough for the answer, or it cannot stay where it landed
    rbuf_.append(buf, came);
    return Io::kDone;
  }
  const std::size_t k = std::min(max, came);
  rbuf_.append(buf + k, came - k);
  chunk_lent_to = this;
  *got = {buf, k};
  return Io::kDone;
}

void ByteStream::taken() {
  if (chunk_lent_to == this) chunk_lent_to = nullptr;
  compact();
}

ByteStream::Io ByteStream::fill_tls(std::size_t want) {
  for (;;) {
    if (tls_->state() == TlsSession::State::Handshaking) {
      const Io h = handshake();
      if (h != Io::kDone) return h;
    }
    const std::size_t got = tls_->read(rbuf_, std::max(want, kReadChunk));
    if (!wbuf_.empty() || tls_->output_size() > 0) {  // a key update, a ticket: out when it can go
      tls_->take_output(wbuf_);
      (void)flush_tls();
    }
    if (got > 0) return Io::kDone;
    if (tls_->state() == TlsSession::State::Closed) {
      eof_ = true;
      return end("closed");
    }
    if (tls_->state() == TlsSession::State::Failed) return end(tls_->error());
    const Io r = recv_ciphertext();
    if (r != Io::kDone) return r;
  }
}

ByteStream::Io ByteStream::read_ahead(std::size_t bound) {
  if (fd_ < 0) return end("closed");
  if (ended_reading()) return Io::kEnd;
  if (buffered() >= bound) return Io::kDone;
  return fill(kReadChunk);
}

ByteStream::Io ByteStream::line(std::string& out, std::size_t limit) {
  for (;;) {
    const char* base = rbuf_.data() + rpos_;
    const std::size_t have = buffered();
    if (const void* nl = std::memchr(base + scan_, '\n', have - scan_)) {
      const std::size_t len = static_cast<std::size_t>(static_cast<const char*>(nl) - base);
      append_line(out, base, len);
      rpos_ += len + 1;
      scan_ = 0;
      compact();
      return Io::kDone;
    }
    scan_ = have;
    if (have >= limit) return end("limit: memory: a line longer than this process may hold");
    const Io r = fill(kReadChunk);
    if (r != Io::kDone) {
      if (r == Io::kAgain) compact();
      return r;
    }
  }
}

ByteStream::Io ByteStream::exactly(std::string_view* got, std::size_t n, std::size_t limit) {
  for (;;) {
    if (buffered() >= n) {
      *got = {rbuf_.data() + rpos_, n};
      rpos_ += n;
      scan_ = 0;
      return Io::kDone;
    }
    if (n > limit) return end("limit: memory: a receive of more than this process may hold");
    // Nothing buffered and a count one read may bring: answered from where
    // it lands, where it all comes at once.
    const Io r = buffered() == 0 && n <= kReadChunk ? read_answer(got, n, n) : fill(n - buffered());
    if (r == Io::kDone && !got->empty()) return r;
    if (r != Io::kDone) {
      if (r == Io::kAgain) compact();
      return r;
    }
  }
}

ByteStream::Io ByteStream::all(std::string& out, std::size_t limit) {
  for (;;) {
    if (ended_reading()) {
      if (error_.rfind("limit:", 0) == 0) return Io::kEnd;
      out.append(rbuf_.data() + rpos_, buffered());
      rpos_ = rbuf_.size();
      compact();
      return Io::kDone;
    }
    if (buffered() >= limit) return end("limit: memory: more than this process may hold");
    if (fill(kReadChunk) == Io::kAgain) return Io::kAgain;
  }
}

ByteStream::Io ByteStream::any(std::string_view* got, std::size_t max) {
  for (;;) {
    if (buffered() > 0) {
      const std::size_t k = std::min(max, buffered());
      *got = {rbuf_.data() + rpos_, k};
      rpos_ += k;
      scan_ = 0;
      return Io::kDone;
    }
    const Io r = read_answer(got, 1, max);
    if (r == Io::kDone && !got->empty()) return r;
    if (r != Io::kDone) {
      if (r == Io::kAgain) compact();
      return r;
    }
  }
}

std::string ByteStream::take_partial(char kind, std::size_t n) {
  std::string out;
  if (kind == 'n') {
    const std::size_t k = std::min(n, buffered());
    out.assign(rbuf_.data() + rpos_, k);
    rpos_ += k;
  } else if (kind == 'l') {
    append_line(out, rbuf_.data() + rpos_, buffered());
    rpos_ = rbuf_.size();
  } else {
    out.assign(rbuf_.data() + rpos_, buffered());
    rpos_ = rbuf_.size();
  }
  scan_ = 0;
  compact();
  return out;
}

ByteStream::Io ByteStream::write(std::string_view data, std::size_t* done) {
  if (fd_ < 0) return end("closed");
  if (tls_) {
    if (tls_->state() == TlsSession::State::Handshaking) {
      const Io h = handshake();
      if (h != Io::kDone) return h;
    }
    for (;;) {
      if (!wbuf_.empty()) {
        const Io f = flush_tls();
        if (f != Io::kDone) return f;
      }
      if (*done >= data.size()) return Io::kDone;
      const std::size_t k = std::min<std::size_t>(16 * 1024, data.size() - *done);
      if (!tls_->write(data.substr(*done, k))) return end(tls_->error());
      *done += k;
      tls_->take_output(wbuf_);
    }
  }
  while (*done < data.size()) {
    const ssize_t n = write_some(data.data() + *done, data.size() - *done);
    if (n > 0) {
      *done += static_cast<std::size_t>(n);
      bytes_out_ += static_cast<double>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      want_ = Want::kWrite;
      return Io::kAgain;
    }
    return end_errno(n < 0 ? errno : EPIPE);
  }
  return Io::kDone;
}

ByteStream::Io ByteStream::flush_tls() {
  std::size_t sent = 0;
  while (sent < wbuf_.size()) {
    const ssize_t n = ::send(fd_, wbuf_.data() + sent, wbuf_.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      bytes_out_ += static_cast<double>(n);
      continue;
    }
    wbuf_.erase(0, sent);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      want_ = Want::kWrite;
      return Io::kAgain;
    }
    if (tls_) tls_->abort("closed");
    return end_errno(n < 0 ? errno : EPIPE);
  }
  wbuf_.clear();
  return Io::kDone;
}

int ByteStream::shutdown(bool receive, bool send) {
  if (fd_ < 0) return ENOTCONN;
  const int how = receive && send ? SHUT_RDWR : receive ? SHUT_RD : SHUT_WR;
  if (receive) {
    eof_ = true;
    if (error_.empty()) error_ = "closed";
  }
  if (send && tls_ && tls_->state() == TlsSession::State::Open) {
    tls_->close();
    tls_->take_output(wbuf_);
    (void)flush_tls();
  }
  return ::shutdown(fd_, how) == 0 ? 0 : errno;
}

void ByteStream::start_tls(std::unique_ptr<TlsSession> session) { tls_ = std::move(session); }

ByteStream::Io ByteStream::handshake() {
  if (!tls_) return Io::kDone;
  for (;;) {
    if (!wbuf_.empty()) {
      const Io f = flush_tls();
      if (f != Io::kDone) return f;
    }
    const TlsSession::State st = tls_->handshake();
    tls_->take_output(wbuf_);
    if (!wbuf_.empty()) {
      const Io f = flush_tls();
      if (f != Io::kDone) return f;
    }
    if (st == TlsSession::State::Failed) return end(tls_->error());
    if (st != TlsSession::State::Handshaking) return Io::kDone;
    const Io r = recv_ciphertext();
    if (r != Io::kDone) return r;
  }
}

}  // namespace host::io

// One buffered stream over a non-blocking descriptor (docs/ARCHITECTURE.md,
// "Sockets on the workers"): the read buffer and LuaSocket's receive
// patterns, writes, and TLS (a TlsSession between the descriptor and the
// buffer), used by the task that owns the socket or a started program's
// pipe (kPipe: read(2) and write(2), as recv and send refuse a pipe), on
// its worker. A
// receive the buffer answers costs no system call; one that needs more
// reads until the pattern is met or the descriptor has nothing
// (kAgain: the caller waits for readiness, netpoll.hpp, and calls again).
//
// Bounds: the stream reads only while a receive asks (or read_ahead,
// below, up to its bound) (a peer that sends
// and never reads what it asked for stops being read: TCP makes it wait),
// at most kReadChunk beyond what the receive needs; a line is scanned
// once (scan_ remembers where the last look stopped); a receive fails
// with "limit: memory" rather than buffer more than the limit it is given.
// A receive of a count or of what has come (exactly, any) answers with a
// view, not a copy: a message read whole by one read goes from the read's
// landing place straight into the caller's string.
// Writes go straight to the kernel; under TLS the ciphertext that the
// kernel did not take waits in a buffer of at most about kWriteChunk.
//
// Threads: one at a time (the owning process's).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "host/io/tls_session.hpp"

namespace host::io {

class ByteStream {
 public:
  static constexpr std::size_t kReadChunk = 64 * 1024;
  static constexpr std::size_t kWriteChunk = 64 * 1024;

  // kAgain: nothing more now; wait until the descriptor is ready in
  // wants() and call again. kEnd: the stream ended or failed (error()).
  enum class Io { kDone, kAgain, kEnd };
  enum class Want { kRead, kWrite };

  // What the descriptor is: a socket, or one end of a pipe.
  enum class Kind { kSocket, kPipe };

  explicit ByteStream(int fd, Kind kind = Kind::kSocket) : fd_(fd), pipe_(kind == Kind::kPipe) {}
  ~ByteStream();
  ByteStream(const ByteStream&) = delete;
  ByteStream& operator=(const ByteStream&) = delete;

  int fd() const { return fd_; }
  // Closes the descriptor (after a TLS close_notify, sent where the
  // kernel takes it at once). Idempotent.
  void close();
  bool closed() const { return fd_ < 0; }

  // The receive patterns. line and all append what they take to out;
  // exactly and any answer with a view of the bytes where they lie (the
  // buffer, or the read's landing place), not a copy: *got holds until
  // the stream's next call, and taken() ends it once the bytes are used
  // (the buffer may shrink then). limit: the most the buffer may hold for
  // this receive. On kEnd, take_partial gives what a receive that ends
  // early returns, and error() why.
  Io line(std::string& out, std::size_t limit);
  Io all(std::string& out, std::size_t limit);
  Io exactly(std::string_view* got, std::size_t n, std::size_t limit);
  Io any(std::string_view* got, std::size_t max);
  void taken();
  // What is buffered, for a receive that ends early: a line's (carriage
  // returns dropped), up to n bytes ('n'), or everything ('a').
  std::string take_partial(char kind, std::size_t n);
  std::size_t buffered() const { return rbuf_.size() - rpos_; }
  // Bytes waiting in the buffer: LuaSocket's dirty().
  bool dirty() const { return buffered() > 0 || (tls_ && tls_->readable()); }

  // Reads what has come though no receive asks, while less than bound
  // is buffered (kDone at once past that; one read may pass it by up to
  // kReadChunk): how a server notices that its client left while it
  // answers (bindings/http_conn.cpp), and how a started program's output
  // is taken in while its process waits for it (bindings/exec_pipes.cpp).
  // kDone: bytes came (or the buffer is full); kAgain; kEnd: the peer
  // closed or the connection failed.
  Io read_ahead(std::size_t bound = kReadChunk);

  // Writes data from offset *done on; *done grows by what went.
  Io write(std::string_view data, std::size_t* done);
  // shutdown(2) of one or both halves: "receive", "send", "both".
  int shutdown(bool receive, bool send);

  // TLS: the session to go through from now on (what is buffered is
  // already plaintext: a protocol's STARTTLS leaves nothing unread).
  void start_tls(std::unique_ptr<TlsSession> session);
  bool tls() const { return tls_ != nullptr; }
  TlsSession* session() const { return tls_.get(); }
  // Drives the handshake: kDone once it is done.
  Io handshake();

  // Which readiness a kAgain waits for.
  Want wants() const { return want_; }
  // Why the stream ended: "closed", a TLS failure, "limit: memory ...",
  // or an errno's LuaSocket word.
  const std::string& error() const { return error_; }
  double bytes_in() const { return bytes_in_; }
  double bytes_out() const { return bytes_out_; }
  void set_stats(double in, double out) {
    bytes_in_ = in;
    bytes_out_ = out;
  }

 private:
  // Reads once more into the buffer (at least want bytes room): kDone when
  // bytes came, kAgain, kEnd.
  Io fill(std::size_t want);
  // With nothing buffered: reads once into the landing place and, where
  // at least min bytes came, answers up to max of them from there (*got;
  // the rest is buffered), else buffers them all (*got empty). kDone when
  // bytes came, kAgain, kEnd.
  Io read_answer(std::string_view* got, std::size_t min, std::size_t max);
  Io fill_tls(std::size_t want);
  // recv(2) for a socket, read(2) for a pipe; send(2) without SIGPIPE,
  // or write(2) with SIGPIPE blocked on this thread (the write answers
  // EPIPE where the reader is gone, the host goes on).
  ssize_t read_some(void* buf, std::size_t n);
  ssize_t write_some(const void* buf, std::size_t n);
  // One recv's result, whichever buffer it read into: kDone (counted),
  // kAgain (wait to read), kEnd (the peer closed, or an error).
  Io after_recv(ssize_t n, int err);
  // Reads ciphertext once and feeds it to the TLS session.
  Io recv_ciphertext();
  // Writes the TLS ciphertext waiting; kDone once none waits.
  Io flush_tls();
  Io end(std::string why);
  Io end_errno(int err);
  void compact();
  bool ended_reading() const { return eof_ || !error_.empty(); }

  int fd_;
  bool pipe_;
  std::string rbuf_;
  std::size_t rpos_ = 0;  // what receives took from rbuf_'s front
  std::size_t scan_ = 0;  // a line's search already looked up to here (from rpos_)
  bool eof_ = false;
  std::string error_;
  Want want_ = Want::kRead;
  std::unique_ptr<TlsSession> tls_;
  std::string wbuf_;  // TLS ciphertext the kernel has not taken
  double bytes_in_ = 0, bytes_out_ = 0;
};

// Ends a view that exactly or any answered with however the scope ends
// (a Lua string made from it may raise).
struct TakenGuard {
  explicit TakenGuard(ByteStream& s) : stream(s) {}
  ~TakenGuard() { stream.taken(); }
  TakenGuard(const TakenGuard&) = delete;
  TakenGuard& operator=(const TakenGuard&) = delete;
  ByteStream& stream;
};

// LuaSocket's word for an errno ("closed", "connection refused", ...).
std::string socket_errno_text(int err);

}  // namespace host::io

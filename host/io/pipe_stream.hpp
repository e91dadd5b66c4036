// A started program's pipe on the workers (docs/ARCHITECTURE.md, "Sockets
// on the workers"): the parent's end of a pipe, non-blocking, a slot of
// the netpoller's (registered at its first wait), its bytes through a ByteStream (kPipe), as a TCP
// client's are (tcp_socket.hpp). The program's end is made blocking, for
// the program to inherit as its stdin, stdout or stderr.
//
// Threads: one at a time (the owning process's).
#pragma once

#include "host/io/byte_stream.hpp"
#include "host/io/netpoll.hpp"

namespace host::io {

class PipeStream {
 public:
  // Takes fd (the parent's end, already non-blocking) and gives it a
  // poller slot.
  PipeStream(NetPoller& poller, int fd);
  ~PipeStream() { close(); }
  PipeStream(const PipeStream&) = delete;
  PipeStream& operator=(const PipeStream&) = delete;

  // False where the poller had no slot for it (open_error(): its errno).
  bool registered() const { return slot_ >= 0; }
  int open_error() const { return open_error_; }
  int slot() const { return slot_; }
  NetPoller& poller() const { return poller_; }
  ByteStream& stream() { return stream_; }
  // The poller first (a wait still armed completes), then the descriptor.
  // Idempotent.
  void close();
  bool closed() const { return stream_.closed(); }

 private:
  NetPoller& poller_;
  ByteStream stream_;
  int slot_;
  int open_error_ = 0;
};

// A pipe for a program's stdio: fds[0] reads, fds[1] writes; both
// close-on-exec (a program started meanwhile by another thread inherits
// neither: the spawn gives the program its end as 0, 1 or 2 itself), the
// parent's end (fds[0] when !parent_writes, else fds[1]) non-blocking.
// 0, or an errno.
int make_program_pipe(int fds[2], bool parent_writes);

}  // namespace host::io

// A program's pipe on the workers (pipe_stream.hpp).
#include "host/io/pipe_stream.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace host::io {

PipeStream::PipeStream(NetPoller& poller, int fd)
    : poller_(poller), stream_(fd, ByteStream::Kind::kPipe), slot_(poller.open(fd)) {
  if (slot_ < 0) open_error_ = errno;
}

void PipeStream::close() {
  if (stream_.closed()) return;
  if (slot_ >= 0) poller_.close(slot_);
  slot_ = -1;
  stream_.close();
}

int make_program_pipe(int fds[2], bool parent_writes) {
  if (::pipe2(fds, O_CLOEXEC) != 0) return errno;
  const int parent = fds[parent_writes ? 1 : 0];
  const int flags = ::fcntl(parent, F_GETFL);
  if (flags < 0 || ::fcntl(parent, F_SETFL, flags | O_NONBLOCK) != 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return err;
  }
  return 0;
}

}  // namespace host::io

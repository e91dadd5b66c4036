// The fs and exec commands' registration, and the exit hook (io_services.hpp).
#include "host/io/io_services.hpp"

#include "host/error.hpp"
#include "host/pid_table.hpp"
#include "host/scheduler.hpp"

namespace host::io {

namespace {

void arm_poll_wait(void* netpoll, Scheduler& s, ProcessSlot& slot, const Yield& y) {
  try {
    static_cast<NetPoller*>(netpoll)->arm(slot.pid(), y.tag);
  } catch (const std::exception& e) {  // its completion's event could not be queued
    s.complete_yield(slot.pid(), y.tag, {}, make_error(ErrorKind::Invalid, std::string("command poll failed: ") + e.what()));
  }
}

bool cancel_poll_wait(void* netpoll, Scheduler&, ProcessSlot& slot, std::uint64_t tag) {
  return static_cast<NetPoller*>(netpoll)->cancel(slot.pid(), tag);
}

}  // namespace

NetPoller::Complete IoServices::poll_completion(Scheduler& scheduler) {
  return [&scheduler, ready = CallResultWriter().boolean(true).finish()](const Pid& pid, std::uint64_t tag,
                                                                        std::string_view error) {
    if (error.empty()) scheduler.complete_yield_copy(pid, tag, ready);
    else scheduler.complete_yield(pid, tag, {}, std::string(error));
  };
}

std::shared_ptr<IoServices> install_io_services(Scheduler& scheduler, unsigned io_threads) {
  auto io = std::make_shared<IoServices>(scheduler, io_threads);
  // The workers poll the netpoller (the exit hook below keeps it alive as
  // long as they run); a second runtime on one scheduler polls its own.
  if (!scheduler.attach_idle_poller(&io->netpoll)) io->netpoll.poll_on_own_thread();
  CommandHandler fs;
  fs.name = "fs";
  fs.blocking = true;  // on the blocking pool: a slow disk holds no worker
  fs.run = [io](CommandRequest&& req) {
    std::vector<CallValue> args;
    if (!read_call_request(req, args)) return;
    std::string result;
    try {
      result = io->fs.handle(req.pid, args);
    } catch (const CallError& e) {
      req.scheduler->complete_yield(req.pid, req.tag, {}, e.text);
      return;
    }
    // A process that ended meanwhile (its exit hook may have run before
    // this call opened its file) must not leave the file open.
    if (!req.scheduler->complete_yield(req.pid, req.tag, std::move(result))) io->fs.close_owned(req.pid);
  };
  scheduler.commands().add(io_cmd::kFs, std::move(fs));

  CommandHandler exec;
  exec.name = "exec";
  exec.run = [io](CommandRequest&& req) { io->exec.dispatch(std::move(req)); };  // posts to the I/O thread
  scheduler.commands().add(io_cmd::kExec, std::move(exec));

  CommandHandler sockets;
  sockets.name = "socket";
  sockets.run = [io](CommandRequest&& req) { io->sockets.dispatch(std::move(req)); };  // posts to the I/O thread
  scheduler.commands().add(io_cmd::kSocket, std::move(sockets));

  // A socket's wait for readiness, on every message's path: a direct
  // handler (commands.hpp). The exit hook below holds io, and with it the
  // netpoller, as long as the scheduler dispatches.
  CommandHandler poll;
  poll.name = "poll";
  poll.direct = &arm_poll_wait;
  poll.direct_cancel = &cancel_poll_wait;
  poll.context = &io->netpoll;
  scheduler.commands().add(io_cmd::kPollWait, std::move(poll));

  // Before the process's monitors are told (Scheduler::finish): its files
  // and sockets are closed by then; its programs are killed by the I/O
  // thread.
  scheduler.add_exit_hook([io](const ExitInfo& info) {
    io->fs.close_owned(info.pid);
    io->exec.kill_owned(info.pid);
    io->sockets.close_owned(info.pid);  // waits for the I/O thread, when it has sockets
  });
  return io;
}

}  // namespace host::io

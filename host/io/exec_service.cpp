// Programs on the I/O thread: spawn, exec.run's pipes, waits, kills
// (exec_service.hpp).
#include "host/io/exec_service.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <string>

#include "host/error.hpp"
#include "host/log.hpp"
#include "host/scheduler.hpp"

extern char** environ;

namespace host::io {
namespace {

[[noreturn]] void fail(std::string text) { throw CallError{std::move(text)}; }

std::string uv_error(int rc, std::string_view what) {
  switch (rc) {
    case UV_ENOENT: return make_error(ErrorKind::NotFound, what);
    case UV_EACCES:
    case UV_EPERM: return make_error(ErrorKind::Denied, what);
    default: return make_error(ErrorKind::Io, std::string(what) + ": " + uv_strerror(rc));
  }
}

const CallValue& arg(const std::vector<CallValue>& args, std::size_t i) {
  static const CallValue nil;
  return i < args.size() ? args[i] : nil;
}

// Closes the program's ends of exec.start's pipes once the spawn is over
// (the program has its copies, or never started).
struct ChildEnds {
  std::array<int, 3> fds{-1, -1, -1};
  ~ChildEnds() {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
};

}  // namespace

// One of exec.run's outputs, read whole.
struct Stream {
  uv_pipe_t pipe{};
  bool open = false;  // initialised and not yet closing
  bool eof = false;   // the program closed it, or it failed
  std::string buf;
};

struct Waiter;

struct ExecService::Program {
  ExecService* svc = nullptr;
  std::uint64_t id = 0;
  Pid owner;
  int os_pid = 0;
  bool group_gone = false;  // its process group had no one left when it exited: the number may be reused
  bool collect = false;  // exec.run: everything read here, one completion
  std::size_t run_limit = SIZE_MAX;  // exec.run: what its output may hold
  Pid run_pid;
  std::uint64_t run_tag = 0;
  bool run_done = false;
  uv_process_t proc{};
  bool proc_open = false;
  uv_pipe_t in{};  // exec.run's (exec.start's pipes are its process's)
  bool in_open = false;
  Stream out, err;
  uv_timer_t timer{};  // exec.run's timeout
  bool timer_open = false;
  bool exited = false;
  std::int64_t code = 0;
  int signal = 0;
  std::vector<Waiter*> waiters;
  int handles = 0;          // handles whose close callback has not run
  bool forgotten = false;   // out of the table: deleted once handles is 0
};

// A wait() call, with its own timer when it has a timeout.
struct Waiter {
  ExecService::Program* p;
  Pid pid;
  std::uint64_t tag;
  uv_timer_t timer{};
  bool timed = false;
};

// The loop callbacks, friends of nothing: they reach the service through
// the program.
struct ProgramOps {
  using Program = ExecService::Program;

  static Scheduler& sched(Program* p) { return p->svc->scheduler_; }

  static void on_closed(uv_handle_t* h) {
    auto* p = static_cast<Program*>(h->data);
    if (--p->handles == 0 && p->forgotten) delete p;
  }
  static void close(Program* p, uv_handle_t* h, bool& open) {
    if (!open) return;
    open = false;
    uv_close(h, on_closed);
  }
  static void open_handle(Program* p, uv_handle_t* h, bool& open) {
    h->data = p;
    open = true;
    ++p->handles;
  }

  static void on_waiter_timer_closed(uv_handle_t* h) {
    auto* w = static_cast<Waiter*>(h->data);
    Program* p = w->p;
    delete w;
    if (--p->handles == 0 && p->forgotten) delete p;
  }
  // Removes w from its program's waiters and frees it (after its timer's
  // close, when it has one).
  static void drop_waiter(Waiter* w) {
    auto& ws = w->p->waiters;
    std::erase(ws, w);
    if (w->timed) uv_close(reinterpret_cast<uv_handle_t*>(&w->timer), on_waiter_timer_closed);
    else delete w;
  }

  static std::string status_result(Program* p) {
    CallResultWriter w;
    w.table(0, p->signal ? 2 : 1);
    w.key("code").number(static_cast<double>(p->code));
    if (p->signal) w.key("signal").number(p->signal);
    return w.finish();
  }

  static void on_exit(uv_process_t* proc, std::int64_t status, int term_signal) {
    auto* p = static_cast<Program*>(proc->data);
    p->exited = true;
    // Children it left behind keep its group (and so its number) in use;
    // with none, a later signal to the number could reach a stranger.
    if (::kill(-p->os_pid, 0) != 0 && errno == ESRCH) p->group_gone = true;
    p->signal = term_signal;
    // Killed by a signal: the shell's convention, 128 and its number.
    p->code = term_signal ? 128 + term_signal : status;
    for (Waiter* w : std::vector<Waiter*>(p->waiters)) {
      sched(p).complete_yield(w->pid, w->tag, status_result(p));
      drop_waiter(w);
    }
    close(p, reinterpret_cast<uv_handle_t*>(&p->proc), p->proc_open);
    check_run(p);
  }

  static void check_run(Program* p) {
    if (!p->collect || p->run_done || !p->exited || !p->out.eof || !p->err.eof) return;
    p->run_done = true;
    CallResultWriter w;
    w.table(0, p->signal ? 4 : 3);
    w.key("code").number(static_cast<double>(p->code));
    if (p->signal) w.key("signal").number(p->signal);
    w.key("stdout").string(p->out.buf);
    w.key("stderr").string(p->err.buf);
    sched(p).complete_yield(p->run_pid, p->run_tag, w.finish());
    p->svc->forget(p);
  }

  static void on_run_timeout(uv_timer_t* t) {
    auto* p = static_cast<Program*>(t->data);
    if (p->run_done) return;
    p->run_done = true;
    sched(p).complete_yield(p->run_pid, p->run_tag, {}, make_error(ErrorKind::Timeout));
    p->svc->forget(p);  // kills it
  }

  static void on_wait_timeout(uv_timer_t* t) {
    auto* w = static_cast<Waiter*>(t->data);
    sched(w->p).complete_yield(w->pid, w->tag, {}, make_error(ErrorKind::Timeout));
    drop_waiter(w);
  }

  static Stream& stream_of(Program* p, uv_stream_t* s) {
    return reinterpret_cast<uv_stream_t*>(&p->out.pipe) == s ? p->out : p->err;
  }

  static void on_alloc(uv_handle_t*, std::size_t, uv_buf_t* buf) {
    // One read at a time on the loop thread, copied out at once.
    static thread_local char chunk[65536];
    *buf = uv_buf_init(chunk, sizeof chunk);
  }

  static void on_read(uv_stream_t* s, ssize_t n, const uv_buf_t* buf) {
    auto* p = static_cast<Program*>(s->data);
    Stream& st = stream_of(p, s);
    if (n > 0) {
      st.buf.append(buf->base, static_cast<std::size_t>(n));
    } else if (n < 0) {  // UV_EOF, or a failure: no more data either way
      st.eof = true;
      close(p, reinterpret_cast<uv_handle_t*>(&st.pipe), st.open);
    }
    if (!p->run_done && p->out.buf.size() + p->err.buf.size() > p->run_limit) {
      p->run_done = true;
      sched(p).complete_yield(p->run_pid, p->run_tag, {},
                              make_error(ErrorKind::Limit, "memory (the program's output is more than the process may hold)"));
      p->svc->forget(p);  // kills it
      return;
    }
    check_run(p);
  }

  static void start_reading(Program* p, Stream& st) {
    if (!st.open || st.eof) return;
    uv_read_start(reinterpret_cast<uv_stream_t*>(&st.pipe), on_alloc, on_read);
  }

  struct Write {
    uv_write_t req{};
    std::string data;
    Program* p;
  };
  // exec.run's stdin: written whole, then closed.
  static void on_input_written(uv_write_t* req, int) {
    auto* w = static_cast<Write*>(req->data);
    close(w->p, reinterpret_cast<uv_handle_t*>(&w->p->in), w->p->in_open);
    delete w;
  }

  static void end_stream(Program* p, Stream& st) {
    close(p, reinterpret_cast<uv_handle_t*>(&st.pipe), st.open);
    st.eof = true;
    st.buf.clear();
  }

  // Signals the program's process group (it leads one: started
  // detached). 0 or a libuv error.
  static int signal_group(Program* p, int sig) {
    if (p->os_pid <= 0 || p->group_gone) return UV_ESRCH;
    return ::kill(-p->os_pid, sig) == 0 ? 0 : uv_translate_sys_error(errno);
  }

  // Closes everything of p's; kills the program and its process group. The
  // process handle stays until the exit comes (so the child is reaped),
  // unless `now` (the loop is stopping).
  static void shut(Program* p, bool now) {
    if (p->os_pid > 0) signal_group(p, SIGKILL);  // its children too, where it has exited before them
    close(p, reinterpret_cast<uv_handle_t*>(&p->in), p->in_open);
    end_stream(p, p->out);
    end_stream(p, p->err);
    close(p, reinterpret_cast<uv_handle_t*>(&p->timer), p->timer_open);
    for (Waiter* w : std::vector<Waiter*>(p->waiters)) drop_waiter(w);
    if (now || p->exited) close(p, reinterpret_cast<uv_handle_t*>(&p->proc), p->proc_open);
  }
};

ExecService::ExecService(Scheduler& scheduler, IoLoop& loop) : scheduler_(scheduler), loop_(loop) {
  loop_.on_stop([this](uv_loop_t*) { stop_all(); });
}

ExecService::~ExecService() {
  for (auto& [token, h] : handed_)
    for (int fd : h.fds) ::close(fd);
}

void ExecService::dispatch(CommandRequest&& req) {
  std::vector<CallValue> args;
  if (!read_call_request(req, args)) return;
  const Pid pid = req.pid;
  const std::uint64_t tag = req.tag;
  // A start's pipes (its fourth argument's token) are closed where it
  // never runs.
  const std::uint64_t token = args.size() > 3 && args[0].is_string() && args[0].string == "start" && args[3].is_number()
                                  ? static_cast<std::uint64_t>(args[3].number)
                                  : 0;
  if (!loop_.post([this, pid, tag, a = std::move(args)](uv_loop_t* loop) mutable { run_op(loop, pid, tag, std::move(a)); })) {
    if (token) drop_handed(pid, token);
    scheduler_.complete_yield(pid, tag, {}, make_error(ErrorKind::Canceled, "the host is stopping"));
  }
}

void ExecService::kill_owned(const Pid& owner) {
  if (handed_count_.load(std::memory_order_relaxed) != 0) {
    std::vector<int> fds;
    {
      std::lock_guard lock(handed_mu_);
      for (auto it = handed_.begin(); it != handed_.end();) {
        if (it->second.owner == owner) {
          fds.insert(fds.end(), it->second.fds.begin(), it->second.fds.end());
          it = handed_.erase(it);
        } else {
          ++it;
        }
      }
      handed_count_.store(handed_.size(), std::memory_order_relaxed);
    }
    for (int fd : fds) ::close(fd);
  }
  if (owners_.load(std::memory_order_relaxed) == 0) return;
  loop_.post([this, owner](uv_loop_t*) {
    auto it = owned_.find(owner);
    if (it == owned_.end()) return;
    const auto ids = it->second;
    for (std::uint64_t id : ids)
      if (auto p = programs_.find(id); p != programs_.end()) forget(p->second);
  });
}

std::uint64_t ExecService::hand_over(const Pid& owner, std::array<int, 3> fds) {
  std::lock_guard lock(handed_mu_);
  const std::uint64_t token = ++next_token_;
  handed_.emplace(token, Handed{owner, fds});
  handed_count_.store(handed_.size(), std::memory_order_relaxed);
  return token;
}

bool ExecService::take_handed(const Pid& caller, std::uint64_t token, std::array<int, 3>& fds) {
  std::lock_guard lock(handed_mu_);
  auto it = handed_.find(token);
  if (it == handed_.end() || !(it->second.owner == caller)) return false;
  fds = it->second.fds;
  handed_.erase(it);
  handed_count_.store(handed_.size(), std::memory_order_relaxed);
  return true;
}

void ExecService::drop_handed(const Pid& owner, std::uint64_t token) {
  std::array<int, 3> fds;
  if (!take_handed(owner, token, fds)) return;
  for (int fd : fds) ::close(fd);
}

ExecService::Program* ExecService::find(const Pid& caller, double id) {
  auto it = programs_.find(static_cast<std::uint64_t>(id));
  if (it == programs_.end() || !(it->second->owner == caller)) fail(make_error(ErrorKind::Invalid, "not a program of this process"));
  return it->second;
}

void ExecService::forget(Program* p) {
  if (p->forgotten) return;
  programs_.erase(p->id);
  if (auto o = owned_.find(p->owner); o != owned_.end()) {
    o->second.erase(p->id);
    if (o->second.empty()) owned_.erase(o);
  }
  count_.store(programs_.size(), std::memory_order_relaxed);
  owners_.store(owned_.size(), std::memory_order_relaxed);
  p->forgotten = true;
  ProgramOps::shut(p, false);
  if (p->handles == 0) delete p;
}

void ExecService::stop_all() {
  std::vector<Program*> all;
  for (auto& [id, p] : programs_) all.push_back(p);
  programs_.clear();
  owned_.clear();
  count_.store(0, std::memory_order_relaxed);
  owners_.store(0, std::memory_order_relaxed);
  for (Program* p : all) {
    p->forgotten = true;
    ProgramOps::shut(p, true);
    if (p->handles == 0) delete p;
  }
}

void ExecService::run_op(uv_loop_t* loop, const Pid& caller, std::uint64_t tag, std::vector<CallValue> args) {
  using Ops = ProgramOps;
  try {
    const CallValue& op = arg(args, 0);
    if (!op.is_string()) fail(make_error(ErrorKind::Invalid, "operation must be a string"));
    if (op.string == "run" || op.string == "start") return start(loop, caller, tag, args, op.string == "run");
    Program* p = find(caller, arg(args, 1).number);
    if (op.string == "wait") {
      if (p->exited) {
        scheduler_.complete_yield(caller, tag, Ops::status_result(p));
        return;
      }
      const CallValue& timeout = arg(args, 2);
      if (timeout.is_number() && timeout.number <= 0) {
        scheduler_.complete_yield(caller, tag, {}, make_error(ErrorKind::Timeout));
        return;
      }
      auto* w = new Waiter{p, caller, tag};
      p->waiters.push_back(w);
      if (timeout.is_number()) {
        uv_timer_init(loop, &w->timer);
        w->timer.data = w;
        w->timed = true;
        ++p->handles;
        uv_timer_start(&w->timer, Ops::on_wait_timeout, static_cast<std::uint64_t>(std::min(timeout.number, 3.2e7) * 1000 + 0.5), 0);
      }
      return;
    }
    if (op.string == "kill") {
      const int sig = arg(args, 2).is_number() ? static_cast<int>(arg(args, 2).number) : SIGTERM;
      if (int rc = Ops::signal_group(p, sig); rc != 0 && rc != UV_ESRCH) fail(uv_error(rc, "kill"));
      scheduler_.complete_yield(caller, tag, CallResultWriter().boolean(true).finish());
      return;
    }
    fail(make_error(ErrorKind::Invalid, "unknown exec operation '" + op.string + "'"));
  } catch (const CallError& f) {
    scheduler_.complete_yield(caller, tag, {}, f.text);
  }
}

std::size_t ExecService::room(const CallValue& heap) const {
  const double used = heap.is_number() ? std::max(0.0, heap.number) : 0.0;
  if (read_limit_ == SIZE_MAX) return SIZE_MAX;
  const std::size_t held = used >= static_cast<double>(read_limit_) ? read_limit_ : static_cast<std::size_t>(used);
  return (read_limit_ - held) / 2;
}

void ExecService::start(uv_loop_t* loop, const Pid& caller, std::uint64_t tag, const std::vector<CallValue>& args,
                        bool collect) {
  using Ops = ProgramOps;
  // exec.start's pipes: the program's ends, closed here whatever happens
  // (taken first, so that a start refused below closes them too).
  ChildEnds ends;
  if (!collect) {
    const CallValue& token = arg(args, 3);
    if (!token.is_number() || !take_handed(caller, static_cast<std::uint64_t>(token.number), ends.fds))
      fail(make_error(ErrorKind::Invalid, "start needs the pipes its process made (exec_pipes' token)"));
  }
  const CallValue& argv = arg(args, 1);
  const CallValue& opts = arg(args, 2);
  if (!argv.is_table() || argv.array.empty()) fail(make_error(ErrorKind::Invalid, "argv must be a table of strings"));
  // A NUL byte would end the C string the program is given there, so it
  // would run with another argument, directory or variable than the one
  // asked for.
  auto no_nul = [](const std::string& s, const std::string& what) {
    if (s.find('\0') != std::string::npos) fail(make_error(ErrorKind::Invalid, what + " contains a NUL byte"));
  };
  std::vector<std::string> words;
  for (const auto& v : argv.array) {
    if (!v.is_string()) fail(make_error(ErrorKind::Invalid, "argv must be a table of strings"));
    no_nul(v.string, "argv[" + std::to_string(words.size() + 1) + "]");
    words.push_back(v.string);
  }
  std::vector<char*> cargs;
  for (auto& w : words) cargs.push_back(w.data());
  cargs.push_back(nullptr);

  // The inherited environment, with opts.env's names replaced or added.
  std::vector<std::string> env_strings;
  std::vector<char*> env;
  const CallValue* extra = opts.field("env");
  if (extra && extra->is_table()) {
    std::vector<std::pair<std::string, std::string>> adds;
    for (const auto& [k, v] : extra->fields) {
      if (!k.is_string() || !(v.is_string() || v.is_number())) fail(make_error(ErrorKind::Invalid, "env must map names to strings"));
      no_nul(k.string, "an env name");
      if (v.is_string()) no_nul(v.string, "env['" + k.string + "']");
      std::string value = v.is_string() ? v.string : std::to_string(v.number);
      if (v.is_number() && v.number == static_cast<double>(static_cast<long long>(v.number)))
        value = std::to_string(static_cast<long long>(v.number));
      adds.emplace_back(k.string, value);
    }
    for (char** e = environ; e && *e; ++e) {
      std::string_view kv(*e);
      const auto eq = kv.find('=');
      const std::string_view name = kv.substr(0, eq);
      bool replaced = false;
      for (const auto& a : adds) replaced |= a.first == name;
      if (!replaced) env_strings.emplace_back(kv);
    }
    for (const auto& [k, v] : adds) env_strings.push_back(k + "=" + v);
    for (auto& s : env_strings) env.push_back(s.data());
    env.push_back(nullptr);
  }
  const CallValue* cwd = opts.field("cwd");
  if (cwd && cwd->is_string()) no_nul(cwd->string, "cwd");
  const CallValue* input = opts.field("stdin");
  const CallValue* timeout = opts.field("timeout");

  auto* p = new Program;
  p->svc = this;
  p->owner = caller;
  p->collect = collect;
  if (collect) p->run_limit = room(arg(args, 3));
  // Handles are counted from their init: each must be closed, a failed
  // spawn's too.
  auto init_pipe = [&](uv_pipe_t* pipe, bool& open) {
    uv_pipe_init(loop, pipe, 0);
    Ops::open_handle(p, reinterpret_cast<uv_handle_t*>(pipe), open);
  };
  uv_stdio_container_t stdio[3];
  if (collect) {
    init_pipe(&p->in, p->in_open);
    init_pipe(&p->out.pipe, p->out.open);
    init_pipe(&p->err.pipe, p->err.open);
    stdio[0].flags = static_cast<uv_stdio_flags>(UV_CREATE_PIPE | UV_READABLE_PIPE);
    stdio[0].data.stream = reinterpret_cast<uv_stream_t*>(&p->in);
    stdio[1].flags = static_cast<uv_stdio_flags>(UV_CREATE_PIPE | UV_WRITABLE_PIPE);
    stdio[1].data.stream = reinterpret_cast<uv_stream_t*>(&p->out.pipe);
    stdio[2].flags = static_cast<uv_stdio_flags>(UV_CREATE_PIPE | UV_WRITABLE_PIPE);
    stdio[2].data.stream = reinterpret_cast<uv_stream_t*>(&p->err.pipe);
  } else {
    // The ends exec_pipes made: the child gets them as 0, 1 and 2.
    for (int i = 0; i < 3; ++i) {
      stdio[i].flags = UV_INHERIT_FD;
      stdio[i].data.fd = ends.fds[static_cast<std::size_t>(i)];
    }
  }
  uv_process_options_t o{};
  o.file = cargs[0];
  o.args = cargs.data();
  o.env = env.empty() ? nullptr : env.data();
  o.cwd = cwd && cwd->is_string() ? cwd->string.c_str() : nullptr;
  o.exit_cb = Ops::on_exit;
  // Its own process group (a new session), so that a timeout, a kill and
  // its owner's end reach the children it started too (a shell's
  // pipeline, `sh -c "...; ..."`), not only the program itself.
  o.flags = UV_PROCESS_DETACHED;
  o.stdio_count = 3;
  o.stdio = stdio;
  const int rc = uv_spawn(loop, &p->proc, &o);
  Ops::open_handle(p, reinterpret_cast<uv_handle_t*>(&p->proc), p->proc_open);  // initialised even when it failed
  if (rc != 0) {
    p->exited = true;  // nothing to kill or reap
    p->forgotten = true;
    Ops::shut(p, true);
    // A missing cwd fails the spawn as a missing program would: name it.
    if (rc == UV_ENOENT && o.cwd && ::access(o.cwd, F_OK) != 0) fail(uv_error(rc, cwd->string));
    fail(uv_error(rc, words[0]));
  }
  p->id = ++next_id_;
  p->os_pid = p->proc.pid;
  programs_.emplace(p->id, p);
  owned_[caller].insert(p->id);
  count_.store(programs_.size(), std::memory_order_relaxed);
  owners_.store(owned_.size(), std::memory_order_relaxed);
  // Its process may have ended since it asked: its exit hook then found
  // nothing to kill (the registration above and alive()'s lock order
  // the two), so the program goes now.
  if (!scheduler_.alive(caller)) {
    forget(p);
    return;
  }
  if (!collect) {
    CallResultWriter w;
    w.number(static_cast<double>(p->id)).number(p->os_pid);
    scheduler_.complete_yield(caller, tag, w.finish());
    return;
  }
  Ops::start_reading(p, p->out);
  Ops::start_reading(p, p->err);
  p->run_pid = caller;
  p->run_tag = tag;
  if (input && input->is_string() && !input->string.empty()) {
    auto* w = new Ops::Write{{}, input->string, p};
    w->req.data = w;
    uv_buf_t b = uv_buf_init(w->data.data(), static_cast<unsigned>(w->data.size()));
    if (uv_write(&w->req, reinterpret_cast<uv_stream_t*>(&p->in), &b, 1, Ops::on_input_written) != 0) {
      delete w;
      Ops::close(p, reinterpret_cast<uv_handle_t*>(&p->in), p->in_open);
    }
  } else {
    Ops::close(p, reinterpret_cast<uv_handle_t*>(&p->in), p->in_open);  // the program reads end of file
  }
  if (timeout && timeout->is_number()) {
    uv_timer_init(loop, &p->timer);
    Ops::open_handle(p, reinterpret_cast<uv_handle_t*>(&p->timer), p->timer_open);
    uv_timer_start(&p->timer, Ops::on_run_timeout, static_cast<std::uint64_t>(std::min(std::max(0.0, timeout->number), 3.2e7) * 1000 + 0.5), 0);
  }
}

}  // namespace host::io

// Native C++ processes for the scheduler tests: a process whose Step is a
// lambda, and a collector of exits to wait on.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <mutex>
#include <span>
#include <string>

#include "host/process.hpp"
#include "host/scheduler.hpp"

namespace host::testing {

class FnProcess final : public Process {
 public:
  using StepFn = std::function<void(FnProcess&, std::span<Event>, StepOutput&)>;
  explicit FnProcess(StepFn fn, std::atomic<int>* closes = nullptr, std::string init_error = {})
      : fn_(std::move(fn)), closes_(closes), init_error_(std::move(init_error)) {}

  std::string Init(const ProcessContext& ctx, const std::string& method, std::string input) override {
    ctx_ = ctx;
    method_ = method;
    input_ = std::move(input);
    return init_error_;
  }
  void Step(std::span<Event> events, StepOutput& out) override {
    ++steps;
    fn_(*this, events, out);
  }
  void Close() override {
    if (closes_) closes_->fetch_add(1);
  }

  const ProcessContext& ctx() const { return ctx_; }
  const std::string& method() const { return method_; }
  const std::string& input() const { return input_; }
  int steps = 0;
  std::uint64_t counter = 0;  // free for the step function's use
  std::string scratch;

 private:
  StepFn fn_;
  std::atomic<int>* closes_;
  std::string init_error_;
  ProcessContext ctx_;
  std::string method_, input_;
};

template <typename F>
std::unique_ptr<Process> make_fn(F&& f, std::atomic<int>* closes = nullptr) {
  return std::make_unique<FnProcess>(FnProcess::StepFn(std::forward<F>(f)), closes);
}

// Records every exit the scheduler reports. The hook shares ownership of
// the record, so the log may be destroyed before the scheduler (whose
// destructor still finishes processes and calls the hook).
class ExitLog {
 public:
  explicit ExitLog(Scheduler& s) : state_(std::make_shared<State>()) {
    s.add_exit_hook([state = state_](const ExitInfo& info) {
      std::lock_guard lock(state->mu);
      state->exits[info.pid] = info;
      ++state->count;
      state->cv.notify_all();
    });
  }
  bool wait(const Pid& pid, std::chrono::milliseconds limit = std::chrono::seconds(20)) {
    std::unique_lock lock(state_->mu);
    return state_->cv.wait_for(lock, limit, [&] { return state_->exits.count(pid) > 0; });
  }
  bool wait_count(std::size_t n, std::chrono::milliseconds limit) {
    std::unique_lock lock(state_->mu);
    return state_->cv.wait_for(lock, limit, [&] { return state_->count >= n; });
  }
  ExitInfo get(const Pid& pid) {
    std::lock_guard lock(state_->mu);
    return state_->exits.at(pid);
  }
  std::size_t count() {
    std::lock_guard lock(state_->mu);
    return state_->count;
  }
  std::size_t failures() {
    std::lock_guard lock(state_->mu);
    std::size_t n = 0;
    for (auto& [pid, info] : state_->exits) n += info.failed;
    return n;
  }
  std::string first_failure() {
    std::lock_guard lock(state_->mu);
    for (auto& [pid, info] : state_->exits)
      if (info.failed) return pid.to_string() + ": " + info.error;
    return {};
  }

 private:
  struct PidLess {
    bool operator()(const Pid& a, const Pid& b) const {
      return std::tie(a.node, a.index, a.generation) < std::tie(b.node, b.index, b.generation);
    }
  };
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::map<Pid, ExitInfo, PidLess> exits;
    std::size_t count = 0;
  };
  std::shared_ptr<State> state_;
};

inline void done(StepOutput& out, std::string result = {}) {
  out.status = Status::Done;
  out.result = std::move(result);
}
inline void fail(StepOutput& out, std::string error) {
  out.status = Status::Failed;
  out.error = std::move(error);
}

}  // namespace host::testing

// HostFinalizers: the host's own userdata that hold something outside
// the Lua state (a socket, an HTTP connection, the acceptor's handle on
// one) and free it in their __gc. A process's end runs them itself and
// then drops its state whole (the arena's chunks go back at once), where
// lua_close would free every object one at a time: a tenth of a new HTTP
// connection's cost. lua_close stays for states that may hold finalizers
// the host does not know (io, ffi, newproxy, C modules).
//
// Each such userdata embeds a HostFinalizer, tracked from the moment it is
// made (before it gets its metatable, so __gc never sees one untracked);
// whoever comes first (its __gc, or the process's end) runs it, once:
// both through run_once.
// Threads: the one running the process.
#pragma once

struct lua_State;

namespace host::lua {

struct HostFinalizer {
  using Run = void (*)(lua_State* L, void* object);
  HostFinalizer* prev = nullptr;
  HostFinalizer* next = nullptr;
  Run run = nullptr;  // null when not tracked (never, or taken)
  void* object = nullptr;
};

class HostFinalizers {
 public:
  void track(HostFinalizer* f, HostFinalizer::Run run, void* object) {
    f->run = run;
    f->object = object;
    f->prev = nullptr;
    f->next = head_;
    if (head_) head_->prev = f;
    head_ = f;
  }
  // True once for a tracked f, which is then no longer tracked: the
  // caller runs it.
  bool take(HostFinalizer* f) {
    if (!f->run) return false;
    if (f->prev) f->prev->next = f->next;
    else head_ = f->next;
    if (f->next) f->next->prev = f->prev;
    f->prev = f->next = nullptr;
    f->run = nullptr;
    return true;
  }
  // Runs a tracked f once (untracked first, so a finalizer that raises
  // or reenters is never run twice); an untracked f is left alone.
  void run_once(lua_State* L, HostFinalizer* f) {
    const HostFinalizer::Run run = f->run;
    void* object = f->object;
    if (take(f)) run(L, object);
  }
  HostFinalizer* first() const { return head_; }

 private:
  HostFinalizer* head_ = nullptr;
};

// For the bindings (bindings/lua_process_modules.cpp): track f in L's
// process; and, from a __gc, run f unless the process's end ran it.
void track_finalizer(lua_State* L, HostFinalizer* f, HostFinalizer::Run run, void* object);
void run_finalizer(lua_State* L, HostFinalizer* f);

}  // namespace host::lua

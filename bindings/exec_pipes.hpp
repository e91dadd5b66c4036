// A started program's pipes on the worker (docs/ARCHITECTURE.md, "Programs'
// pipes on the workers"): exec.start's stdin, stdout and stderr objects,
// whose methods read and write the parent's ends themselves, through a
// ByteStream, and wait on the netpoller only where the pipe would block,
// as a TCP socket's do (bindings/socket_tcp.cpp). Threads: the one
// running the process.
#pragma once

struct lua_State;

namespace host::lua {

// exec_pipes() -> token, stdin, stdout, stderr: three pipes made for a
// program, the parent's ends in the objects (closed by their __gc, or the
// process's end), the program's ends handed to the exec service under
// token (the "start" call's last argument: the spawn takes them, and
// closes them here). nil, "io: ..." where the pipes cannot be made.
// exec_pipes(delta, stdout, stderr): a task starts (1) or ends (-1) its
// wait for the program; while any task waits, its stdout and stderr are
// read ahead into their buffers (up to 1 MiB each), so that a program
// whose output nobody receives yet can run to its end.
int exec_pipes(lua_State* L);

}  // namespace host::lua

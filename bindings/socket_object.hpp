// Socket objects (docs/LUA_API.md, socket): the userdata a process holds for a
// socket, and their methods, in C. Threads: the one running the process.
//
// Why C: LuaJIT cannot share prototypes between states, so methods
// written in Lua cost every process that holds a socket their bytecode
// (socket.lua's made a process 65 KB larger); a process a connection is
// the model, so the methods live here, once, and a process pays only for
// its objects and one metatable. bindings/socket.lua keeps the module's
// functions (constructors, dns, the LuaSocket helpers), which only a
// process that requires the module loads.
//
// A TCP socket's methods run on the worker (bindings/socket_tcp.cpp); a
// UDP socket's each is one waiting call on the I/O thread (host/io/
// socket_service.cpp), which also shapes its results, so that the
// method's C function can return straight from its yield. A UDP result
// that is a socket (socket.udp's) or that changes a socket's class
// (setpeername) comes back as a moved value (codec.hpp), which
// decode_socket turns into the object or the class change; a TCP socket
// moves between processes as itself ('~' before its class, TcpTransit).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

struct lua_State;

namespace host::lua {

// The moved-value hooks for sockets (codec.hpp's MovedValueHooks).
// encode_socket writes the socket object at idx as a moved value and
// marks it given away (its methods answer closed from then on); false for
// any other userdata. decode_socket pushes the object for a moved value:
// a socket that came from another process (claimed for this one), a new
// socket of this process ('+' before its class), or a class change of
// one this process holds ('=' before its class: pushes 1).
bool encode_socket(lua_State* L, int idx, std::string& out);
bool decode_socket(lua_State* L, std::uint64_t id, std::string_view cls);

// A send or spawn whose value may carry sockets: begin before encoding
// it; where the send or spawn then fails (or the encoding does), undo
// gives the sockets it moved back to their objects here, so a failed
// move leaves the socket with its sender. (Moves the receiver's Init
// already claimed cannot come back.)
void socket_moves_begin();
void socket_moves_undo(lua_State* L);

}  // namespace host::lua

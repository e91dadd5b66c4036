// The host's own modules (module_registry.hpp). A new module is one line
// here, its Lua half (bindings/NAME.lua) and its service; nothing else
// lists modules.
#include "bindings/module_registry.hpp"

#include "bindings/shared_table.hpp"
#include "bindings/socket_ref.hpp"
#include "host/io/io_services.hpp"

namespace host::lua {

namespace {

namespace io_cmd = ::host::io::io_cmd;
using K = ModuleKind;

constexpr ModuleLine kModules[] = {
    // {name, kind, global, command, install, source, alias, open}
    {"process", K::kProcess, true},
    {"channel", K::kKernel, true},
    {"time", K::kTime, true},
    {"log", K::kLog, true},
    {"coroutine", K::kKernel, true},  // the kernel's wrapper: blocking calls reach the scheduler
    {"fs", K::kLuaHalf, true, io_cmd::kFs},
    {"exec", K::kLuaHalf, true, io_cmd::kExec},
    // Shadows LuaSocket's C core (which would block a worker); LuaSocket's
    // Lua modules (socket.http, socket.url) load from the system's path on
    // top of it.
    {"socket", K::kLuaHalf, false, io_cmd::kSocket, nullptr, nullptr, "socket.core"},
    {"shared", K::kNative, false, 0, nullptr, nullptr, nullptr, open_shared},
    {"host.http", K::kNative, false, 0, nullptr, nullptr, nullptr, open_http_conn},  // http.serve's connections

    {"host.call", K::kHostCall},
    {"host.commands", K::kHostCommands},
    {"host.stats", K::kHostStats},
    {"host.reloaded", K::kHostReloaded},
};

}  // namespace

std::span<const ModuleLine> host_modules() { return kModules; }

}  // namespace host::lua

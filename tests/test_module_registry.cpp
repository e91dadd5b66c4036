// The module registry (bindings/module_registry.hpp): a module added by one
// line, with its Lua half and its service (the test-only echo module,
// tests/modules/), is reached by scripts as the host's own are; a wrong
// line stops the runtime with an error that names it.
#include <doctest/doctest.h>

#include <chrono>
#include <stdexcept>
#include <string>

#include <lua.hpp>

#include "bindings/codec.hpp"
#include "bindings/lua_runtime.hpp"
#include "bindings/module_registry.hpp"
#include "tests/modules/echo_service.hpp"
#include "tests/native_processes.hpp"
#include "tests/watchdog.hpp"

using namespace host;
using namespace host::testing;
using namespace std::chrono_literals;

namespace host::lua {
extern const char* const k_echo_source;  // tests/modules/echo.lua, embedded by CMakeLists.txt
}

namespace {

constexpr CommandId kEcho = io::io_cmd::kFirstEmbedder + 1;
constexpr CommandId kQuiet = io::io_cmd::kFirstEmbedder + 2;

// The echo module's registry line: the recipe's one line.
lua::ModuleLine echo_line() {
  return {"echo", lua::ModuleKind::kLuaHalf, true, kEcho, &install_echo, lua::k_echo_source};
}

std::string text_of(const std::string& bytes) {
  lua_State* L = luaL_newstate();
  std::string err, out;
  if (lua::decode_values(L, bytes, &err) == 1 && lua_type(L, 1) == LUA_TSTRING) out = lua_tostring(L, 1);
  lua_close(L);
  return out;
}

struct Runtime {
  Watchdog dog{"module registry", 120s};
  Scheduler s{{.workers = 2}};
  lua::LuaRuntime rt;
  ExitLog exits{s};
  explicit Runtime(std::vector<lua::ModuleLine> modules)
      : rt{s, {.dir = HOST_TEST_SCRIPTS, .modules = std::move(modules)}} {}
  ~Runtime() { s.shutdown(0ms); }

  ExitInfo run(const char* method, std::string args = std::string(1, '\0')) {
    auto p = rt.spawn(std::string("fixtures.module_registry:") + method, std::move(args));
    REQUIRE_MESSAGE(p, p.error);
    REQUIRE(exits.wait(p.pid));
    return exits.get(p.pid);
  }
  std::string result(const char* method) {
    ExitInfo info = run(method);
    REQUIRE_MESSAGE(!info.failed, info.error);
    return text_of(info.result);
  }
};

// The error a runtime with these lines fails with; empty when it is made.
std::string refusal(std::vector<lua::ModuleLine> modules) {
  Scheduler s{{.workers = 1}};
  try {
    lua::LuaRuntime rt{s, {.dir = HOST_TEST_SCRIPTS, .modules = std::move(modules)}};
    s.shutdown(0ms);
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

}  // namespace

TEST_CASE("a module added by one registry line is a global and require's, and its calls reach its service") {
  Runtime r{{echo_line()}};
  CHECK(r.result("main") == "HI,THERE|true|true|" + std::to_string(kEcho));
}

TEST_CASE("a registry module's service frees what a process held when it ends, by returning or failing") {
  Runtime r{{echo_line()}};
  REQUIRE(echo_service);
  CHECK(r.result("hold") == "held");
  lua_State* L = luaL_newstate();
  lua_pushboolean(L, 1);
  std::string fail;
  REQUIRE(lua::encode_values(L, 1, 1, fail).empty());
  lua_close(L);
  CHECK(r.run("hold", fail).failed);
  std::lock_guard lock(echo_service->mu);
  CHECK(echo_service->holders.empty());
}

TEST_CASE("a registry module that is not global is reached by require only") {
  lua::ModuleLine quiet{"quiet", lua::ModuleKind::kLuaHalf, false, kQuiet, nullptr, "return {}"};
  Runtime r{{echo_line(), quiet}};
  CHECK(r.result("hidden") == "nil|table");
}

TEST_CASE("a Lua half is compiled at its first use: one that does not compile fails only the process using it") {
  lua::ModuleLine broken{"broken", lua::ModuleKind::kLuaHalf, true, kQuiet, nullptr, "return {"};
  Runtime r{{broken}};
  CHECK(r.result("plain") == "plain");
  ExitInfo info = r.run("broken");
  CHECK(info.failed);
  CHECK_MESSAGE(info.error.find("the broken module does not compile") != std::string::npos, info.error);
}

TEST_CASE("a registry line that clashes or lacks its Lua half stops the runtime, naming it") {
  using K = lua::ModuleKind;
  CHECK(refusal({echo_line()}).empty());
  const std::string twice = refusal({{"fs", K::kLuaHalf, true, kEcho, nullptr, "return {}"}});
  CHECK_MESSAGE(twice.find("module 'fs' is registered twice") != std::string::npos, twice);
  const std::string shared = refusal({{"mine", K::kLuaHalf, true, io::io_cmd::kFs, nullptr, "return {}"}});
  CHECK_MESSAGE(shared.find("modules 'fs' and 'mine' share command " + std::to_string(io::io_cmd::kFs)) !=
                    std::string::npos,
                shared);
  const std::string none = refusal({{"nothing", K::kLuaHalf, true, kEcho}});
  CHECK_MESSAGE(none.find("module 'nothing' has no Lua half (no bindings/nothing.lua is embedded") !=
                    std::string::npos,
                none);
  const std::string low = refusal({{"low", K::kLuaHalf, true, 3, nullptr, "return {}"}});
  CHECK_MESSAGE(low.find("module 'low': command 3 is below") != std::string::npos, low);
}

TEST_CASE("every host module with a Lua half has it embedded, and it compiles") {
  Runtime r{std::vector<lua::ModuleLine>{}};
  REQUIRE(r.rt.module_lines().size() == lua::host_modules().size());
  for (const lua::ModuleLine& m : r.rt.module_lines()) {  // module_chunk takes the runtime's own lines
    if (m.kind != lua::ModuleKind::kLuaHalf) continue;
    CAPTURE(m.name);
    CHECK(lua::embedded_lua(m.name) != nullptr);
    std::string err;
    CHECK_MESSAGE(r.rt.module_chunk(m, &err) != nullptr, err);
  }
}

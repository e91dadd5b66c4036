#!/usr/bin/env bash
# The rooms' rule, checked on the sources: includes point down only,
#   host/program/ -> bindings/ -> host/io/ -> host/ (the runtime core).
# host/ outside host/program/ includes neither Lua nor bindings/; the core
# includes nothing of host/io/ or host/program/; bindings/ nothing of
# host/program/. The LuaJIT private-layout seam (luajit_private.hpp) is
# included only inside bindings/luajit/. Exits 1, naming each offending
# line, when one breaks it.
set -euo pipefail
cd "$(dirname "$0")/.."
lua_headers='<(lua|lualib|lauxlib|luajit|luaconf)(\.h|\.hpp)>'
bad=0
check() {  # check WHAT PATTERN FILES...: every include matching PATTERN is a fault
  local what="$1" pattern="$2"; shift 2
  local hits
  hits=$(grep -nE "^[[:space:]]*#[[:space:]]*include[[:space:]]*(${pattern})" "$@" 2>/dev/null || true)
  if [ -n "$hits" ]; then
    echo "layout: $what:"; echo "$hits" | sed 's/^/  /'; bad=1
  fi
}
core=$(find host -maxdepth 1 -name '*.[ch]pp' | sort)
io=$(find host/io -name '*.[ch]pp' | sort)
bindings=$(find bindings -name '*.[ch]pp' | sort)
outside_seam=$(find host bindings tests -name '*.[ch]pp' -not -path 'bindings/luajit/*' | sort)
# shellcheck disable=SC2086
check "the runtime core (host/) includes Lua, bindings/, host/io/ or host/program/" \
  "${lua_headers}|\"(bindings|host/io|host/program)/" $core
# shellcheck disable=SC2086
check "the I/O layer (host/io/) includes Lua, bindings/ or host/program/" \
  "${lua_headers}|\"(bindings|host/program)/" $io
# shellcheck disable=SC2086
check "bindings/ includes the program (host/program/)" '"host/program/' $bindings
# shellcheck disable=SC2086
check "a file outside bindings/luajit/ includes the private layout (luajit_private.hpp)" \
  '"([^"]*/)?luajit_private\.hpp"' $outside_seam
if [ "$bad" -ne 0 ]; then exit 1; fi
echo "layout: includes point down (host/program -> bindings -> host/io -> host); luajit_private.hpp stays in bindings/luajit/"

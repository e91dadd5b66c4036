#!/usr/bin/env bash
# The seam's absence, checked on the objects: a build with
# -DHOST_LUAJIT_PRIVATE=OFF (PUBLIC_DIR) holds no symbol of the LuaJIT
# private-layout seam in libhostlua.a or the host program, and the default
# build (PRIVATE_DIR) holds the ones it must (so that the check can fail).
#   tests/check_seam_symbols.sh PUBLIC_DIR PRIVATE_DIR
# Exits 1, naming each offending symbol, when either breaks.
set -euo pipefail
cd "$(dirname "$0")/.."
public="${1:?usage: tests/check_seam_symbols.sh PUBLIC_DIR PRIVATE_DIR}"
private="${2:?usage: tests/check_seam_symbols.sh PUBLIC_DIR PRIVATE_DIR}"

# Every symbol of the seam, by namespace or name (nm -C's spelling): the
# layout and its checks, the availability flag, the raw table walk and
# array writes, stack_args' private half, and the two users whose whole
# code is private.
forbidden='host::lua::luajit_private::|host::lua::seam::|host::lua::table_walk::|host::lua::raw_slots::|host::lua::stack_args::detail::|host::lua::gc_pressure::|host::lua::small_globals::|host::lua::small_strings::|check_raw_tables|raw_table\(|RawValue|RawSink'
# Symbols the default build keeps out of line whatever the optimiser
# inlines: each must be there, or the pattern above has gone stale.
required=(
  'host::lua::luajit_private::layout_holds()'
  'host::lua::seam::checked()'
  'host::lua::seam::detail::ok'
  'check_raw_tables()'
  'host::lua::gc_pressure::collect_sooner('
  'host::lua::small_globals::take_scratch()'
  'host::lua::small_strings::take_scratch()'
)

symbols() {  # symbols DIR: every symbol, defined or not, of the library and the program
  local dir="$1" f
  for f in "$dir/libhostlua.a" "$dir/host"; do
    [ -e "$f" ] || { echo "seam symbols: $f is missing (build $dir first)" >&2; exit 1; }
    nm -C "$f" 2>/dev/null | sed "s|^|$(basename "$f"): |"
  done
}

bad=0
hits=$(symbols "$public" | grep -E "$forbidden" || true)
if [ -n "$hits" ]; then
  echo "seam symbols: the build without the seam ($public) holds private code:"
  echo "$hits" | sed 's/^/  /' | sort -u | head -50
  bad=1
fi
have=$(symbols "$private")
for s in "${required[@]}"; do
  if ! grep -qF -- "$s" <<<"$have"; then
    echo "seam symbols: the default build ($private) lacks $s"
    bad=1
  fi
done
if [ "$bad" -ne 0 ]; then exit 1; fi
echo "seam symbols: none in $public; the expected ones in $private"

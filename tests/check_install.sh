#!/usr/bin/env bash
# Installs the build in BUILD to a temporary prefix and runs the installed
# program there, without HOST_STDLIB: scripts/hello must run, and a stdlib
# module must come from PREFIX/share/host/stdlib, not from the sources.
#   tests/check_install.sh [BUILD]   (default build/)
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
prefix="$(mktemp -d)"
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
test -x "$prefix/bin/host" || { echo "install: no $prefix/bin/host" >&2; exit 1; }
test -f "$prefix/share/host/stdlib/supervisor.lua" || { echo "install: no stdlib under $prefix/share/host" >&2; exit 1; }
# libnats is opened only by --cluster (host/cluster/nats_loader.hpp): a
# dependency of the program would cost every start the dynamic linker's
# work for it.
if ldd "$prefix/bin/host" | grep -q libnats; then
  echo "install: $prefix/bin/host is linked with libnats, which only --cluster should open:" >&2
  ldd "$prefix/bin/host" >&2
  exit 1
fi
env -u HOST_STDLIB "$prefix/bin/host" run scripts/hello >/dev/null
out="$(env -u HOST_STDLIB "$prefix/bin/host" run tests/install 2>&1)"
case "$out" in
  *"stdlib from $prefix/share/host/stdlib/supervisor.lua"*) ;;
  *) echo "install: the installed host did not load its own stdlib:" >&2; echo "$out" >&2; exit 1 ;;
esac
echo "install: $prefix/bin/host runs scripts/hello and loads its stdlib from $prefix/share/host/stdlib"

#!/usr/bin/env bash
# Instructions per new HTTP connection (BENCHMARKS.md, "A new connection's
# cost"): the host under callgrind serves scripts/httpbench with one worker
# while a client makes N connections one after another, each one
# `GET /` with `Connection: close`; the whole program's count (start-up
# included, under 1%) divided by N. Instruction counts barely move with
# the machine's load, where wall-clock figures on a shared VM do.
#   tests/bench/conn_cost.sh [HOST_BIN] [N]     (default build-release/host, 2200)
# HOST_STDLIB picks the stdlib (to measure an older binary with its own).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-build-release/host}
n=${2:-2200}
command -v valgrind >/dev/null 2>&1 || { echo "conn_cost: valgrind is not installed" >&2; exit 1; }
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
# Port 0: the kernel picks a free one, which the server logs as it listens.
valgrind --tool=callgrind --callgrind-out-file="$out/cg" "$bin" run scripts/httpbench --workers 1 \
  --log-level info -- 0 >"$out/log" 2>&1 &
server=$!
port=
for _ in $(seq 600); do  # the server starts slowly under valgrind
  port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$out/log")
  [ -n "$port" ] && break
  kill -0 "$server" 2>/dev/null || { cat "$out/log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { echo "conn_cost: the server did not start" >&2; exit 1; }
python3 - "$port" "$n" <<'PY'
import socket, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
ok = 0
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        d = s.recv(4096)
        if not d:
            break
        data += d
    s.close()
    ok += b"Hello, World!" in data
if ok != n:
    sys.exit("conn_cost: %d of %d requests answered" % (ok, n))
PY
kill -INT "$server"
wait "$server" || true
total=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$out/log")
[ -n "$total" ] || { cat "$out/log" >&2; exit 1; }
echo "$n connections: $total instructions, $((total / n)) per connection"

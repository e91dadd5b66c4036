#!/usr/bin/env bash
# A receive the buffer can answer: the host's receive("*l") and receive(8)
# against Python's buffered reader (readline, read(8)) on the same data
# from the same local server, side by side in one run; each figure is the
# median of RUNS runs of COUNT receives, in nanoseconds a receive. Then
# redis-lua through the host's sockets against redis-benchmark's client on
# the same redis-server: PING one at a time, and HGETALL of a hash of
# FIELDS fields (microseconds a call).
#   scripts/dev receive [--quick] [--runs N]
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/bench/side_by_side.sh  # bench_args, ratio, median
bench_args receive "$@"
count=2000000
[ -z "$quick" ] || count=200000
host_bin=${HOST_BIN:-build/host}
port=17170
printf '| receive | host ns | python ns | host/python |\n|---|---|---|---|\n'
for pattern in '*l' 8; do
  port=$((port + 1))
  python3 tests/bench/peers/receive.py serve "$port" "$count" "$pattern" > /tmp/receive-serve.$$ &
  server=$!
  for _ in $(seq 50); do grep -q ready /tmp/receive-serve.$$ 2>/dev/null && break; sleep 0.1; done
  h=() p=()
  for ((r = 1; r <= runs; r++)); do
    h+=("$("$host_bin" run tests/bench/receive --workers 1 --log-level warn -- "$port" "$count" "$pattern" | sed -n 's/^RECEIVE_NS //p')")
    p+=("$(python3 tests/bench/peers/receive.py read "$port" "$count" "$pattern" | sed -n 's/^RECEIVE_NS //p')")
  done
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  hm=$(printf '%s\n' "${h[@]}" | median) pm=$(printf '%s\n' "${p[@]}" | median)
  printf '| receive(%s) | %s | %s | %s |\n' "$pattern" "$hm" "$pm" "$(ratio "$hm" "$pm")"
done
rm -f /tmp/receive-serve.$$

command -v redis-server >/dev/null 2>&1 || { echo "(no redis-server: the redis table is left out)"; exit 0; }
fields=69000 pings=$((count / 20)) rounds=5
port=$((port + 1))
dir=$(mktemp -d)
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" >/dev/null &
redis=$!
trap 'kill $redis 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
python3 - "$port" "$fields" <<'PY'
import socket, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
c = socket.create_connection(("127.0.0.1", port))
cmd = [b"HSET", b"bench:hash"]
for i in range(n):
    cmd += [b"field:%d" % i, b"value:%d" % i]
c.sendall(b"*%d\r\n" % len(cmd) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in cmd))
assert c.recv(100).startswith(b":")
PY
hp=() hh=() bp=() bh=()
for ((r = 1; r <= runs; r++)); do
  out=$("$host_bin" run tests/bench/receive --entry redis_calls --workers 1 --log-level warn -- "$port" "$pings" bench:hash "$rounds")
  hp+=("$(sed -n 's/^PING_US //p' <<<"$out")") hh+=("$(sed -n 's/^HGETALL_US //p' <<<"$out")")
  rps=$(redis-benchmark -p "$port" -c 1 -n "$pings" -q ping 2>/dev/null | tr '\r' '\n' | sed -n 's/.*: \([0-9.]*\) requests per second.*/\1/p' | tail -1)
  bp+=("$(awk -v r="$rps" 'BEGIN { printf "%.2f", 1e6 / r }')")
  rps=$(redis-benchmark -p "$port" -c 1 -n "$rounds" -q hgetall bench:hash 2>/dev/null | tr '\r' '\n' | sed -n 's/.*: \([0-9.]*\) requests per second.*/\1/p' | tail -1)
  bh+=("$(awk -v r="$rps" 'BEGIN { printf "%.1f", 1e6 / r }')")
done
a=$(printf '%s\n' "${hp[@]}" | median) b=$(printf '%s\n' "${bp[@]}" | median)
c=$(printf '%s\n' "${hh[@]}" | median) d=$(printf '%s\n' "${bh[@]}" | median)
echo
printf '| redis call (one connection) | host us | redis-benchmark us | host/redis-benchmark |\n|---|---|---|---|\n'
printf '| PING | %s | %s | %s |\n' "$a" "$b" "$(ratio "$a" "$b")"
printf '| HGETALL, %d fields | %s | %s | %s |\n' "$fields" "$c" "$d" "$(ratio "$c" "$d")"

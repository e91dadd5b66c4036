#!/usr/bin/env bash
# A receive the buffer can answer: the host's receive("*l") and receive(8)
# against Python's buffered reader (readline, read(8)) on the same data
# from the same local server, side by side in one run; each figure is the
# median of RUNS runs of COUNT receives, in nanoseconds a receive.
#   scripts/dev receive [--quick] [--runs N]
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=3
count=2000000
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) count=200000 ;;
    --runs) runs="$2"; shift ;;
    *) echo "receive: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
host_bin=${HOST_BIN:-build/host}
port=17170
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
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
  printf '| receive(%s) | %s | %s | %s |\n' "$pattern" "$hm" "$pm" "$(awk -v a="$hm" -v b="$pm" 'BEGIN { printf "%.2fx", a / b }')"
done
rm -f /tmp/receive-serve.$$

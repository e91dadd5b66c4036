#!/usr/bin/env bash
# The host against Erlang/OTP and Go on the Savina shapes, side by side in
# one run: each benchmark runs host, Erlang, Go in turn, RUNS times, and the
# table shows median seconds and the ratios host/Erlang and host/Go (below
# 1.0 means the host is faster). Every implementation checks its results.
# A second table gives spawn-and-idle memory: the RSS that 100k processes
# (goroutines for Go) blocked in receive add, per process.
#   scripts/dev compare [--quick] [--runs N]
# (Called by scripts/dev, which has installed the packages and built host.)
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=3
quick=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick="--quick" ;;
    --runs) runs="$2"; shift ;;
    *) echo "compare: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

benches=(pingpong counting threadring100 threadring1000 fj_throughput fj_create big chameneos fib idle_memory)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

(cd tests/bench/peers && GOCACHE="${GOCACHE:-$out/gocache}" go build -o "$OLDPWD/build/savina-go" savina.go)

run_one() {  # run_one IMPL NAME: runs one benchmark, appends its seconds (and KB per process, if it measures memory)
  local output line mem
  case "$1" in
    host) output=$(build/host run scripts/bench --max-processes 200000 -- "$2" $quick 2>&1 || true) ;;
    erlang) output=$(escript tests/bench/peers/savina.erl "$2" $quick 2>&1 || true) ;;
    go) output=$(build/savina-go "$2" $quick 2>&1 || true) ;;
  esac
  line=$(grep -a "RESULT $2 " <<<"$output" || true)
  [ -n "$line" ] || { echo "compare: $1 $2 did not report a result:" >&2; tail -5 <<<"$output" >&2; exit 1; }
  echo "${line##* }" >> "$out/$2.$1"
  mem=$(grep -a "MEMORY $2 " <<<"$output" || true)
  [ -z "$mem" ] || echo "${mem##* }" >> "$out/$2.$1.mem"
}

median() { sort -g "$1" | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

for b in "${benches[@]}"; do
  for ((r = 1; r <= runs; r++)); do
    for impl in host erlang go; do run_one "$impl" "$b"; done
  done
done

echo "host vs Erlang/OTP vs Go: median of $runs alternating runs${quick:+ (quick parameters)}"
echo "machine: $(nproc) cores, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
echo "versions: $(build/host --version); Erlang/OTP $(erl -noshell -eval 'io:format("~s", [erlang:system_info(otp_release)]), halt().'); $(go version | awk '{ print $3 }')"
echo
printf '| %-15s | %10s | %10s | %10s | %12s | %9s |\n' benchmark "host s" "erlang s" "go s" "host/erlang" "host/go"
printf '|%s|%s|%s|%s|%s|%s|\n' "-----------------" "------------" "------------" "------------" "--------------" "-----------"
for b in "${benches[@]}"; do
  h=$(median "$out/$b.host"); e=$(median "$out/$b.erlang"); g=$(median "$out/$b.go")
  printf '| %-15s | %10.4f | %10.4f | %10.4f | %12s | %9s |\n' "$b" "$h" "$e" "$g" \
    "$(awk -v a="$h" -v b="$e" 'BEGIN { printf "%.2fx", a / b }')" "$(awk -v a="$h" -v b="$g" 'BEGIN { printf "%.2fx", a / b }')"
done

echo
echo "spawn-and-idle memory (KB of RSS per process, median; Go: a goroutine and its 256-slot channel mailbox)"
echo
printf '| %-15s | %10s | %10s | %10s | %12s | %9s |\n' benchmark "host KB" "erlang KB" "go KB" "host/erlang" "host/go"
printf '|%s|%s|%s|%s|%s|%s|\n' "-----------------" "------------" "------------" "------------" "--------------" "-----------"
for b in "${benches[@]}"; do
  [ -f "$out/$b.host.mem" ] || continue
  h=$(median "$out/$b.host.mem"); e=$(median "$out/$b.erlang.mem"); g=$(median "$out/$b.go.mem")
  printf '| %-15s | %10.2f | %10.2f | %10.2f | %12s | %9s |\n' "$b" "$h" "$e" "$g" \
    "$(awk -v a="$h" -v b="$e" 'BEGIN { printf "%.2fx", a / b }')" "$(awk -v a="$h" -v b="$g" 'BEGIN { printf "%.2fx", a / b }')"
done

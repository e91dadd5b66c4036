#!/usr/bin/env bash
# The host against Erlang/OTP and Go on the Savina shapes, side by side in
# one run: each benchmark runs host, Erlang, Go in turn, RUNS times, and the
# table shows median seconds and the ratios host/Erlang and host/Go (below
# 1.0 means the host is faster). Every implementation checks its results.
# A second table gives spawn-and-idle memory: the RSS that 100k processes
# (goroutines for Go) blocked in receive add, per process.
#   scripts/dev compare [--quick] [--runs N] [--workers N]
# --workers N gives each runtime N scheduler threads (host --workers N,
# Erlang +S N:N, Go GOMAXPROCS=N); without it each uses every core.
# (Called by scripts/dev, which has installed the packages and built host.
# Where no Go toolchain is installed but build/savina-go is, that binary is
# used as it is: a machine that cannot fetch packages can still compare.)
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=3
quick=""
workers=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick="--quick" ;;
    --runs) runs="$2"; shift ;;
    --workers) workers="$2"; shift ;;
    *) echo "compare: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

benches=(pingpong counting threadring100 threadring1000 fj_throughput fj_create big chameneos fib idle_memory)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

source tests/bench/run_one.sh
build_go_peer
sfx="${workers:+.w$workers}"  # the suffix run_one gives its result files

for b in "${benches[@]}"; do
  for ((r = 1; r <= runs; r++)); do
    for impl in host erlang go; do run_one "$impl" "$b" "$workers"; done
  done
done

echo "host vs Erlang/OTP vs Go: median of $runs alternating runs${quick:+ (quick parameters)}${workers:+, $workers scheduler threads each}"
describe_machine
echo "versions: $(build/host --version); Erlang/OTP $(erl -noshell -eval 'io:format("~s", [erlang:system_info(otp_release)]), halt().'); $(build/savina-go version)"
echo
printf '| %-15s | %10s | %10s | %10s | %12s | %9s |\n' benchmark "host s" "erlang s" "go s" "host/erlang" "host/go"
printf '|%s|%s|%s|%s|%s|%s|\n' "-----------------" "------------" "------------" "------------" "--------------" "-----------"
for b in "${benches[@]}"; do
  h=$(median "$out/$b.host$sfx"); e=$(median "$out/$b.erlang$sfx"); g=$(median "$out/$b.go$sfx")
  printf '| %-15s | %10.4f | %10.4f | %10.4f | %12s | %9s |\n' "$b" "$h" "$e" "$g" \
    "$(awk -v a="$h" -v b="$e" 'BEGIN { printf "%.2fx", a / b }')" "$(awk -v a="$h" -v b="$g" 'BEGIN { printf "%.2fx", a / b }')"
done

echo
echo "spawn-and-idle memory (KB of RSS per process, median; Go: a goroutine and its 256-slot channel mailbox)"
echo
printf '| %-15s | %10s | %10s | %10s | %12s | %9s |\n' benchmark "host KB" "erlang KB" "go KB" "host/erlang" "host/go"
printf '|%s|%s|%s|%s|%s|%s|\n' "-----------------" "------------" "------------" "------------" "--------------" "-----------"
for b in "${benches[@]}"; do
  [ -f "$out/$b.host$sfx.mem" ] || continue
  h=$(median "$out/$b.host$sfx.mem"); e=$(median "$out/$b.erlang$sfx.mem"); g=$(median "$out/$b.go$sfx.mem")
  printf '| %-15s | %10.2f | %10.2f | %10.2f | %12s | %9s |\n' "$b" "$h" "$e" "$g" \
    "$(awk -v a="$h" -v b="$e" 'BEGIN { printf "%.2fx", a / b }')" "$(awk -v a="$h" -v b="$g" 'BEGIN { printf "%.2fx", a / b }')"
done

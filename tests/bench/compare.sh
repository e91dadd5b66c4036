#!/usr/bin/env bash
# The host against Erlang/OTP and Go on the Savina shapes, side by side in
# one run: each benchmark runs host, Erlang, Go in turn, RUNS times, and the
# table shows median seconds and the ratios host/Erlang and host/Go (below
# 1.0 means the host is faster). Every implementation checks its results.
# A second table gives each one's fastest run and their ratios: on a shared
# machine whose neighbours slow a run by up to 2-3x, the fastest of several
# is the least disturbed, the closest to what each runtime itself costs.
# A third gives spawn-and-idle memory: the RSS that 100k processes
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

benches=(pingpong counting threadring100 threadring1000 fj_throughput fj_create big chameneos fib request server_call idle_memory)
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
# rows STAT UNIT SUFFIX FORMAT: the table of STAT (median or fastest) of
# each benchmark's files ending in SUFFIX.
rows() {
  local stat="$1" unit="$2" suffix="$3" fmt="$4" b h e g
  printf '| %-15s | %10s | %10s | %10s | %12s | %9s |\n' benchmark "host $unit" "erlang $unit" "go $unit" "host/erlang" "host/go"
  printf '|%s|%s|%s|%s|%s|%s|\n' "-----------------" "------------" "------------" "------------" "--------------" "-----------"
  for b in "${benches[@]}"; do
    [ -f "$out/$b.host$sfx$suffix" ] || continue
    h=$($stat "$out/$b.host$sfx$suffix"); e=$($stat "$out/$b.erlang$sfx$suffix"); g=$($stat "$out/$b.go$sfx$suffix")
    printf "| %-15s | $fmt | $fmt | $fmt | %12s | %9s |\n" "$b" "$h" "$e" "$g" \
      "$(awk -v a="$h" -v b="$e" 'BEGIN { printf "%.2fx", a / b }')" "$(awk -v a="$h" -v b="$g" 'BEGIN { printf "%.2fx", a / b }')"
  done
}
fastest() { sort -g "$1" | head -1; }

rows median s "" "%10.4f"
echo
echo "fastest of the $runs runs of each (the least disturbed by the machine's other load)"
echo
rows fastest s "" "%10.4f"
echo
echo "spawn-and-idle memory (KB of RSS per process, median; Go: a goroutine and its 256-slot channel mailbox)"
echo
rows median KB .mem "%10.2f"

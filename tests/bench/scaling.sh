#!/usr/bin/env bash
# How each benchmark's time changes with the number of scheduler threads:
# runs scripts/bench at 1, 2, 4, ... workers up to every core, RUNS times
# each (the worker counts alternate, so drift on a shared machine falls on
# all of them), and prints the median seconds and the speedup over one
# worker. With --peers, Erlang/OTP (+S N:N) and Go (GOMAXPROCS=N) run at the
# same counts, so a runtime's scaling can be told from the machine's.
#   scripts/dev scaling [--quick] [--runs N] [--peers] [--max N] [BENCH...]
# (Called by scripts/dev, which has built host and, with --peers, installed
# the peers' packages. Speedup above 1 means faster than one worker.)
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=3
quick=""
impls=(host)
max=$(nproc)
benches=()
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick="--quick" ;;
    --runs) runs="$2"; shift ;;
    --peers) impls=(host erlang go) ;;
    --max) max="$2"; shift ;;
    -*) echo "scaling: unknown option $1" >&2; exit 2 ;;
    *) benches+=("$1") ;;
  esac
  shift
done
[ ${#benches[@]} -gt 0 ] || benches=(pingpong counting threadring100 threadring1000 fj_throughput fj_create big chameneos fib)

counts=()
for ((w = 1; w < max; w *= 2)); do counts+=("$w"); done
counts+=("$max")

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
source tests/bench/run_one.sh
[ "${impls[*]}" = host ] || build_go_peer

for b in "${benches[@]}"; do
  for ((r = 1; r <= runs; r++)); do
    for w in "${counts[@]}"; do
      for impl in "${impls[@]}"; do run_one "$impl" "$b" "$w"; done
    done
  done
done

echo "seconds by scheduler threads: median of $runs runs${quick:+ (quick parameters)}, speedup over 1 thread in brackets"
describe_machine
echo
header="| benchmark       | impl   |"
rule="|-----------------|--------|"
for w in "${counts[@]}"; do header+="$(printf ' %16s |' "$w")"; rule+="------------------|"; done
echo "$header"
echo "$rule"
for b in "${benches[@]}"; do
  for impl in "${impls[@]}"; do
    one=$(median "$out/$b.$impl.w1")
    row="$(printf '| %-15s | %-6s |' "$b" "$impl")"
    for w in "${counts[@]}"; do
      s=$(median "$out/$b.$impl.w$w")
      row+="$(awk -v s="$s" -v one="$one" 'BEGIN { printf " %7.4f (%5.2fx) |", s, one / s }')"
    done
    echo "$row"
  done
done

# Sourced by the benchmarks that set the host beside its peers in one run
# (cluster.sh, receive.sh, shared.sh): the command line, the figures read
# from a program's output, the alternating runs and the ratios, which each
# of them wrote out alike. Brings run_one.sh's median and describe_machine.
source tests/bench/run_one.sh

# bench_args NAME ARGS...: the common command line, [--quick] [--runs N].
# Sets bench (NAME, for messages), quick ("--quick" or empty, passed on as
# is to the programs that take it) and runs (3 unless given). Anything
# else is a usage error naming it.
bench_args() {
  bench="$1"
  shift
  runs=3
  quick=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --quick) quick="--quick" ;;
      --runs)
        [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || { echo "$bench: --runs needs a count of 1 or more, not '${2:-}'" >&2; exit 2; }
        runs="$2"
        shift ;;
      *) echo "$bench: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
  done
}

# figure OUTPUT KIND NAME [KEY]: the last field of OUTPUT's last "PER_OP
# NAME" or "FIGURE NAME KEY" line; exits (the caller) when there is none:
# a crash or a failed check must not look like a figure.
figure() {
  local line
  line=$(grep -a "$2 $3 ${4:+$4 }" <<<"$1" | tail -1 || true)
  [ -n "$line" ] || { echo "$bench: no $2 $3 $4 in:" >&2; tail -5 <<<"$1" >&2; exit 1; }
  echo "${line##* }"
}

# alternate STEP...: each step in turn, $runs times over, so that a slow
# spell of the machine falls on every runtime alike.
alternate() {
  local r step
  for ((r = 1; r <= runs; r++)); do
    for step in "$@"; do "$step"; done
  done
}

# ratio A B: A over B, as the tables print it (below 1.00x the host is faster).
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }

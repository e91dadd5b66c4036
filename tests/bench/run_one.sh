# Sourced by compare.sh and scaling.sh (and, for median and describe_machine,
# by side_by_side.sh): runs one benchmark of one runtime
# and appends its figures to files under $out (which the caller made).
#   run_one IMPL NAME [WORKERS]
# IMPL is host, erlang or go. WORKERS, when given and not empty, is the
# number of scheduler threads (host --workers, Erlang +S N:N, Go
# GOMAXPROCS); otherwise each runtime uses every core. Appends the seconds
# to $out/NAME.IMPL[.wWORKERS] and, for a benchmark that measures memory,
# KB per process to the same name with .mem after it. $quick is passed on.
# Exits (the caller) when the run printed no result: a crash or a failed
# check must not look like a figure.

# Builds build/savina-go from the Go peer, or keeps a prebuilt one where no
# Go toolchain is installed (a machine that cannot fetch packages).
build_go_peer() {
  if command -v go >/dev/null 2>&1; then
    (cd tests/bench/peers && GOCACHE="${GOCACHE:-$out/gocache}" go build -o "$OLDPWD/build/savina-go" savina.go)
  elif [ ! -x build/savina-go ]; then
    echo "bench: no Go toolchain and no build/savina-go" >&2; exit 1
  fi
}

run_one() {
  local impl="$1" name="$2" workers="${3:-}" output line mem file
  local host_args=() erl_flags="${ERL_FLAGS:-}" go_procs="${GOMAXPROCS:-}"
  if [ -n "$workers" ]; then
    host_args=(--workers "$workers")
    erl_flags="$erl_flags +S $workers:$workers"
    go_procs="$workers"
  fi
  case "$impl" in
    host) output=$(build/host run scripts/bench "${host_args[@]}" --max-processes 200000 -- "$name" $quick 2>&1 || true) ;;
    erlang) output=$(ERL_FLAGS="$erl_flags" escript tests/bench/peers/savina.erl "$name" $quick 2>&1 || true) ;;
    go) output=$(GOMAXPROCS="$go_procs" build/savina-go "$name" $quick 2>&1 || true) ;;
  esac
  line=$(grep -a "RESULT $name " <<<"$output" || true)
  [ -n "$line" ] || { echo "bench: $impl $name${workers:+ ($workers workers)} did not report a result:" >&2; tail -5 <<<"$output" >&2; exit 1; }
  file="$out/$name.$impl${workers:+.w$workers}"
  echo "${line##* }" >> "$file"
  mem=$(grep -a "MEMORY $name " <<<"$output" || true)
  [ -z "$mem" ] || echo "${mem##* }" >> "$file.mem"
}

# The machine line both tables start with.
describe_machine() {
  echo "machine: $(nproc) cores, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
}

# The median of the numbers in FILE, one a line, or of those on stdin.
median() { sort -g "$@" | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

#!/usr/bin/env bash
# The TCP echo benchmark: the host (scripts/echo, a process a connection)
# against Go's net (a goroutine a connection) and Erlang's gen_tcp (a
# process a connection), side by side in one run, each given the same
# cores. One Go load generator (tests/bench/peers/echo.go) drives all three:
# each connection sends a message, waits for it back, and again; it prints
# messages per second and the 50th/99th percentile round trip.
# Then memory: the server's RSS growth per idle connection (its process or
# goroutine included), over IDLE connections.
#   scripts/dev echo [--quick] [--workers N] [--seconds S]
set -euo pipefail
cd "$(dirname "$0")/../.."
workers=2
secs=5
idle=10000
big=10000
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) secs=1; idle=1000; big=1000 ;;
    --workers) workers="$2"; shift ;;
    --seconds) secs="$2"; shift ;;
    *) echo "echo: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

source tests/bench/servers.sh
host_bin=${HOST_BIN:-build/host}  # scripts/dev echo builds it as Release
gobin=build/echo-go
build_go echo.go "$gobin"
have_erl=0
command -v escript >/dev/null 2>&1 && have_erl=1

port=17070
start_server() {  # start_server NAME
  port=$((port + 1))
  case "$1" in
    host) "$host_bin" run scripts/echo --workers "$workers" --log-level warn -- "$port" & ;;
    go) GOMAXPROCS="$workers" "$gobin" server "$port" & ;;
    erlang) ERL_FLAGS="+S $workers:$workers" escript tests/bench/peers/echo.erl "$port" & ;;
  esac
  started "$1" "$port"
}

peers=(host go)
[ "$have_erl" = 1 ] && peers+=(erlang)
configs=("100 64" "100 65536" "$big 64")

printf '%-8s %-22s %14s %10s %10s\n' peer config "messages/s" "p50 us" "p99 us"
for cfg in "${configs[@]}"; do
  read -r conns size <<<"$cfg"
  for peer in "${peers[@]}"; do
    start_server "$peer"
    read -r rate p50 p99 < <(GOMAXPROCS="$workers" "$gobin" client "127.0.0.1:$port" "$conns" "$size" "$secs")
    stop_server
    printf '%-8s %-22s %14s %10s %10s\n' "$peer" "${conns} conns x ${size} B" "$rate" "$p50" "$p99"
    echo "$rate" >"$out/$peer.$conns.$size"
  done
  if [ -f "$out/go.$conns.$size" ]; then
    awk -v h="$(cat "$out/host.$conns.$size")" -v g="$(cat "$out/go.$conns.$size")" \
      'BEGIN { printf "         host / go: %.2fx\n", h / g }'
  fi
done

echo
printf '%-8s %26s\n' peer "KB per idle connection"
for peer in "${peers[@]}"; do
  start_server "$peer"
  sleep 0.3
  before=$(rss_kb "$server_pid")
  coproc IDLE { "$gobin" idle "127.0.0.1:$port" "$idle"; }
  read -r ready <&"${IDLE[0]}"
  sleep 0.5
  after=$(rss_kb "$server_pid")
  exec {IDLE[1]}>&-
  wait "$IDLE_PID" 2>/dev/null || true
  stop_server
  awk -v b="$before" -v a="$after" -v n="$idle" -v p="$peer" 'BEGIN { printf "%-8s %26.1f\n", p, (a - b) / n }'
done

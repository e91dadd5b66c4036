#!/usr/bin/env bash
# The HTTP benchmark (issue 44): the host (scripts/httpbench, a process a
# connection) against Go's net/http (tests/bench/peers/http.go) and nginx
# with the distribution's lua module (tests/bench/peers/nginx_lua.conf,
# OpenResty's content_by_lua_block), side by side in one run, each server
# given the same cores. wrk drives each: keep-alive, CONNS connections,
# hello world and a small JSON endpoint; requests per second and the
# latency percentiles, and the requests served per CPU-second of the
# server (its own time, the load generator's left out: the figure that
# holds on a busy machine). A third row per server makes a new connection
# per request (Connection: close). Then memory: each server's RSS growth per idle
# keep-alive connection (one request made on it; its process, goroutine
# or nginx's connection included), over IDLE connections.
#   scripts/dev http [--quick] [--workers N] [--seconds S] [--conns N]
set -euo pipefail
cd "$(dirname "$0")/../.."
workers=2
secs=5
conns=64
idle=5000
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) secs=1; idle=500 ;;
    --workers) workers="$2"; shift ;;
    --seconds) secs="$2"; shift ;;
    --conns) conns="$2"; shift ;;
    *) echo "http: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

source tests/bench/servers.sh
host_bin=${HOST_BIN:-build/host}  # scripts/dev http builds it as Release
gobin=build/http-go
build_go http.go "$gobin"
command -v wrk >/dev/null 2>&1 || { echo "http: wrk is not installed" >&2; exit 1; }
http_peer_names

port=18180
start_server() {  # start_server NAME
  port=$((port + 1))
  start_http_server "$1" "$workers" "$port"
}

printf '%-10s %-7s %12s %9s %9s %9s %12s\n' server path "requests/s" "p50" "p90" "p99" "req/CPU-s"
tick=$(getconf CLK_TCK)
for path in hello json close; do
  url=$path header=()
  if [ "$path" = close ]; then url=hello header=(-H "Connection: close"); fi
  for peer in "${peers[@]}"; do
    start_server "$peer"
    wrk -t2 -c"$conns" -d1s "${header[@]}" "http://127.0.0.1:$port/$url" >/dev/null 2>&1 || true  # warm up (JIT, pools)
    cpu0=$(cpu_ticks "$server_pid")
    wrk -t2 -c"$conns" -d"${secs}s" "${header[@]}" --latency "http://127.0.0.1:$port/$url" >"$out/wrk" 2>&1
    cpu1=$(cpu_ticks "$server_pid")
    stop_server
    rate=$(awk '/^Requests\/sec/ { print $2 }' "$out/wrk")
    p50=$(awk '$1 == "50%" { print $2 }' "$out/wrk")
    p90=$(awk '$1 == "90%" { print $2 }' "$out/wrk")
    p99=$(awk '$1 == "99%" { print $2 }' "$out/wrk")
    if grep -q "Non-2xx\|Socket errors" "$out/wrk"; then grep "Non-2xx\|Socket errors" "$out/wrk" >&2; fi
    per_cpu=$(awk -v r="$rate" -v s="$secs" -v t=$((cpu1 - cpu0)) -v k="$tick" 'BEGIN { printf "%.0f", (t > 0 ? r * s / (t / k) : 0) }')
    printf '%-10s %-7s %12s %9s %9s %9s %12s\n' "$peer" "/$path" "$rate" "$p50" "$p90" "$p99" "$per_cpu"
    echo "$rate $per_cpu" >"$out/$peer.$path"
  done
  for peer in go nginx-lua; do
    [ -f "$out/$peer.$path" ] || continue
    read -r hr hc <"$out/host.$path"
    read -r pr pc <"$out/$peer.$path"
    awk -v hr="$hr" -v hc="$hc" -v pr="$pr" -v pc="$pc" -v p="$peer" \
      'BEGIN { printf "           host / %s: %.2fx requests/s, %.2fx per CPU-second\n", p, hr / pr, (pc > 0 ? hc / pc : 0) }'
  done
done

echo
# Twice: half a second after the last request, and after 3 s, past the
# host's hibernate_after (0.1 s), when an idle connection has given its
# process up.
echo "KB per idle keep-alive connection ($idle connections)"
printf '%-10s %14s %14s\n' server "after 0.5 s" "after 3 s"
for peer in "${peers[@]}"; do
  start_server "$peer"
  sleep 0.3
  before=$(rss_kb "$server_pid")
  coproc IDLE { "$gobin" idle "127.0.0.1:$port" "$idle"; }
  read -r ready <&"${IDLE[0]}"
  sleep 0.5
  soon=$(rss_kb "$server_pid")
  sleep 2.5
  later=$(rss_kb "$server_pid")
  exec {IDLE[1]}>&-
  wait "$IDLE_PID" 2>/dev/null || true
  stop_server
  awk -v b="$before" -v s="$soon" -v l="$later" -v n="$idle" -v p="$peer" \
    'BEGIN { printf "%-10s %14.1f %14.1f\n", p, (s - b) / n, (l - b) / n }'
done

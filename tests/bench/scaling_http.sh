#!/usr/bin/env bash
# HTTP as the cores grow: each server pinned to N cores (taskset), wrk
# pinned to as many others, keep-alive hello world (and JSON) at each N:
# the host (scripts/httpbench, --workers N) against Go's net/http
# (GOMAXPROCS N) and nginx with the lua module (N workers). Prints
# requests/s, each server's figure over its own at the smallest N, and
# host/Go and host/nginx-lua at each N.
#   scripts/dev scaling-http [--cores "2 8"] [--seconds S] [--conns C] [--paths "hello json"]
# The default core counts fit the machine: N, then wrk's N cores, must
# both fit (on 16 cores: 2, 4 and 8; on 2 cores: 1, which compares the
# servers but says nothing of scaling).
set -euo pipefail
cd "$(dirname "$0")/../.."
total=$(nproc)
cores=""
secs=5
conns=256
paths="hello json"
while [ $# -gt 0 ]; do
  case "$1" in
    --cores) cores="$2"; shift ;;
    --seconds) secs="$2"; shift ;;
    --conns) conns="$2"; shift ;;
    --paths) paths="$2"; shift ;;
    *) echo "scaling-http: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$cores" ]; then
  for n in 2 4 8; do [ $((2 * n)) -le "$total" ] && cores="$cores $n"; done
  [ -n "$cores" ] || cores=1
fi
cores=$(printf '%s\n' $cores | sort -n | tr '\n' ' ')
for n in $cores; do
  if [ $((2 * n)) -gt "$total" ]; then
    echo "scaling-http: $n server cores and $n for wrk need $((2 * n)) cores; this machine has $total" >&2
    exit 2
  fi
done

source tests/bench/servers.sh
host_bin=${HOST_BIN:-build/host}  # scripts/dev scaling-http builds it as Release
gobin=build/http-go
build_go http.go "$gobin"
command -v wrk >/dev/null 2>&1 || { echo "scaling-http: wrk is not installed" >&2; exit 1; }
http_peer_names

# cpus FIRST COUNT: the taskset list of COUNT cores from FIRST.
cpus() { echo "$1-$(($1 + $2 - 1))"; }

port=18380
start_server() {  # start_server NAME N: on the first N cores
  port=$((port + 1))
  start_http_server "$1" "$2" "$port" "$(cpus 0 "$2")"
}

echo "server cores: $cores (wrk on as many others, -c$conns, ${secs} s a row; $total cores here)"
printf '%-10s %-7s %6s %12s %9s %10s\n' server path cores "requests/s" "p99" "vs lowest"
for path in $paths; do
  for n in $cores; do
    for peer in "${peers[@]}"; do
      start_server "$peer" "$n"
      wpin=$(cpus "$n" "$n")
      taskset -c "$wpin" wrk -t"$n" -c"$conns" -d1s "http://127.0.0.1:$port/$path" >/dev/null 2>&1 || true
      taskset -c "$wpin" wrk -t"$n" -c"$conns" -d"${secs}s" --latency "http://127.0.0.1:$port/$path" >"$out/wrk" 2>&1
      stop_server
      rate=$(awk '/^Requests\/sec/ { print $2 }' "$out/wrk")
      p99=$(awk '$1 == "99%" { print $2 }' "$out/wrk")
      if grep -q "Non-2xx\|Socket errors" "$out/wrk"; then grep "Non-2xx\|Socket errors" "$out/wrk" >&2; fi
      [ -f "$out/$peer.$path.base" ] || echo "$rate" >"$out/$peer.$path.base"
      read -r base <"$out/$peer.$path.base"
      echo "$rate" >"$out/$peer.$path.$n"
      printf '%-10s %-7s %6s %12s %9s %9.2fx\n' "$peer" "/$path" "$n" "$rate" "$p99" \
        "$(awk -v r="$rate" -v b="$base" 'BEGIN { print (b > 0 ? r / b : 0) }')"
    done
    for peer in go nginx-lua; do
      [ -f "$out/$peer.$path.$n" ] || continue
      read -r hr <"$out/host.$path.$n"
      read -r pr <"$out/$peer.$path.$n"
      awk -v hr="$hr" -v pr="$pr" -v p="$peer" -v n="$n" \
        'BEGIN { printf "           host / %s on %d cores: %.2fx requests/s\n", p, n, (pr > 0 ? hr / pr : 0) }'
    done
  done
done

#!/usr/bin/env bash
# Shared tables against their peers, side by side in one run: the host's
# require("shared") (scripts/bench's shared_get, shared_set, shared_mix),
# Erlang's ETS from one process (tests/bench/peers/shared.erl) and
# OpenResty's lua_shared_dict in nginx with the distribution's lua module
# (tests/bench/peers/nginx_shared.conf). The same shapes everywhere: 1000
# keys, a small string value, N calls in a loop; the mix is 19 gets to 1
# set. Each runs RUNS times in turn; the first table gives the median
# nanoseconds a call and the ratios (below 1.0 the host is faster), the
# second what a second process (a second nginx worker) adds on the mix:
# the ops/s of 2 at once over those of 1 (2.00x is perfect scaling).
#   scripts/dev shared [--quick] [--runs N]
# (Called by scripts/dev, which has installed the packages and built
# host; HOST_BIN names another host program.)
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/bench/side_by_side.sh  # bench_args, figure, alternate, ratio, median, describe_machine
bench_args shared "$@"
host_bin=${HOST_BIN:-build/host}
n=2000000
[ -z "$quick" ] || n=200000  # the host's and ETS's own --quick count
command -v escript >/dev/null 2>&1 || { echo "shared: Erlang (escript) is not installed" >&2; exit 1; }
command -v nginx >/dev/null 2>&1 && [ -f /usr/lib/nginx/modules/ngx_http_lua_module.so ] ||
  { echo "shared: nginx with its lua module is not installed" >&2; exit 1; }

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run_host() {
  local o
  o=$("$host_bin" run scripts/bench --workers 2 -- shared_get shared_set shared_mix $quick 2>&1 || true)
  figure "$o" PER_OP shared_get >>"$out/get.host"
  figure "$o" PER_OP shared_set >>"$out/set.host"
  figure "$o" FIGURE shared_mix one_ns >>"$out/mix.host"
  figure "$o" FIGURE shared_mix scale >>"$out/scale.host"
}

run_erlang() {
  local o kind
  for kind in get set mix; do
    o=$(escript tests/bench/peers/shared.erl "$kind" $quick 2>&1 || true)
    figure "$o" PER_OP "shared_$kind" >>"$out/$kind.erlang"
  done
  figure "$o" FIGURE shared_mix scale >>"$out/scale.erlang"
}

# nginx_once MODE WORKERS: starts nginx, waits for each worker's start and
# end, stops it; prints the ops/s of all the workers together.
nginx_once() {
  local mode="$1" workers="$2" dir="$out/nginx" pid i
  rm -rf "$dir"
  mkdir -p "$dir"
  chmod 755 "$out"; chmod 777 "$dir"  # the workers run as nginx's unprivileged user
  sed -e "s/WORKERS/$workers/g" -e "s/MODE/$mode/" -e "s/\bN\b/$n/" tests/bench/peers/nginx_shared.conf >"$dir/nginx.conf"
  nginx -p "$dir" -c "$dir/nginx.conf" -g "daemon off;" >/dev/null 2>"$dir/stderr" &
  pid=$!
  for ((i = 0; i < 1200; i++)); do
    [ "$(find "$dir" -maxdepth 1 -name 'result.*' | wc -l)" -ge "$workers" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -QUIT "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  if [ "$(find "$dir" -maxdepth 1 -name 'result.*' | wc -l)" -lt "$workers" ]; then
    echo "shared: nginx $mode ($workers workers) reported no result:" >&2; tail -5 "$dir/stderr" >&2; exit 1
  fi
  # Every worker's calls over the time from the first start to the last end.
  cat "$dir"/result.* | awk -v n="$n" '
    NR == 1 || $1 < t0 { t0 = $1 } NR == 1 || $2 > t1 { t1 = $2 }
    END { printf "%.3f\n", NR * n / (t1 - t0) }'
}

run_nginx() {  # (each result in a variable first: a failed nginx_once ends the script)
  local kind rate one two
  for kind in get set; do
    rate=$(nginx_once "$kind" 1)
    awk -v r="$rate" 'BEGIN { printf "%.3f\n", 1e9 / r }' >>"$out/$kind.nginx"
  done
  one=$(nginx_once mix 1)
  two=$(nginx_once mix 2)
  awk -v r="$one" 'BEGIN { printf "%.3f\n", 1e9 / r }' >>"$out/mix.nginx"
  awk -v a="$one" -v b="$two" 'BEGIN { printf "%.3f\n", b / a }' >>"$out/scale.nginx"
}

alternate run_host run_erlang run_nginx

echo "shared tables: host vs Erlang's ETS vs nginx's lua_shared_dict, median of $runs alternating runs${quick:+ (quick parameters)}"
describe_machine
echo "versions: $("$host_bin" --version); Erlang/OTP $(erl -noshell -eval 'io:format("~s", [erlang:system_info(otp_release)]), halt().'); $(nginx -v 2>&1 | sed 's/^nginx version: //') with lua-nginx-module"
echo "$n calls a run, 1000 keys, an 11-byte string value; the host and ETS with number keys, nginx with string keys"
echo
printf '| %-27s | %8s | %8s | %8s | %9s | %9s |\n' call "host ns" "ETS ns" "dict ns" "host/ETS" "host/dict"
printf '|%s|%s|%s|%s|%s|%s|\n' "-----------------------------" "----------" "----------" "----------" "-----------" "-----------"
for kind in get set mix; do
  case "$kind" in
    get) label="get" ;;
    set) label="set" ;;
    mix) label="mix (19 gets : 1 set)" ;;
  esac
  h=$(median "$out/$kind.host"); e=$(median "$out/$kind.erlang"); g=$(median "$out/$kind.nginx")
  printf '| %-27s | %8.1f | %8.1f | %8.1f | %9s | %9s |\n' "$label" "$h" "$e" "$g" "$(ratio "$h" "$e")" "$(ratio "$h" "$g")"
done
echo
echo "the mix from 2 at once over 1: ops/s of both together over one alone (2.00x: perfect scaling)"
echo
printf '| %-32s | %-22s | %-30s |\n' "host (2 processes, --workers 2)" "ETS (2 processes)" "lua_shared_dict (2 workers)"
printf '|%s|%s|%s|\n' "----------------------------------" "------------------------" "--------------------------------"
printf '| %-32s | %-22s | %-30s |\n' "$(ratio "$(median "$out/scale.host")" 1)" "$(ratio "$(median "$out/scale.erlang")" 1)" \
  "$(ratio "$(median "$out/scale.nginx")" 1)"

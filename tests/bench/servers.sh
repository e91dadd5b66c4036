# Sourced by the I/O benchmarks (echo.sh, http.sh): what they share to run
# one server after another on loopback. Sets out (a scratch directory,
# removed at exit) and server_pid (the running server, killed at exit).
out=$(mktemp -d)
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
  rm -rf "$out"
}
trap cleanup EXIT

# build_go SOURCE BINARY: the Go peer built from tests/bench/peers/SOURCE
# into BINARY where Go is installed; fails when neither is there.
build_go() {
  if command -v go >/dev/null 2>&1; then
    mkdir -p "$out/go" && cp "tests/bench/peers/$1" "$out/go/"
    (cd "$out/go" && go mod init bench >/dev/null 2>&1 && go build -o "$OLDPWD/$2" "$1")
  fi
  [ -x "$2" ] || { echo "bench: no Go toolchain and no $2" >&2; exit 1; }
}

# started NAME PORT: after a server was started in the background, waits
# until it listens on PORT (its PID in server_pid).
started() {
  server_pid=$!
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$2") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "bench: $1 did not start" >&2
  exit 1
}

stop_server() {
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}

# sum_over_tree PID AWK FILE: the sum of what the awk program prints for
# /proc/P/FILE of the process and of each of its children (nginx's workers).
sum_over_tree() {
  local total=0 p
  for p in "$1" $(pgrep -P "$1" 2>/dev/null || true); do
    total=$((total + $(awk "$2" "/proc/$p/$3")))
  done
  echo "$total"
}

# The resident memory of a process and its children, KB.
rss_kb() { sum_over_tree "$1" '/VmRSS/ { print $2 }' status; }

# The CPU time a process and its children have used so far, in clock
# ticks (utime + stime).
cpu_ticks() { sum_over_tree "$1" '{ print $14 + $15 }' stat; }

# The HTTP benchmarks' servers (http.sh, scaling_http.sh): host (its
# host_bin), go (gobin) and nginx-lua where nginx and its lua module are
# installed.
http_peer_names() {
  peers=(host go)
  if command -v nginx >/dev/null 2>&1 && [ -f /usr/lib/nginx/modules/ngx_http_lua_module.so ]; then
    peers+=(nginx-lua)
  fi
}

# start_http_server NAME WORKERS PORT [CPUS]: NAME serving hello and JSON
# on PORT with WORKERS workers (GOMAXPROCS, nginx's worker processes),
# pinned to CPUS (a taskset list) where given.
start_http_server() {
  local pin=()
  [ -z "${4:-}" ] || pin=(taskset -c "$4")
  case "$1" in
    host) "${pin[@]}" "$host_bin" run scripts/httpbench --workers "$2" --log-level warn -- "$3" & ;;
    go) GOMAXPROCS="$2" "${pin[@]}" "$gobin" server "$3" & ;;
    nginx-lua)
      mkdir -p "$out/nginx/tmp"
      sed -e "s/WORKERS/$2/" -e "s/PORT/$3/" tests/bench/peers/nginx_lua.conf >"$out/nginx/nginx.conf"
      "${pin[@]}" nginx -p "$out/nginx" -c "$out/nginx/nginx.conf" -g "daemon off;" & ;;
  esac
  started "$1" "$3"
}

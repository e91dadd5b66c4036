#!/usr/bin/env bash
# The cluster's transport against its peers, side by side in one run: two
# host nodes over one nats-server on loopback (tests/cluster/serve.lua on
# node a; tests/cluster/bench.lua and flow.lua on node b), NATS's own
# request/reply between two C clients (tests/bench/peers/nats_rtt.c, on
# libnats), NATS's own rate for the same bytes between two C clients
# (tests/bench/peers/nats_mb.c, in 256 KB payloads, its best size here:
# the transport's ceiling under the host's 1 MB row) and Erlang
# distribution between two `erl -sname` nodes (tests/bench/peers/cluster.erl). Each runs RUNS times in turn; the table
# gives the medians and the ratios. Rows: a round trip (one after
# another), 16-byte messages one way, 1 MB messages (8 in flight), the
# ping p99 while 8 MB messages flow between the same two nodes, and the
# time from a node's kill -9 to its monitors' noconnection (node timeout 2 s).
#   scripts/dev cluster [--quick] [--runs N]
# (Called by scripts/dev, which has installed the packages and built
# host; HOST_BIN names another host program.)
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/bench/side_by_side.sh  # bench_args, figure, alternate, ratio, median, describe_machine
bench_args cluster "$@"
host_bin=${HOST_BIN:-build/host}
rtt_n=10000 oneway_n=200000 mb_n=200 pings=500
[ -z "$quick" ] || { rtt_n=2000 oneway_n=40000 mb_n=40 pings=200; }
for tool in nats-server escript cc; do
  command -v "$tool" >/dev/null 2>&1 || { echo "cluster: $tool is not installed" >&2; exit 1; }
done

out=$(mktemp -d)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$out"
}
trap cleanup EXIT

# With mimalloc where it links, as the host program is (CMakeLists.txt's
# HOST_MALLOC): glibc's malloc maps and unmaps each large payload in the
# receiving client, which then spent about three times the CPU per MB.
for peer in nats_rtt nats_mb; do
  cc -O2 -o "$out/$peer" "tests/bench/peers/$peer.c" -lnats -lpthread -lmimalloc 2>/dev/null ||
    cc -O2 -o "$out/$peer" "tests/bench/peers/$peer.c" -lnats -lpthread ||
    { echo "cluster: cannot build the NATS peer $peer (libnats-dev)" >&2; exit 1; }
done

port=$((20000 + RANDOM % 20000))
url="nats://127.0.0.1:$port"
nats-server -a 127.0.0.1 -p "$port" >"$out/nats.log" 2>&1 &
pids+=($!)
for ((i = 0; i < 100; i++)); do (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done

# wait_for FILE TEXT [SECONDS]: until FILE holds TEXT.
wait_for() {
  local i
  for ((i = 0; i < ${3:-30} * 100; i++)); do grep -qa "$2" "$1" 2>/dev/null && return 0; sleep 0.01; done
  echo "cluster: no '$2' in $1:" >&2; tail -12 "$1" >&2
  [ ! -f "$out/a.out" ] || { echo "node a said:" >&2; tail -5 "$out/a.out" >&2; }
  exit 1
}

node_args() {  # node_args NAME ENTRY [ARGS...]: a node of the cluster's command line
  local name="$1" entry="$2"
  shift 2
  echo "$host_bin" run tests/cluster --entry "$entry" --node "$name" --cluster "$url" --node-timeout 2 -- "$@"
}
node() { $(node_args "$@") 2>&1 || true; }  # in the foreground, its output
# In the background, output to FILE; $! is the host program itself (kill -9 reaches it).
node_bg() {
  local file="$1"
  shift
  # Emptied here, not by the background job's own redirection: a wait_for
  # right after must not find an earlier run's lines in it.
  : >"$file"
  $(node_args "$@") >>"$file" 2>&1 &
}

run_host() {
  local a o
  node_bg "$out/a.out" a serve
  a=$!
  pids+=($a)
  wait_for "$out/a.out" serving
  o=$(node b bench:rtt "$rtt_n")
  figure "$o" FIGURE host_rtt p50_us >>"$out/rtt.host"
  figure "$o" FIGURE host_rtt p99_us >>"$out/rtt99.host"
  o=$(node b bench:oneway "$oneway_n")
  figure "$o" FIGURE host_oneway msgs_per_s >>"$out/oneway.host"
  o=$(node b bench:mb "$mb_n")
  figure "$o" FIGURE host_mb mb_per_s >>"$out/mb.host"
  o=$(node b flow "$pings" 8)
  grep -qa "p99 " <<<"$o" || { echo "cluster: no ping figure in:" >&2; tail -5 <<<"$o" >&2; exit 1; }
  sed -E 's/.*p99 ([0-9.]+) ms.*/\1/;t;d' <<<"$o" | tail -1 >>"$out/flowp99.host"
  # A node killed: from kill -9 to the noconnection of a monitor of its
  # process (flow.lua's partition says each event as it comes).
  node_bg "$out/b.out" b flow:partition
  local b=$!
  pids+=($b)
  wait_for "$out/b.out" monitoring
  local t0
  t0=$(date +%s%N)
  kill -9 "$a"
  wait_for "$out/b.out" noconnection 20
  echo $((($(date +%s%N) - t0) / 1000000)) >>"$out/kill.host"
  kill -9 "$b" 2>/dev/null || true
  wait "$a" "$b" 2>/dev/null || true
}

run_nats() {
  local s o
  "$out/nats_rtt" serve "$url" >"$out/nats_serve.out" &
  s=$!
  pids+=($s)
  wait_for "$out/nats_serve.out" serving
  o=$("$out/nats_rtt" ask "$url" "$rtt_n" 2>&1 || true)
  figure "$o" FIGURE nats_rtt p50_us >>"$out/rtt.nats"
  figure "$o" FIGURE nats_rtt p99_us >>"$out/rtt99.nats"
  kill -9 "$s"
  wait "$s" 2>/dev/null || true
  "$out/nats_mb" sink "$url" >"$out/nats_sink.out" &
  s=$!
  pids+=($s)
  wait_for "$out/nats_sink.out" serving
  o=$("$out/nats_mb" send "$url" $((mb_n * 4)) 262144 2>&1 || true)
  figure "$o" FIGURE nats_mb mb_per_s >>"$out/mb.nats"
  kill -9 "$s"
  wait "$s" 2>/dev/null || true
}

run_erlang() {
  local s o name="hbench$$"
  ERL_FLAGS="-sname ${name}s -setcookie hostbench" escript tests/bench/peers/cluster.erl serve >"$out/erl_serve.out" 2>&1 &
  s=$!
  pids+=($s)
  wait_for "$out/erl_serve.out" serving
  local peer="${name}s@$(hostname -s)"
  o=$(ERL_FLAGS="-sname ${name}c -setcookie hostbench" escript tests/bench/peers/cluster.erl rtt "$peer" "$rtt_n" 2>&1 || true)
  figure "$o" FIGURE erlang_rtt p50_us >>"$out/rtt.erlang"
  figure "$o" FIGURE erlang_rtt p99_us >>"$out/rtt99.erlang"
  o=$(ERL_FLAGS="-sname ${name}c -setcookie hostbench" escript tests/bench/peers/cluster.erl oneway "$peer" "$oneway_n" 2>&1 || true)
  figure "$o" FIGURE erlang_oneway msgs_per_s >>"$out/oneway.erlang"
  kill "$s"
  wait "$s" 2>/dev/null || true
}

alternate run_host run_nats run_erlang

echo "the cluster: host nodes over nats-server vs NATS request/reply vs Erlang distribution, loopback, median of $runs alternating runs${quick:+ (quick parameters)}"
describe_machine
echo "versions: $("$host_bin" --version); nats-server $(nats-server --version | awk '{ print $NF }'); Erlang/OTP $(erl -noshell -eval 'io:format("~s", [erlang:system_info(otp_release)]), halt().')"
echo "round trips: $rtt_n one after another; one way: $oneway_n messages of 16 bytes; 1 MB: $mb_n messages, 8 in flight; pings under flow: $pings"
echo
m() { median "$out/$1"; }
printf '| %-38s | %10s | %10s | %12s | %-22s |\n' measure host NATS Erlang "ratio"
printf '|%s|%s|%s|%s|%s|\n' "----------------------------------------" "------------" "------------" "--------------" "------------------------"
printf '| %-38s | %10.0f | %10.0f | %12.0f | %-22s |\n' "round trip p50 (us)" "$(m rtt.host)" "$(m rtt.nats)" "$(m rtt.erlang)" \
  "$(ratio "$(m rtt.host)" "$(m rtt.nats)") NATS, $(ratio "$(m rtt.host)" "$(m rtt.erlang)") Erl"
printf '| %-38s | %10.0f | %10.0f | %12.0f | %-22s |\n' "round trip p99 (us)" "$(m rtt99.host)" "$(m rtt99.nats)" "$(m rtt99.erlang)" \
  "$(ratio "$(m rtt99.host)" "$(m rtt99.nats)") NATS, $(ratio "$(m rtt99.host)" "$(m rtt99.erlang)") Erl"
printf '| %-38s | %10.0f | %10s | %12.0f | %-22s |\n' "16 B messages one way (msgs/s)" "$(m oneway.host)" - "$(m oneway.erlang)" \
  "$(ratio "$(m oneway.host)" "$(m oneway.erlang)") Erl"
printf '| %-38s | %10.0f | %10.0f | %12s | %-22s |\n' "1 MB messages (MB/s)" "$(m mb.host)" "$(m mb.nats)" - \
  "$(ratio "$(m mb.host)" "$(m mb.nats)") NATS"
printf '| %-38s | %10.2f | %10s | %12s | %-22s |\n' "ping p99 while 8 MB messages flow (ms)" "$(m flowp99.host)" - - -
printf '| %-38s | %10.0f | %10s | %12s | %-22s |\n' "kill -9 to noconnection (ms)" "$(m kill.host)" - - "node timeout 2000 ms"

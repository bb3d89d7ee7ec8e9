#!/usr/bin/env bash
# Socket transport benchmark: net_perf (plugin ping-pong + plain one-stream
# TCP ping-pong + streaming bandwidth vs SIGNLION_NSOCKS) next to iperf3, on
# loopback and on a tbf-limited veth pair between two namespaces at 1 and
# 10 Gbit/s. The socket transport figures in docs/PERFORMANCE.md come from this script.
#   scripts/net_bench.sh [BUILD_DIR]     (root; iperf3, iproute2)
# NET_PERF_ARGS: more net_perf options for both sides, e.g.
#   NET_PERF_ARGS="--iters 20000 --nsocks none"  (longer latency runs, no bandwidth)
set -euo pipefail
BUILD=${1:-build}
PERF=$(realpath "$BUILD/perf/net_perf")
source "$(dirname "$0")/netns_lib.sh"
DIR=$(mktemp -d /tmp/signlion-bench-XXXXXX)
PIDS=()
trap netns_cleanup EXIT

iperf_gbps() {  # client-netns(or "") server-addr -> receiver Gbit/s
  local pre=() out
  [[ -n $1 ]] && pre=(ip netns exec "$1")
  out=$("${pre[@]}" iperf3 -c "$2" -t 5 -f g 2>&1) || { echo "iperf3 failed: $out" >&2; echo "n/a"; return; }
  echo "$out" | awk '/receiver/ {for (i = 1; i <= NF; i++) if ($i == "Gbits/sec") print $(i-1)}'
}

run_pair() {  # label ns_server ns_client if_server if_client bytes
  local label=$1 nss=$2 nsc=$3 ifs=$4 ifc=$5 bytes=$6 pres=() prec=()
  [[ -n $nss ]] && pres=(ip netns exec "$nss")
  [[ -n $nsc ]] && prec=(ip netns exec "$nsc")
  rm -rf "$DIR/$label"; mkdir -p "$DIR/$label"
  echo "== $label"
  local extra=()
  read -r -a extra <<< "${NET_PERF_ARGS:-}"
  "${pres[@]}" "$PERF" --role server --dir "$DIR/$label" --ifname "$ifs" --bytes "$bytes" "${extra[@]}" &
  local sp=$!
  "${prec[@]}" "$PERF" --role client --dir "$DIR/$label" --ifname "$ifc" --bytes "$bytes" "${extra[@]}"
  wait $sp
}

echo "# $(date -u +%FT%TZ) $(uname -r), $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg)"

# Loopback
iperf3 -s -1 -B 127.0.0.1 >/dev/null 2>&1 & PIDS+=($!)
sleep 0.5
echo "iperf3 loopback: $(iperf_gbps "" 127.0.0.1) Gbit/s"
run_pair loopback "" "" lo lo 2G

# Rate-limited veth
if ! netns_up 1gbit; then
  echo "SKIP veth: $NETNS_WHY"
  exit 0
fi
for rate in 1gbit 10gbit; do
  netns_rate "$rate"
  ip netns exec "$NS_A" iperf3 -s -1 -B "$ADDR_A" >/dev/null 2>&1 & PIDS+=($!)
  sleep 0.5
  echo "iperf3 veth $rate: $(iperf_gbps "$NS_B" "$ADDR_A") Gbit/s"
  bytes=1G; [[ $rate == 10gbit ]] && bytes=4G
  run_pair "veth-$rate" "$NS_A" "$NS_B" "$IF_A" "$IF_B" "$bytes"
done

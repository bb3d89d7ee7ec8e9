#!/usr/bin/env bash
# sign_allreduce_perf across two "nodes" x 2 ranks (network namespaces on a
# bridge, 198.18.0.0/24) whose firewalls (nftables, in each node's namespace)
# accept only what docs/ADMIN.md ("Ports and firewalls") says to open and drop
# every other TCP packet (a counter counts the drops):
#  open     SIGNLION_SOCKET_PORT_RANGE=50000-50099 on every rank, that range
#           opened: the job passes, and no TCP packet was dropped;
#  ucx      the open case over the UCX transport (libnccl-net-signlion-ucx.so
#           beside the build's perf folder, or UCX_PLUGIN; UCX's TCP transport),
#           UCX's own listeners kept to UCX_TCP_PORT_RANGE=50200-50299, both
#           ranges opened; skipped with a note where UCX was not built;
#  sysctl   no SIGNLION_SOCKET_PORT_RANGE, the nodes' ephemeral range narrowed
#           to 50100-50199 (net.ipv4.ip_local_port_range, per namespace), that
#           range (and torchrun's port 29500) opened: the job passes, no TCP
#           packet dropped;
#  closed   the range set, but its first port (the bootstrap root's, on rank
#           0's node) closed on that node: every rank must exit with an error
#           within the bootstrap timeout (-T) plus a margin, never hang, and
#           the other node's ranks must name the root's address and port;
#  ephemeral  the range opened, but no SIGNLION_SOCKET_PORT_RANGE: signlion
#           listens on ephemeral ports the firewall drops; fails as closed does.
#  ucx-closed the UCX case with UCX's range not opened (UCX_TCP_CONN_NB=y, which
#           lets signlion's timeout hold over UCX's TCP transport): every rank
#           fails within the bound, node 1's naming the links not up.
# Ranks are started by hand in their nodes (--rank, --nranks, --id-file) so
# that only signlion's own ports are in play. With PYTHON and LIBNCCL_SIGN
# also:
#  train    examples/train.py (5 steps, 2 nodes x 2 ranks, one torchrun per
#           node) behind the sysctl firewall: torchrun's --master_port 29500,
#           Gloo's and signlion's ports from the narrowed ephemeral range; the
#           ranks' parameters identical at the end, no TCP packet dropped.
#   firewall_netns_test.sh PATH/TO/sign_allreduce_perf [PYTHON LIBNCCL_SIGN]
# Exit 0 pass, 1 fail, 77 skip (not root, no namespaces, no nft). The
# namespaces (and with them their rulesets) are deleted at exit, also on failure.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
PERF=${1:?usage: $0 PATH/TO/sign_allreduce_perf [PYTHON LIBNCCL_SIGN]}
PY=${2:-}
LIB=${3:-}
# the UCX plugin: UCX_PLUGIN, else where the build puts it beside PERF's folder
UCX_PLUGIN=${UCX_PLUGIN:-$(dirname "$(dirname "$PERF")")/lib/libnccl-net-signlion-ucx.so}
T=8 MARGIN=15  # bootstrap timeout (-T, seconds); a failed run must end within T + MARGIN
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root for network namespaces and nftables"
command -v ip >/dev/null || skip "no ip(8)"
command -v nft >/dev/null || skip "no nft (Debian's nftables)"
[ -x "$PERF" ] || { echo "FAIL: $PERF is not executable"; exit 1; }
[[ -z $PY || -f $LIB ]] || { echo "FAIL: no library $LIB (LIBNCCL_SIGN)"; exit 1; }

# shellcheck source=netns_lib.sh
source "$HERE/netns_lib.sh"
# shellcheck source=netns_launch_checks.sh
source "$HERE/netns_launch_checks.sh"
DIR=$(mktemp -d /tmp/signlion-firewall-XXXXXX)
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  netns_star_down
  [[ -n ${KEEP:-} ]] || rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
netns_star_up 2 10gbit || skip "namespaces unavailable: $NETNS_WHY"
ip netns exec "${STAR_NS[0]}" nft list tables >/dev/null 2>&1 || skip "nftables unusable in a namespace here"
ARGS=(-b 4K -e 1M -f 16 -n 2 -w 1 -c 1 -T "$T" -A hier)
failures=0

# firewall NODE PORTS: NODE's input accepts loopback, established connections,
# ICMP and new TCP connections to PORTS (an nft set: "50000-50099", or
# "50001-50099" to close 50000); every other TCP packet is counted and dropped.
firewall() {
  ip netns exec "$1" nft -f - <<NFT
flush ruleset
table inet cluster {
  chain input {
    type filter hook input priority 0; policy drop;
    iif lo accept
    ct state established,related accept
    meta l4proto { icmp, ipv6-icmp } accept
    tcp dport { $2 } accept
    meta l4proto tcp counter drop
  }
}
NFT
}

# TCP packets NODE's firewall dropped so far.
dropped() {
  ip netns exec "$1" nft list chain inet cluster input | sed -n 's/.*counter packets \([0-9]*\).*/\1/p'
}

# run TAG ENV...: the 4 ranks, 2 per node, each in its node with ENV; waits
# for all (each bounded by T + MARGIN); sets RC (0 when every rank exited 0,
# 124 when any was still running at its bound, else the last failure's status).
run() {
  local tag=$1 r node rc
  shift
  rm -f "$DIR/$tag.id"
  PIDS=()
  for ((r = 0; r < 4; r++)); do
    node=$((r / 2))
    ip netns exec "${STAR_NS[$node]}" env SIGNLION_SOCKET_IFNAME="=$STAR_IF" SIGNLION_HOSTID="${STAR_NS[$node]}" \
      SIGNLION_DEBUG=INFO SIGNLION_DEBUG_SUBSYS=INIT,BOOTSTRAP "$@" \
      timeout -k 2 $((T + MARGIN)) "$PERF" "${ARGS[@]}" --rank $r --nranks 4 --id-file "$DIR/$tag.id" \
      >"$DIR/$tag.$r.log" 2>&1 &
    PIDS+=($!)
  done
  RC=0
  for ((r = 0; r < 4; r++)); do
    wait "${PIDS[$r]}"; rc=$?
    ((rc == 124 || rc == 137)) && RC=124
    ((rc != 0 && RC != 124)) && RC=$rc
  done
  PIDS=()
}

# expect_pass TAG WHAT: the run passed its checks and neither firewall dropped a TCP packet.
expect_pass() {
  local tag=$1 what=$2 d0 d1
  cat "$DIR/$tag".[123].log >>"$DIR/$tag.0.log"
  perf_log_check "$what" "$DIR/$tag.0.log" "$RC" "2 nodes x 2"
  d0=$(dropped "${STAR_NS[0]}") d1=$(dropped "${STAR_NS[1]}")
  if [[ $d0 != 0 || $d1 != 0 ]]; then
    echo "FAIL: $what: the firewalls dropped $d0 and $d1 TCP packets (a port outside the opened range)"
    failures=$((failures + 1))
  fi
}

# expect_clear_failure TAG WHAT PATTERN SECONDS: every rank exited non-zero before its
# bound, and node 1's ranks (2 and 3) logged a WARN matching PATTERN.
expect_clear_failure() {
  local tag=$1 what=$2 pattern=$3 secs=$4 r why=""
  if ((RC == 0)); then why="the job passed"
  elif ((RC == 124)); then why="a rank was still running after $((T + MARGIN)) s (a hang)"
  else
    for ((r = 0; r < 4; r++)); do
      grep -q "Out of bounds values : 0 OK" "$DIR/$tag.$r.log" && why="rank $r passed"
    done
    for r in 2 3; do
      grep -qE "WARN.*$pattern" "$DIR/$tag.$r.log" || why="rank $r logged no WARN matching '$pattern'"
    done
  fi
  if [[ -n $why ]]; then
    echo "FAIL: $what: $why"
    for ((r = 0; r < 4; r++)); do echo "-- rank $r"; grep -E "WARN|error" "$DIR/$tag.$r.log" | tail -5; done
    failures=$((failures + 1))
  else
    echo "ok: $what: every rank failed in ${secs} s (bound $((T + MARGIN)) s); rank 2 said:"
    grep -E "WARN" "$DIR/$tag.2.log" | head -2
  fi
}

RANGE=50000-50099 UCX_RANGE=50200-50299
SYSCTL_LO=50100 SYSCTL_HI=50199
MASTER_PORT=29500  # torchrun's rendezvous port, outside the ephemeral range

# open: the range set and opened.
for ns in "${STAR_NS[@]}"; do firewall "$ns" "$RANGE"; done
run open SIGNLION_SOCKET_PORT_RANGE=$RANGE
expect_pass open "SIGNLION_SOCKET_PORT_RANGE=$RANGE, firewalls open $RANGE"
grep -h "listening on\|root listening" "$DIR"/open.0.log | head -2

# ucx: the same over the UCX transport (UCX's TCP transport here; its own listeners take
# UCX_TCP_PORT_RANGE), both ranges opened.
if [[ -f $UCX_PLUGIN ]]; then
  for ns in "${STAR_NS[@]}"; do firewall "$ns" "$RANGE, $UCX_RANGE"; done
  run ucx SIGNLION_SOCKET_PORT_RANGE=$RANGE UCX_TCP_PORT_RANGE=$UCX_RANGE SIGNLION_NET_PLUGIN="$UCX_PLUGIN" \
    UCX_TLS=tcp UCX_NET_DEVICES="$STAR_IF" UCX_WARN_UNUSED_ENV_VARS=n
  expect_pass ucx "UCX transport, SIGNLION_SOCKET_PORT_RANGE=$RANGE and UCX_TCP_PORT_RANGE=$UCX_RANGE opened"
else
  echo "note: UCX transport not run: no $UCX_PLUGIN (CMake did not find UCX: Debian's libucx-dev)"
fi

# sysctl: the ephemeral range narrowed and opened.
for ns in "${STAR_NS[@]}"; do
  ip netns exec "$ns" sysctl -q -w net.ipv4.ip_local_port_range="$SYSCTL_LO $SYSCTL_HI"
  firewall "$ns" "$SYSCTL_LO-$SYSCTL_HI, $MASTER_PORT"
done
run sysctl
expect_pass sysctl "net.ipv4.ip_local_port_range=$SYSCTL_LO-$SYSCTL_HI, firewalls open $SYSCTL_LO-$SYSCTL_HI"

# train: the training example behind the same firewalls, one torchrun per node.
if ! train_unavailable "$PY"; then
  PIDS=()
  for node in 0 1; do
    # --redirects/--tee 9:0: docs/TRAINING.md (Debian's torch 1.13 under Python 3.11).
    ip netns exec "${STAR_NS[$node]}" env SIGNLION_LIBRARY="$(realpath "$LIB")" GLOO_SOCKET_IFNAME="$STAR_IF" \
      SIGNLION_HOSTID="${STAR_NS[$node]}" SIGNLION_DEBUG=INFO SIGNLION_DEBUG_SUBSYS=INIT OMP_NUM_THREADS=1 \
      timeout -k 5 240 "$PY" -m torch.distributed.run --redirects 9:0 --tee 9:0 --nnodes 2 --node_rank $node \
      --nproc_per_node 2 --master_addr "${STAR_ADDR[0]}" --master_port $MASTER_PORT "$ROOT/examples/train.py" \
      "${TRAIN_ARGS[@]}" >"$DIR/train.$node.log" 2>&1 &
    PIDS+=($!)
  done
  RC=0
  for p in "${PIDS[@]}"; do wait "$p" || RC=$?; done
  PIDS=()
  d0=$(dropped "${STAR_NS[0]}") d1=$(dropped "${STAR_NS[1]}")
  why=""
  [[ $d0 == 0 && $d1 == 0 ]] || why="the firewalls dropped $d0 and $d1 TCP packets"
  train_log_check "examples/train.py, torchrun --master_port $MASTER_PORT, net.ipv4.ip_local_port_range=$SYSCTL_LO-$SYSCTL_HI" \
    "$DIR/train.0.log" "$RC" "$why"
fi
for ns in "${STAR_NS[@]}"; do ip netns exec "$ns" sysctl -q -w net.ipv4.ip_local_port_range="32768 60999"; done

# closed: the root's port (the range's first, taken by rank 0 before anything else
# on its node listens) closed on rank 0's node.
lo=${RANGE%-*} hi=${RANGE#*-}
firewall "${STAR_NS[0]}" "$((lo + 1))-$hi"
firewall "${STAR_NS[1]}" "$RANGE"
t0=$SECONDS
run closed SIGNLION_SOCKET_PORT_RANGE=$RANGE
expect_clear_failure closed "SIGNLION_SOCKET_PORT_RANGE=$RANGE, port $lo closed on ${STAR_NS[0]}" \
  "${STAR_ADDR[0]}:$lo.*(timed out|did not answer)" $((SECONDS - t0))

# ephemeral: the range opened but not set.
for ns in "${STAR_NS[@]}"; do firewall "$ns" "$RANGE"; done
t0=$SECONDS
run ephemeral
expect_clear_failure ephemeral "firewalls open $RANGE, SIGNLION_SOCKET_PORT_RANGE unset" \
  "root.*${STAR_ADDR[0]}:.*(timed out|did not answer)" $((SECONDS - t0))

# ucx-closed: UCX's own range not opened. UCX_TCP_CONN_NB=y: UCX's TCP transport then
# connects without blocking, so signlion's timeout holds (without it, a blocking connect()
# inside ucp_ep_create waits out the kernel's SYN retries, about two minutes).
if [[ -f $UCX_PLUGIN ]]; then
  t0=$SECONDS
  run ucx-closed SIGNLION_SOCKET_PORT_RANGE=$RANGE UCX_TCP_PORT_RANGE=$UCX_RANGE UCX_TCP_CONN_NB=y \
    SIGNLION_NET_PLUGIN="$UCX_PLUGIN" UCX_TLS=tcp UCX_NET_DEVICES="$STAR_IF" UCX_WARN_UNUSED_ENV_VARS=n
  # A rank whose peers gave up first sees them close the connection it was making instead.
  expect_clear_failure ucx-closed "UCX transport, firewalls open $RANGE but not UCX_TCP_PORT_RANGE=$UCX_RANGE" \
    "(links to [0-9]+ peers not all up|closed the connection before it confirmed the endpoint)" $((SECONDS - t0))
fi

[ "$failures" = 0 ] && echo "PASS" && exit 0
echo "FAIL: $failures case(s)"
exit 1

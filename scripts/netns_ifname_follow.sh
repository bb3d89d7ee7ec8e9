#!/usr/bin/env bash
# CTest netns.ifname_follows_gloo_and_nccl: which interface signlion's host
# communicator uses when SIGNLION_SOCKET_IFNAME is unset. Two namespaces joined
# by a veth pair (netns_lib.sh); in each, a decoy veth pair made first (so it
# is the first interface after lo, the one NCCL's default order picks) whose
# address reaches nothing. A 2-rank sign all-reduce (python/tests/comm_peer.py,
# one rank per namespace) must
#   fail   with no variable set (the decoy is picked: the control that shows
#          the decoy is in the way),
#   pass   with GLOO_SOCKET_IFNAME naming the veth,
#   pass   with NCCL_SOCKET_IFNAME naming it,
#   fail   with SIGNLION_SOCKET_IFNAME naming the decoy and GLOO_SOCKET_IFNAME
#          the veth (signlion's own variable wins).
#   netns_ifname_follow.sh PYTHON LIBRARY
# Exit 77 (skipped) only when namespaces cannot be made.
set -uo pipefail
PY=$1 LIB=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/netns_lib.sh"
DIR=$(mktemp -d /tmp/signlion-ifname-XXXXXX)
PIDS=()
trap netns_cleanup EXIT
DECOY_A="sle$$"; DECOY_A=${DECOY_A:0:13}x
DECOY_B="sle$$"; DECOY_B=${DECOY_B:0:13}y
DECOY_A2="slf$$"; DECOY_A2=${DECOY_A2:0:13}x
DECOY_B2="slf$$"; DECOY_B2=${DECOY_B2:0:13}y
make_decoy() {  # ns name peer address: a veth pair inside ns, made before the real link arrives
  ip -n "$1" link add "$2" type veth peer name "$3" && ip -n "$1" addr add "$4/24" dev "$2" &&
    ip -n "$1" link set "$2" up && ip -n "$1" link set "$3" up
}
# The namespaces first (netns_up makes them and the real link), then the decoys:
# a veth pair made inside a namespace takes its next free index, below the
# real link's, which kept its index from the namespace it was made in.
if ! netns_up 1gbit; then
  echo "SKIP: cannot create network namespaces ($NETNS_WHY)"
  exit 77
fi
make_decoy "$NS_A" "$DECOY_A" "$DECOY_A2" 198.19.0.1 && make_decoy "$NS_B" "$DECOY_B" "$DECOY_B2" 198.19.1.1 ||
  { echo "FAIL: cannot make the decoy interfaces"; exit 1; }
for ns in "$NS_A" "$NS_B"; do echo "$ns: $(ip -n "$ns" -o link show | awk -F': ' '{printf "%s ", $2}')"; done

FAILS=0
run_case() {  # expect label VAR=VALUE_A VAR=VALUE_B (the same variable, per namespace; "" for none)
  local expect=$1 label=$2 ea=$3 eb=$4 rc0=0 rc1=0
  rm -f "$DIR/id"
  ip netns exec "$NS_A" env -u SIGNLION_SOCKET_IFNAME -u GLOO_SOCKET_IFNAME -u NCCL_SOCKET_IFNAME $ea \
    SIGNLION_LIBRARY="$LIB" SIGNLION_TIMEOUT_MS=4000 SIGNLION_DEBUG=INFO SIGNLION_DEBUG_SUBSYS=NET \
    timeout 60 "$PY" "$HERE/../python/tests/comm_peer.py" 0 2 "$DIR/id" >"$DIR/r0.log" 2>&1 &
  PIDS=($!)
  ip netns exec "$NS_B" env -u SIGNLION_SOCKET_IFNAME -u GLOO_SOCKET_IFNAME -u NCCL_SOCKET_IFNAME $eb \
    SIGNLION_LIBRARY="$LIB" SIGNLION_TIMEOUT_MS=4000 \
    timeout 60 "$PY" "$HERE/../python/tests/comm_peer.py" 1 2 "$DIR/id" >"$DIR/r1.log" 2>&1 || rc1=$?
  wait "${PIDS[0]}" || rc0=$?
  PIDS=()
  local got=pass
  ((rc0 == 0 && rc1 == 0)) || got=fail
  echo "-- $label: ranks exit $rc0 $rc1 ($got, expected $expect)"
  grep -h -E "interfaces from|dev 0:|result|no usable" "$DIR/r0.log" | head -4 | sed 's/^/   /'
  if [[ $got != "$expect" ]]; then
    FAILS=$((FAILS + 1))
    tail -5 "$DIR/r0.log" "$DIR/r1.log"
  fi
}
run_case fail "no variable (NCCL's default order: the decoy)" "" ""
run_case pass "GLOO_SOCKET_IFNAME" "GLOO_SOCKET_IFNAME=$IF_A" "GLOO_SOCKET_IFNAME=$IF_B"
run_case pass "NCCL_SOCKET_IFNAME" "NCCL_SOCKET_IFNAME==$IF_A" "NCCL_SOCKET_IFNAME==$IF_B"
run_case fail "SIGNLION_SOCKET_IFNAME (decoy) over GLOO_SOCKET_IFNAME" \
  "SIGNLION_SOCKET_IFNAME==$DECOY_A GLOO_SOCKET_IFNAME=$IF_A" "SIGNLION_SOCKET_IFNAME==$DECOY_B GLOO_SOCKET_IFNAME=$IF_B"
echo "$((4 - FAILS)) passed, $FAILS failed"
((FAILS == 0))

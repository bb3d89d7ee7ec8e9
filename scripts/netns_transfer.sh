#!/usr/bin/env bash
# CTest netns.transfer_over_rate_limited_veth (and netns.ucx_transfer_over_
# rate_limited_veth): the two-process plugin exchange (signlion_net_peer)
# across two namespaces joined by a 1 Gbit/s tbf-limited veth pair. Exit 77
# (skipped) only when namespaces cannot be made.
#   netns_transfer.sh PEER_BINARY PLUGIN_LIB
# With the UCX library (libnccl-net-signlion-ucx.so) UCX runs over TCP
# (UCX_TLS, default tcp) on the veth alone: UCX_NET_DEVICES names each side's
# end, so no byte takes a namespace's loopback.
set -uo pipefail
PEER=$1 LIB=$2
source "$(dirname "$0")/netns_lib.sh"
DIR=$(mktemp -d /tmp/signlion-netns-XXXXXX)
trap 'netns_down; rm -rf "$DIR"' EXIT
if ! netns_up 1gbit; then
  echo "SKIP: cannot create network namespaces ($NETNS_WHY)"
  exit 77
fi
SIZES=0,1,4096,16385,1048579,16777216
UCX_A=() UCX_B=()
if [[ $(basename "$LIB") == *-ucx* ]]; then
  UCX_A=(UCX_TLS="${UCX_TLS:-tcp}" UCX_NET_DEVICES="$IF_A" UCX_WARN_UNUSED_ENV_VARS=n)
  UCX_B=(UCX_TLS="${UCX_TLS:-tcp}" UCX_NET_DEVICES="$IF_B" UCX_WARN_UNUSED_ENV_VARS=n)
fi
ip netns exec "$NS_A" env SIGNLION_SOCKET_IFNAME="=$IF_A" "${UCX_A[@]}" timeout 120 \
  "$PEER" --lib "$LIB" --dir "$DIR" --role a --ifname "$IF_A" --sizes $SIZES &
PA=$!
ip netns exec "$NS_B" env SIGNLION_SOCKET_IFNAME="=$IF_B" "${UCX_B[@]}" timeout 120 \
  "$PEER" --lib "$LIB" --dir "$DIR" --role b --ifname "$IF_B" --sizes $SIZES
RB=$?
wait $PA
RA=$?
echo "peer a exit $RA, peer b exit $RB"
# Every message crossed the veth (not a namespace's loopback): the two ends
# together sent at least the payload.
TX=$(( $(ip netns exec "$NS_A" cat "/sys/class/net/$IF_A/statistics/tx_bytes") +
       $(ip netns exec "$NS_B" cat "/sys/class/net/$IF_B/statistics/tx_bytes") ))
PAYLOAD=$(( ${SIZES//,/+} ))
echo "veth carried $TX bytes for $PAYLOAD bytes of messages"
[[ $RA -eq 0 && $RB -eq 0 && $TX -ge $PAYLOAD ]]

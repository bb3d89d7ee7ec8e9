#!/usr/bin/env bash
# CTest netns.transfer_over_rate_limited_veth: the two-process plugin exchange
# (signlion_net_peer) across two namespaces joined by a 1 Gbit/s tbf-limited
# veth pair. Exit 77 (skipped) only when namespaces cannot be made.
#   netns_transfer.sh PEER_BINARY PLUGIN_LIB
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
ip netns exec "$NS_A" env SIGNLION_SOCKET_IFNAME="=$IF_A" timeout 120 \
  "$PEER" --lib "$LIB" --dir "$DIR" --role a --ifname "$IF_A" --sizes $SIZES &
PA=$!
ip netns exec "$NS_B" env SIGNLION_SOCKET_IFNAME="=$IF_B" timeout 120 \
  "$PEER" --lib "$LIB" --dir "$DIR" --role b --ifname "$IF_B" --sizes $SIZES
RB=$?
wait $PA
RA=$?
echo "peer a exit $RA, peer b exit $RB"
[[ $RA -eq 0 && $RB -eq 0 ]]

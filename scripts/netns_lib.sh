# Emulated Ethernet for tests and benchmarks: two network namespaces joined by
# a veth pair, each end rate-limited by tc tbf. Source this file; names carry
# the caller's pid so parallel runs do not collide. Addresses: 198.18.0.0/15
# (RFC 2544 benchmarking range), private to the namespaces.
#
#   netns_up RATE      -> sets NS_A NS_B IF_A IF_B ADDR_A ADDR_B; returns 1 if
#                         namespaces cannot be made (NETNS_WHY says why)
#   netns_rate RATE    -> changes the tbf rate on both ends
#   netns_down         -> deletes everything (safe to call twice; use in a trap)

NS_A="sl$$a"; NS_B="sl$$b"
IF_A="sla$$"; IF_B="slb$$"
IF_A=${IF_A:0:15}; IF_B=${IF_B:0:15}
ADDR_A=198.18.0.1; ADDR_B=198.18.0.2
NETNS_WHY=""

netns_down() {
  ip netns del "$NS_A" 2>/dev/null || true
  ip netns del "$NS_B" 2>/dev/null || true
}

# tbf needs a bucket of at least one timer tick of traffic; 2 ms worth is safe.
_netns_tbf() {  # ns ifname rate verb
  local bits burst
  bits=$(echo "$3" | sed 's/gbit/000000000/; s/mbit/000000/')
  burst=$(( bits / 8 / 500 ))
  (( burst < 65536 )) && burst=65536
  ip netns exec "$1" tc qdisc "$4" dev "$2" root tbf rate "$3" burst "$burst" latency 20ms
}

netns_up() {
  local rate=$1
  if ! ip netns add "$NS_A" 2>/tmp/netns_err.$$; then
    NETNS_WHY="ip netns add failed: $(cat /tmp/netns_err.$$)"
    rm -f /tmp/netns_err.$$
    return 1
  fi
  rm -f /tmp/netns_err.$$
  ip netns add "$NS_B" || { NETNS_WHY="second namespace"; netns_down; return 1; }
  ip link add "$IF_A" type veth peer name "$IF_B" || { NETNS_WHY="veth unavailable"; netns_down; return 1; }
  ip link set "$IF_A" netns "$NS_A"
  ip link set "$IF_B" netns "$NS_B"
  ip -n "$NS_A" addr add "$ADDR_A/24" dev "$IF_A"
  ip -n "$NS_B" addr add "$ADDR_B/24" dev "$IF_B"
  for ns in "$NS_A" "$NS_B"; do ip -n "$ns" link set lo up; done
  ip -n "$NS_A" link set "$IF_A" up
  ip -n "$NS_B" link set "$IF_B" up
  _netns_tbf "$NS_A" "$IF_A" "$rate" add || { NETNS_WHY="tc tbf unavailable"; netns_down; return 1; }
  _netns_tbf "$NS_B" "$IF_B" "$rate" add
}

netns_rate() {
  _netns_tbf "$NS_A" "$IF_A" "$1" change
  _netns_tbf "$NS_B" "$IF_B" "$1" change
}

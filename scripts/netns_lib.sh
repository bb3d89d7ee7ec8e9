# Emulated Ethernet for tests and benchmarks: two network namespaces joined by
# a veth pair, each end rate-limited by tc tbf. Source this file; names carry
# the caller's pid so parallel runs do not collide. Addresses: 198.18.0.0/15
# (RFC 2544 benchmarking range), private to the namespaces. Every tbf queue
# holds NETNS_TBF_LATENCY of its rate (default 20ms); a full one drops.
#
#   netns_up RATE      -> sets NS_A NS_B IF_A IF_B ADDR_A ADDR_B; returns 1 if
#                         namespaces cannot be made (NETNS_WHY says why)
#   netns_rate RATE    -> changes the tbf rate on both ends
#   netns_down         -> deletes everything (safe to call twice; use in a trap)
#   netns_second_link RATE, netns_link_down NS IF: see below
#   netns_rate_bits RATE -> RATE (digits then gbit or mbit: 1gbit, 100mbit) in
#                         bits per second; returns 1 (and prints nothing) otherwise

NS_A="sl$$a"; NS_B="sl$$b"
IF_A="sla$$"; IF_B="slb$$"
IF_A=${IF_A:0:15}; IF_B=${IF_B:0:15}
ADDR_A=198.18.0.1; ADDR_B=198.18.0.2
NETNS_WHY=""

# For scripts that start background processes (their pids in PIDS) and keep
# files in DIR: `trap netns_cleanup EXIT` kills those processes, deletes the
# namespaces and DIR at exit, also on failure.
netns_cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  netns_down
  rm -rf "$DIR"
}

netns_down() {
  ip netns del "$NS_A" 2>/dev/null || true
  ip netns del "$NS_B" 2>/dev/null || true
}

netns_rate_bits() {
  case $1 in
    *[0-9]gbit) [[ ${1%gbit} =~ ^[0-9]+$ ]] && echo $(( ${1%gbit} * 1000000000 )) ;;
    *[0-9]mbit) [[ ${1%mbit} =~ ^[0-9]+$ ]] && echo $(( ${1%mbit} * 1000000 )) ;;
    *) return 1 ;;
  esac
}

# tbf needs a bucket of at least one timer tick of traffic; 2 ms worth is safe.
_netns_tbf() {  # ns ifname rate verb
  local bits burst
  bits=$(netns_rate_bits "$3") || { NETNS_WHY="rate '$3': digits then gbit or mbit"; return 1; }
  burst=$(( bits / 8 / 500 ))
  (( burst < 65536 )) && burst=65536
  ip netns exec "$1" tc qdisc "$4" dev "$2" root tbf rate "$3" burst "$burst" latency "${NETNS_TBF_LATENCY:-20ms}"
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

# A second veth pair between the same two namespaces (after netns_up), on a
# subnet of its own so each pair is its own route: two NICs per namespace.
#   netns_second_link RATE -> sets IF_A2 IF_B2 ADDR_A2 ADDR_B2; returns 1 if it
#                             cannot (NETNS_WHY says why); netns_down removes it
#   netns_link_down NS IF  -> takes one interface down (a link lost)
IF_A2="slc$$"; IF_B2="sld$$"
IF_A2=${IF_A2:0:15}; IF_B2=${IF_B2:0:15}
ADDR_A2=198.18.1.1; ADDR_B2=198.18.1.2

netns_second_link() {
  ip link add "$IF_A2" type veth peer name "$IF_B2" || { NETNS_WHY="second veth pair unavailable"; return 1; }
  ip link set "$IF_A2" netns "$NS_A"
  ip link set "$IF_B2" netns "$NS_B"
  ip -n "$NS_A" addr add "$ADDR_A2/24" dev "$IF_A2"
  ip -n "$NS_B" addr add "$ADDR_B2/24" dev "$IF_B2"
  ip -n "$NS_A" link set "$IF_A2" up
  ip -n "$NS_B" link set "$IF_B2" up
  _netns_tbf "$NS_A" "$IF_A2" "$1" add || { NETNS_WHY="tc tbf unavailable"; return 1; }
  _netns_tbf "$NS_B" "$IF_B2" "$1" add
}

netns_link_down() {
  ip -n "$1" link set "$2" down
}

# ---- A star: N namespaces joined by veth pairs to a bridge -------------------
# The bridge lives in a hub namespace of its own; every rank namespace sees one
# interface, $STAR_IF, addressed 198.18.0.(i+1)/24; each link is rate-limited
# by tc tbf in both directions (rank -> bridge on the rank's end, bridge -> rank
# on the bridge port), like a switch port of that speed.
#
#   netns_star_up N RATE -> sets STAR_NS[i] STAR_ADDR[i] STAR_IF STAR_HUB
#                           STAR_NET; returns 1 if it cannot (NETNS_WHY says why)
#   netns_star_rate RATE -> changes the tbf rate on every link
#   netns_star_down      -> deletes everything (safe to call twice; use in a trap)
#   netns_star_drops     -> packets the star's tbf queues dropped so far, all
#                           links and both directions summed (a full queue
#                           drops: TCP then backs off, and the link idles)

STAR_HUB="sl$$hub"; STAR_IF=slv0; STAR_NET=198.18.0.0/24
STAR_NS=(); STAR_ADDR=()

netns_star_down() {
  local ns
  for ns in "${STAR_NS[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  ip netns del "$STAR_HUB" 2>/dev/null || true
  STAR_NS=(); STAR_ADDR=()
}

# ip netns add, tried up to 5 times: two tests that add namespaces at the same
# moment can make one `ip netns add` fail (both set up /run/netns's mount).
_netns_add() {
  local try
  for try in 1 2 3 4 5; do
    ip netns add "$1" 2>/tmp/netns_err.$$ && return 0
    ip netns del "$1" 2>/dev/null || true
    sleep 0.3
  done
  return 1
}

netns_star_up() {
  local n=$1 rate=$2 i ns
  netns_star_down
  if ! _netns_add "$STAR_HUB"; then
    NETNS_WHY="ip netns add failed: $(cat /tmp/netns_err.$$)"
    rm -f /tmp/netns_err.$$
    return 1
  fi
  rm -f /tmp/netns_err.$$
  ip -n "$STAR_HUB" link set lo up
  ip -n "$STAR_HUB" link add br0 type bridge || { NETNS_WHY="bridge unavailable"; netns_star_down; return 1; }
  ip -n "$STAR_HUB" link set br0 up
  for ((i = 0; i < n; i++)); do
    ns="sl$$r$i"
    STAR_NS+=("$ns"); STAR_ADDR+=("198.18.0.$((i + 1))")
    _netns_add "$ns" || { NETNS_WHY="namespace $ns: $(cat /tmp/netns_err.$$)"; rm -f /tmp/netns_err.$$; netns_star_down; return 1; }
    ip -n "$ns" link set lo up
    ip -n "$ns" link add "$STAR_IF" type veth peer name "p$i" netns "$STAR_HUB" ||
      { NETNS_WHY="veth unavailable"; netns_star_down; return 1; }
    ip -n "$ns" addr add "${STAR_ADDR[$i]}/24" dev "$STAR_IF"
    ip -n "$ns" link set "$STAR_IF" up
    ip -n "$STAR_HUB" link set "p$i" master br0
    ip -n "$STAR_HUB" link set "p$i" up
    _netns_tbf "$ns" "$STAR_IF" "$rate" add && _netns_tbf "$STAR_HUB" "p$i" "$rate" add ||
      { NETNS_WHY="tc tbf unavailable"; netns_star_down; return 1; }
  done
}

_netns_qdisc_drops() {  # ns ifname: packets its qdiscs dropped ("Sent ... (dropped N, ...")
  ip netns exec "$1" tc -s qdisc show dev "$2" | awk '/dropped/ { sub(",", "", $7); n += $7 } END { print n + 0 }'
}

netns_star_drops() {
  local i sum=0
  for ((i = 0; i < ${#STAR_NS[@]}; i++)); do
    sum=$((sum + $(_netns_qdisc_drops "${STAR_NS[$i]}" "$STAR_IF") + $(_netns_qdisc_drops "$STAR_HUB" "p$i")))
  done
  echo "$sum"
}

netns_star_rate() {
  local i
  for ((i = 0; i < ${#STAR_NS[@]}; i++)); do
    _netns_tbf "${STAR_NS[$i]}" "$STAR_IF" "$1" change
    _netns_tbf "$STAR_HUB" "p$i" "$1" change
  done
}

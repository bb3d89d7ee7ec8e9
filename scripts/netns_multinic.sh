#!/usr/bin/env bash
# Two NICs per namespace: two veth pairs between two namespaces, each end
# limited to RATE (default 1gbit) by tc tbf (netns_lib.sh). Checks, as CTest
# netns.multinic_fused_device (exit 77 = skipped, only when namespaces cannot
# be made):
#   1. one comm on a device fused from both interfaces (makeVDevice) moves
#      1 GiB bit-exact (every 8th message checked) and each link carries at
#      least 35% of it (tx byte counters): the streams are striped;
#   2. losing one link mid-transfer (ip link set down) ends both sides with an
#      error from the transfer calls within 20 s, not a hang (timeout 3 s);
#   0. the two interfaces fuse (makeVDevice, as NCCL's NIC fusion asks on its
#      own) only when SIGNLION_SOCKET_IFNAME names them: with no interface
#      variable at all, or an exclude list, the fusion is refused;
#   3. with HOST_PERF (sign_allreduce_perf) given: the host communicator
#      between the namespaces with SIGNLION_SOCKET_IFNAME naming both
#      interfaces stripes its links over both (each carries >= 25%).
# With --bench it also prints the reference and the figures compared in
# docs/PERFORMANCE.md, "Two NICs": iperf3 with two streams, one per link, at the
# same time, and the plugin on one link alone.
#   netns_multinic.sh PEER_BINARY PLUGIN_LIB [HOST_PERF|-] [--bench] [RATE]
set -uo pipefail
PEER=$1 LIB=$2 HOST_PERF=${3:--}
BENCH=0
[[ ${4:-} == --bench ]] && BENCH=1
RATE=${5:-1gbit}
source "$(dirname "$0")/netns_lib.sh"
DIR=$(mktemp -d /tmp/signlion-multinic-XXXXXX)
PIDS=()
trap netns_cleanup EXIT
if ! netns_up "$RATE" || ! netns_second_link "$RATE"; then
  echo "SKIP: cannot create two links between network namespaces ($NETNS_WHY)"
  exit 77
fi
FAIL=0
fail() { echo "FAIL: $*"; FAIL=1; }
txb() { ip netns exec "$1" cat "/sys/class/net/$2/statistics/tx_bytes"; }
# share NEW_A1 OLD_A1 NEW_A2 OLD_A2 -> percent of the bytes the first link carried
share() { echo $(( ($1 - $2) * 100 / (($1 - $2) + ($3 - $4) + 1) )); }

# stream ROLE_A_IFNAMES ROLE_B_IFNAMES BYTES [ENV...]: a -> b; sets RA RB and the logs
stream() {
  local ifa=$1 ifb=$2 bytes=$3
  shift 3
  rm -f "$DIR"/b.handle*
  ip netns exec "$NS_B" env SIGNLION_SOCKET_IFNAME="=$ifb" "$@" timeout 120 \
    "$PEER" --mode stream --version 12 --role b --ifname "$ifb" --lib "$LIB" --dir "$DIR" --bytes "$bytes" >"$DIR/b.log" 2>&1 &
  local pb=$!
  PIDS=($pb)
  ip netns exec "$NS_A" env SIGNLION_SOCKET_IFNAME="=$ifa" "$@" timeout 120 \
    "$PEER" --mode stream --version 12 --role a --ifname "$ifa" --lib "$LIB" --dir "$DIR" --bytes "$bytes" >"$DIR/a.log" 2>&1
  RA=$?
  wait "$pb"
  RB=$?
  PIDS=()
}

# rate LOG -> the Gbit/s a stream log printed
rate() { sed -n 's/.*: \([0-9.]*\) Gbit\/s$/\1/p' "$1"; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

if ((BENCH)); then
  echo "# $(date -u +%FT%TZ) $(uname -r), $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg); two veth pairs, each end tbf $RATE"
  echo "# rounds of: iperf3 (two streams, one per link, at once), the plugin on one link, one plugin comm on both"
  : >"$DIR/iperf.txt"; : >"$DIR/one.txt"; : >"$DIR/both.txt"
  for round in 1 2 3; do
    PIDS=()
    for addr in "$ADDR_B" "$ADDR_B2"; do
      ip netns exec "$NS_B" timeout 30 iperf3 -s -1 -B "$addr" -p 5201 >/dev/null 2>&1 &
      PIDS+=($!)
    done
    sleep 0.5
    ip netns exec "$NS_A" timeout 30 iperf3 -c "$ADDR_B" -B "$ADDR_A" -p 5201 -t 5 -f m >"$DIR/i1.log" 2>&1 &
    p1=$!
    ip netns exec "$NS_A" timeout 30 iperf3 -c "$ADDR_B2" -B "$ADDR_A2" -p 5201 -t 5 -f m >"$DIR/i2.log" 2>&1
    wait "$p1"
    wait "${PIDS[@]}" 2>/dev/null
    PIDS=()
    i1=$(awk '/receiver/ { print $(NF-2) }' "$DIR/i1.log")
    i2=$(awk '/receiver/ { print $(NF-2) }' "$DIR/i2.log")
    ib=$(awk -v a="$i1" -v b="$i2" 'BEGIN { printf "%.3f", (a + b) / 1000 }')
    echo "$ib" >>"$DIR/iperf.txt"
    stream "$IF_A" "$IF_B" 512M
    rate "$DIR/b.log" >>"$DIR/one.txt"
    stream "$IF_A,$IF_A2" "$IF_B,$IF_B2" 1G
    rate "$DIR/b.log" >>"$DIR/both.txt"
    echo "round $round: iperf3 $i1 + $i2 Mbit/s = $ib Gbit/s; plugin one link $(tail -n 1 "$DIR/one.txt") Gbit/s; plugin both links $(tail -n 1 "$DIR/both.txt") Gbit/s"
  done
  mi=$(median <"$DIR/iperf.txt"); m1=$(median <"$DIR/one.txt"); m2=$(median <"$DIR/both.txt")
  echo "median: iperf3 two links $mi Gbit/s; plugin one link $m1 Gbit/s; plugin one comm on two links $m2 Gbit/s ($(awk -v a="$m2" -v b="$mi" 'BEGIN { printf "%.2f", a / b }')x iperf3)"
fi

# 0. Fusion only of interfaces named: NCCL asks for it on its own.
for spec in unset "^docker" "=$IF_A,$IF_A2"; do
  want=$([[ $spec == unset ]] || [[ $spec == ^* ]] && echo 5 || echo 0)
  setvar=(SIGNLION_SOCKET_IFNAME="$spec")
  [[ $spec == unset ]] && setvar=()
  ip netns exec "$NS_A" env -u SIGNLION_SOCKET_IFNAME -u NCCL_SOCKET_IFNAME -u GLOO_SOCKET_IFNAME "${setvar[@]}" \
    timeout 60 "$PEER" --mode fuse --version 12 --ifname "$IF_A,$IF_A2" --lib "$LIB" --dir "$DIR" >"$DIR/fuse.log" 2>&1
  rc=$?
  echo "SIGNLION_SOCKET_IFNAME $spec: $(grep -h '^fuse:' "$DIR/fuse.log") (exit $rc)"
  [[ $rc == "$want" ]] || { fail "fusion with SIGNLION_SOCKET_IFNAME $spec: exit $rc, expected $want"; cat "$DIR/fuse.log"; }
done

# 1. One comm over both links.
a1=$(txb "$NS_A" "$IF_A"); a2=$(txb "$NS_A" "$IF_A2")
stream "$IF_A,$IF_A2" "$IF_B,$IF_B2" 1G
n1=$(txb "$NS_A" "$IF_A"); n2=$(txb "$NS_A" "$IF_A2")
if [[ $RA -ne 0 || $RB -ne 0 ]]; then
  fail "fused transfer: exit a=$RA b=$RB"
  cat "$DIR/a.log" "$DIR/b.log"
else
  echo "plugin, both links: $(grep -h 'stream: received' "$DIR/b.log")"
  s1=$(share "$n1" "$a1" "$n2" "$a2")
  echo "link 1 carried $s1% of the bytes, link 2 $((100 - s1))%"
  ((s1 >= 35 && s1 <= 65)) || fail "the fused comm did not stripe: link 1 carried $s1%"
fi

# 2. One link lost mid-transfer: an error on both sides, not a hang.
rm -f "$DIR"/b.handle*
start=$(date +%s)
( sleep 2; netns_link_down "$NS_A" "$IF_A2" ) &
PIDS=($!)
stream "$IF_A,$IF_A2" "$IF_B,$IF_B2" 8G SIGNLION_SOCKET_TIMEOUT=3000
took=$(( $(date +%s) - start ))
echo "link lost: exit a=$RA b=$RB after ${took} s"
grep -h "stream:" "$DIR/a.log" "$DIR/b.log" | sed 's/^/  /'
[[ $RA -eq 4 && $RB -eq 4 ]] || fail "losing a link should fail both transfers (exit 4), got a=$RA b=$RB"
((took <= 20)) || fail "the failure took ${took} s"
ip -n "$NS_A" link set "$IF_A2" up

# 3. The host communicator over both interfaces.
if [[ $HOST_PERF != - ]]; then
  a1=$(txb "$NS_A" "$IF_A"); a2=$(txb "$NS_A" "$IF_A2")
  idf=$DIR/host.id
  PIDS=()
  for r in 1 0; do
    ns=$([[ $r == 0 ]] && echo "$NS_A" || echo "$NS_B")
    ifs=$([[ $r == 0 ]] && echo "$IF_A,$IF_A2" || echo "$IF_B,$IF_B2")
    ip netns exec "$ns" env SIGNLION_SOCKET_IFNAME="=$ifs" timeout 120 \
      "$HOST_PERF" --rank $r --nranks 2 --id-file "$idf" -o sum -d float -b 64M -e 64M -n 5 -w 1 -c 1 \
      >"$DIR/host$r.log" 2>&1 &
    PIDS+=($!)
  done
  hrc=0
  for p in "${PIDS[@]}"; do wait "$p" || hrc=$?; done
  PIDS=()
  n1=$(txb "$NS_A" "$IF_A"); n2=$(txb "$NS_A" "$IF_A2")
  s1=$(share "$n1" "$a1" "$n2" "$a2")
  echo "host communicator: exit $hrc; link 1 carried $s1% of rank 0's bytes, link 2 $((100 - s1))%"
  grep -v '^#' "$DIR/host0.log" | grep -E '^ +[0-9]' | sed 's/^/  /'
  if ((hrc != 0)); then
    fail "host communicator run failed"
    tail -n 5 "$DIR/host0.log" "$DIR/host1.log"
  fi
  ((s1 >= 25 && s1 <= 75)) || fail "the host communicator did not stripe: link 1 carried $s1%"
fi
exit $FAIL

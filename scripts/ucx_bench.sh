#!/usr/bin/env bash
# The UCX transport next to ucx_perftest and next to the socket transport, on
# loopback and on a 10 Gbit/s tbf-limited veth pair between two namespaces:
# 8 B ping-pong latency (half round trip, median of the trips: ucp_tag_lat's
# "50.0%ile") and streaming bandwidth of 4..256 MiB messages, 8 in flight
# (ucp_tag_bw's "overall"). The UCX figures in docs/PERFORMANCE.md come from it.
# ucx_perftest runs twice per round: as it comes, and with -e (endpoints with
# peer error handling, UCP_ERR_HANDLING_MODE_PEER, as the transport makes
# them: a dead peer must fail our requests). UCX 1.13 gives such endpoints
# no RMA lane over TCP (tcp has no memory invalidation), so rendezvous data
# then travels as active-message fragments that the receiver copies once
# more; "ucp_tag_bw -e" is the figure measured with the transport's own
# endpoint settings.
#   scripts/ucx_bench.sh [BUILD_DIR]     (root; ucx-utils, iproute2)
# Environment: REPEATS=3 (rounds; each round runs the three in a rotated order,
# the tables give the median over rounds), UCX_TLS=tcp (for both ucx_perftest
# and our plugin), BW_SIZES="4M 16M 64M 256M", BW_BYTES=512M (per size and
# round), LAT_ITERS=20000, LINKS="loopback veth" (veth: 10gbit unless RATE).
# BEFORE=path/to/another/plugin_perf: also that build's UCX transport, as
# "ucx-before" in the same rotation (before/after figures of a change).
# RAW=path: also keep every round's figure there (lines: link impl metric bytes value).
# PIN="0 1": each server on CPU 0 and each client on CPU 1 (taskset), for
# every contender alike (loopback's figures otherwise depend on where the
# scheduler puts the two busy-polling processes).
# UCX_NET_DEVICES and SIGNLION_SOCKET_IFNAME are set to the link's interface;
# other UCX_* variables pass to all. Exit: 0, or 1 when a run failed.
set -euo pipefail
BUILD=$(realpath "${1:-build}")
PERF=$BUILD/perf/plugin_perf LAYOUT=$BUILD/perf/ucp_layout_perf
for t in "$PERF" "$LAYOUT"; do
  [[ -x $t ]] || { echo "no $t: build the targets plugin_perf and ucp_layout_perf (a build with UCX)" >&2; exit 2; }
done
command -v ucx_perftest >/dev/null || { echo "no ucx_perftest: apt-get install ucx-utils (scripts/setup.sh)" >&2; exit 2; }
REPEATS=${REPEATS:-3}
BW_SIZES=${BW_SIZES:-"4M 16M 64M 256M"}
BW_BYTES=${BW_BYTES:-512M}
LAT_ITERS=${LAT_ITERS:-20000}
LINKS=${LINKS:-"loopback veth"}
RATE=${RATE:-10gbit}
WINDOW=8
export UCX_TLS=${UCX_TLS:-tcp}
source "$(dirname "$0")/netns_lib.sh"
DIR=$(mktemp -d /tmp/signlion-ucxbench-XXXXXX)
RESULTS=$DIR/results  # lines: link impl metric bytes value (us or Gbit/s)
PIDS=()
trap netns_cleanup EXIT
trap 'exit 130' INT TERM
FAILED=0

bytes_of() { numfmt --from=iec "$1"; }
PERFTEST_PORT=$((20000 + $$ % 20000))

# Runs server and client of one measurement: ns_server ns_client cmd_server... -- cmd_client...
pair() {
  local nss=$1 nsc=$2 pres=() prec=() srv=() cli=() rc=0
  shift 2
  while [[ $1 != -- ]]; do srv+=("$1"); shift; done
  shift
  cli=("$@")
  [[ -n $nss ]] && pres=(ip netns exec "$nss")
  [[ -n $nsc ]] && prec=(ip netns exec "$nsc")
  # PIN="S C": the server on CPU S, the client on CPU C (taskset), every contender alike.
  if [[ -n ${PIN:-} ]]; then
    local cpus=($PIN)
    srv=(taskset -c "${cpus[0]}" "${srv[@]}")
    cli=(taskset -c "${cpus[1]}" "${cli[@]}")
  fi
  "${pres[@]}" env UCX_NET_DEVICES="$SRV_IF" SIGNLION_SOCKET_IFNAME="=$SRV_IF" timeout 300 "${srv[@]}" >"$DIR/server.log" 2>&1 &
  PIDS=($!)
  sleep 0.3
  local try
  for try in 1 2 3 4 5 6 7 8 9 10; do
    rc=0
    "${prec[@]}" env UCX_NET_DEVICES="$CLI_IF" SIGNLION_SOCKET_IFNAME="=$CLI_IF" timeout 300 "${cli[@]}" >"$DIR/client.log" 2>&1 || rc=$?
    # On a loaded machine ucx_perftest's server may not listen yet 0.3 s
    # after its start: its client then fails at once ("Connection refused").
    ((rc != 0)) && grep -q "Connection refused" "$DIR/client.log" && kill -0 "${PIDS[0]}" 2>/dev/null || break
    sleep 0.5
  done
  # A client that failed leaves its server waiting for it: end the server.
  ((rc != 0)) && { kill "${PIDS[0]}" 2>/dev/null || true; }
  wait "${PIDS[0]}" || rc=$((rc ? rc : $?))
  PIDS=()
  if ((rc != 0)); then
    echo "FAILED ($rc): ${cli[*]}" >&2
    tail -n 5 "$DIR/server.log" "$DIR/client.log" >&2
    FAILED=1
    return 1
  fi
}

# ucx_perftest's final line: iterations, latency 50%ile/avg/overall (us),
# bandwidth avg/overall (MB/s, MB = 2^20), message rate avg/overall.
# impl: ucx_perftest (as it comes) or ucx_perftest-e (-e: peer error handling, as our endpoints).
perftest() {  # link impl ns_server ns_client server_addr
  local link=$1 impl=$2 s n e=()
  [[ $impl == *-e ]] && e=(-e)
  shift 2
  pair "$1" "$2" ucx_perftest -p "$PERFTEST_PORT" -- \
    ucx_perftest "$3" -p "$PERFTEST_PORT" "${e[@]}" -t tag_lat -s 8 -n "$LAT_ITERS" -w $((LAT_ITERS / 10)) -f || return 0
  awk -v l="$link" -v i="$impl" 'NF == 8 && $1 ~ /^[0-9]+$/ { print l, i, "lat", 8, $2 }' "$DIR/client.log" >>"$RESULTS"
  for s in $BW_SIZES; do
    s=$(bytes_of "$s"); n=$(($(bytes_of "$BW_BYTES") / s)); ((n < 4)) && n=4
    pair "$1" "$2" ucx_perftest -p "$PERFTEST_PORT" -- \
      ucx_perftest "$3" -p "$PERFTEST_PORT" "${e[@]}" -t tag_bw -s "$s" -n "$n" -w 2 -O $WINDOW -f || continue
    awk -v l="$link" -v i="$impl" -v s="$s" 'NF == 8 && $1 ~ /^[0-9]+$/ { printf "%s %s bw %s %.3f\n", l, i, s, $6 * 1048576 * 8 / 1e9 }' \
      "$DIR/client.log" >>"$RESULTS"
  done
}

# Plain UCP in ucx_perftest's layout (1 worker per process) and in ours (2): latency only.
layout() {  # link workers ns_server ns_client
  rm -rf "$DIR/x"; mkdir "$DIR/x"
  local args=(--dir "$DIR/x" --workers "$2" --iters "$LAT_ITERS")
  pair "$3" "$4" "$LAYOUT" --role server "${args[@]}" -- "$LAYOUT" --role client "${args[@]}" || return 0
  awk -v l="$1" -v i="ucp-$2w" '$1 == "lat" { print l, i, $1, $2, $3 }' "$DIR/client.log" >>"$RESULTS"
}

ours() {  # link impl ns_server ns_client; impl: socket, ucx or ucx-before
  local link=$1 impl=$2 net=${2%-before} perf=$PERF sizes
  [[ $impl == *-before ]] && perf=$BEFORE
  sizes=$(echo "$BW_SIZES" | tr ' ' ,)
  rm -rf "$DIR/x"; mkdir "$DIR/x"
  local args=(--net "$net" --dir "$DIR/x" --iters "$LAT_ITERS" --bw-sizes "$sizes" --bytes "$BW_BYTES" --window $WINDOW)
  pair "$3" "$4" "$perf" --role server "${args[@]}" -- "$perf" --role client "${args[@]}" || return 0
  awk -v l="$link" -v i="$impl" '$1 == "lat" || $1 == "bw" { print l, i, $1, $2, $3 }' "$DIR/client.log" >>"$RESULTS"
}

measure() {  # link ns_server ns_client server_addr: REPEATS rounds, order rotated each round
  local order=(ucx_perftest ucx socket layout1 ucx_perftest-e layout2) r k j
  [[ -n ${BEFORE:-} ]] && order+=(ucx-before)
  for ((r = 0; r < REPEATS; r++)); do
    for ((k = 0; k < ${#order[@]}; k++)); do
      j=${order[$(((r + k) % ${#order[@]}))]}
      case $j in
        ucx_perftest*) perftest "$1" "$j" "$2" "$3" "$4" ;;
        layout*) layout "$1" "${j#layout}" "$2" "$3" ;;
        *) ours "$1" "$j" "$2" "$3" ;;
      esac
    done
    echo "  $1: round $((r + 1))/$REPEATS done"
  done
}

report() {  # link
  awk -v l="$1" '
    function med(key,   n, i, j, t, a) {
      n = split(vals[key], a, " ")
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
      return n == 0 ? "" : n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    function show(v, fmt) { return v == "" ? "n/a" : sprintf(fmt, v) }
    function ratio(a, b) { return a == "" || b == "" || b == 0 ? "n/a" : sprintf("%.2f", a / b) }
    $1 == l { k = $3 " " $4 " " $2; vals[k] = vals[k] " " $5; if ($3 == "bw") sz[$4] = 1; n[k]++ }
    END {
      pu = med("lat 8 ucx_perftest"); bu = med("lat 8 ucx-before")
      printf "%s, 8 B ping-pong, half round trip (us), median of %d rounds; ratio to ucp_tag_lat:\n", l, n["lat 8 ucx"]
      split("ucx_perftest ucx_perftest-e ucx ucx-before socket ucp-1w ucp-2w", impl, " ")
      split("ucp_tag_lat (ucx_perftest)|ucp_tag_lat -e (peer error handling)|signlion-ucx|signlion-ucx before (BEFORE=)|socket transport|plain UCP, 1 worker per process|plain UCP, 2 workers per process", label, "|")
      for (i = 1; i <= 7; i++) {
        v = med("lat 8 " impl[i])
        if (v != "") printf "  %-48s %8.2f %6s\n", label[i], v, ratio(v, pu)
      }
      printf "%s, streaming bandwidth client->server, 8 in flight (Gbit/s), median of rounds:\n", l
      printf "  (ucp_tag_bw -e: ucx_perftest with peer error handling, as the transport makes its endpoints)\n"
      printf "  %-10s %-11s %-14s %-13s %-8s %-15s %-18s %-18s", "size", "ucp_tag_bw", "ucp_tag_bw -e", "signlion-ucx", "socket", "ucx/ucp_tag_bw", "ucx/ucp_tag_bw -e", "socket/ucp_tag_bw"
      printf "%s\n", bu == "" ? "" : sprintf("%-11s %s", "ucx-before", "before/ucp_tag_bw -e")
      m = 0; for (s in sz) keys[++m] = s + 0
      for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (keys[j] < keys[i]) { t = keys[i]; keys[i] = keys[j]; keys[j] = t }
      for (i = 1; i <= m; i++) {
        s = keys[i]; p = med("bw " s " ucx_perftest"); pe = med("bw " s " ucx_perftest-e"); u = med("bw " s " ucx")
        so = med("bw " s " socket"); b = med("bw " s " ucx-before")
        printf "  %-10s %-11s %-14s %-13s %-8s %-15s %-18s %-18s", s / 1048576 " MiB", show(p, "%.2f"), show(pe, "%.2f"), show(u, "%.2f"), show(so, "%.2f"), ratio(u, p), ratio(u, pe), ratio(so, p)
        printf "%s\n", bu == "" ? "" : sprintf("%-11s %s", show(b, "%.2f"), ratio(b, pe))
      }
    }' "$RESULTS"
}

echo "# $(date -u +%FT%TZ) $(uname -r), $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg); UCX_TLS=$UCX_TLS${PIN:+, PIN=$PIN}, $(ucx_info -v | head -1)"
: >"$RESULTS"
for link in $LINKS; do
  case $link in
    loopback)
      SRV_IF=lo CLI_IF=lo measure loopback "" "" 127.0.0.1
      ;;
    veth)
      if ! netns_up "$RATE"; then
        echo "SKIP veth: $NETNS_WHY"
        continue
      fi
      SRV_IF=$IF_A CLI_IF=$IF_B measure "veth-$RATE" "$NS_A" "$NS_B" "$ADDR_A"
      netns_down
      ;;
    *) echo "unknown link $link (loopback, veth)" >&2; exit 2 ;;
  esac
done
[[ -n ${RAW:-} ]] && cp "$RESULTS" "$RAW"
for link in $LINKS; do
  [[ $link == veth ]] && link=veth-$RATE
  grep -q "^$link " "$RESULTS" && report "$link"
done
exit $FAILED

#!/usr/bin/env bash
# Emulated cluster: NODES network namespaces act as nodes (netns_lib.sh's star:
# one tbf-limited veth link per node to a bridge), PER ranks per node as
# processes inside each namespace (ranks of a node reach each other over the
# namespace's loopback; SIGNLION_HOSTID=node<i> tells the communicator which
# ranks share a node; the node link's rate is learned, or told with
# STAR_LINK_ENV=1 as star_bench_lib.sh says). Rank r runs on node r / PER. Every contender runs on the
# same namespaces in one run: the hierarchical sign all-reduce, the flat ones,
# the fp32 ring sum. Writes OUT/cluster.csv (one row per contender and size,
# with the socket transport's byte counters: the most any rank sent and the
# most any node sent to other nodes, per call), every rank-0 table under
# OUT/logs (each with the packets the links dropped), and a summary of hier against the best flat algorithm. Deletes
# every namespace it made, also on failure or interrupt.
#   scripts/cluster_bench.sh [BUILD_DIR] [OUT_DIR]            (root)
# Environment (defaults: the run of docs/PERFORMANCE.md, "Hierarchical"):
#   NODES=2 PER=4 RATE=1gbit MINB=16M MAXB=256M FACTOR=4 ITERS=1 WARMUP=1 CHECK=1
#     (PER at most 16 for sign-hier, the hierarchical algorithm's node limit)
#   CONTENDERS="sign-hier sign-hd sign-ring sign-auto fp32-sum" RUN_TIMEOUT=900
#   SIGN_DTYPE=float: the input of the sign contenders (float, half, bfloat16,
#     int8; -b/-e are bytes of it). The wire carries the same bits per element
#     whatever it is; int8 reads and writes a quarter of fp32's bytes, which
#     shows the algorithms with less of the CPU's share on a small machine.
#   BASELINE=<build dir>: every contender runs again right after with that
#     build's sign_allreduce_perf, as "<name>@base"; the summary then gives
#     medians per build (scripts/star_summary.py).
# Exit: 0 when every run passed its check; 77 when namespaces cannot be made.
set -uo pipefail
BUILD=$(realpath "${1:-build}")
OUT=$(realpath -m "${2:-cluster-out}")
PERF=$BUILD/perf/sign_allreduce_perf
HERE=$(cd "$(dirname "$0")" && pwd)
NODES=${NODES:-2} PER=${PER:-4} RATE=${RATE:-1gbit}
MINB=${MINB:-16M} MAXB=${MAXB:-256M} FACTOR=${FACTOR:-4} ITERS=${ITERS:-1} WARMUP=${WARMUP:-1} CHECK=${CHECK:-1}
CONTENDERS=${CONTENDERS:-"sign-hier sign-hd sign-ring sign-auto fp32-sum"}
RUN_TIMEOUT=${RUN_TIMEOUT:-900}
SIGN_DTYPE=${SIGN_DTYPE:-float}
case $SIGN_DTYPE in float|half|bfloat16|int8) ;; *) echo "SIGN_DTYPE=$SIGN_DTYPE: not float, half, bfloat16 or int8" >&2; exit 2 ;; esac
BASELINE=${BASELINE:-}
source "$HERE/netns_lib.sh"
source "$HERE/star_bench_lib.sh"
star_bench_check_sizes MINB MAXB
star_bench_check_rates RATE "$RATE"
for v in NODES PER ITERS; do
  [[ ${!v} =~ ^[0-9]+$ ]] && ((${!v} >= 1)) || { echo "$v=${!v}: an integer >= 1" >&2; exit 2; }
done
# The hierarchical algorithm groups at most 16 ranks per node (a larger node
# fails its calls with ncclInvalidArgument; the flat contenders still run).
((PER <= 16)) || echo "PER=$PER: more than 16 ranks per node: sign-hier cannot run there" >&2
star_bench_begin "$PERF" "$OUT" cluster
BASE_PERF=""
if [[ -n $BASELINE ]]; then
  BASE_PERF=$(realpath "$BASELINE")/perf/sign_allreduce_perf
  [[ -x $BASE_PERF ]] || { echo "no $BASE_PERF: build the baseline's sign_allreduce_perf first" >&2; exit 2; }
fi

contender_args() {  # name -> perf arguments
  local b=(-b "$MINB" -e "$MAXB") s=(-o mavo -d "$SIGN_DTYPE")
  case $1 in
    sign-hier) echo "${s[*]} -A hier ${b[*]}" ;;
    sign-hd) echo "${s[*]} -A hd ${b[*]}" ;;
    sign-ring) echo "${s[*]} -A ring ${b[*]}" ;;
    sign-allgather) echo "${s[*]} -A allgather ${b[*]}" ;;
    sign-auto) echo "${s[*]} -A auto ${b[*]}" ;;
    fp32-sum) echo "-o sum -d float ${b[*]}" ;;
    *) echo "unknown contender $1" >&2; return 1 ;;
  esac
}

CSV=$OUT/cluster.csv
echo "nodes,ranks_per_node,rate,contender,bytes,count,time_us,wrong,time_inplace_us,wire_bytes_per_rank,wire_bits_per_elt,internode_bytes_per_node,internode_bits_per_elt_per_node" >"$CSV"
FAILED=()
N=$((NODES * PER))

run_contender() {  # name [perf label]
  local name=$1 perf=${2:-$PERF} label=${3:-$1} args log r node rc=0 idf=$WORK/id.$1
  args=$(contender_args "$name") || { FAILED+=("$name (unknown)"); return 0; }
  local dt=""  # the sign contenders' input type, named in their log and header line
  [[ $name == sign-* ]] && dt=$SIGN_DTYPE
  log=$OUT/logs/$NODES"x"$PER-$RATE-$label${dt:+-$dt}.txt
  echo "== $NODES nodes x $PER ranks, $RATE per node link: $label${dt:+ ($dt votes)} ($(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg))"
  rm -f "$idf"; PIDS=()
  star_drops_mark
  for ((r = N - 1; r >= 0; r--)); do
    node=$((r / PER))
    ip netns exec "${STAR_NS[$node]}" env SIGNLION_SOCKET_IFNAME="=$STAR_IF" SIGNLION_HOSTID="node$node" \
      $(star_link_env "$RATE") timeout "$RUN_TIMEOUT" "$perf" --rank "$r" --nranks "$N" --id-file "$idf" $args \
      -f "$FACTOR" -n "$ITERS" -w "$WARMUP" -c "$CHECK" -T 300 \
      >"$([[ $r == 0 ]] && echo "$log" || echo "$WORK/rank$r.log")" 2>&1 &
    PIDS+=($!)
  done
  for p in "${PIDS[@]}"; do wait "$p" || rc=$?; done
  PIDS=()
  star_drops_note "$log" "$label"
  if ((rc != 0)); then
    FAILED+=("$label (exit $rc, $log)")
    tail -5 "$log"
    return 0
  fi
  awk -v nodes="$NODES" -v per="$PER" -v rate="$RATE" -v c="$label" 'BEGIN { OFS = "," }
    !/^#/ && NF >= 17 { print nodes, per, rate, c, $1, $2, $6, $9, $10, $14, $15, $16, $17 }' "$log" >>"$CSV"
  grep -v '^#  Rank' "$log" | grep -v '^#$' | tail -n +2
}

echo "# $(date -u +%FT%TZ) $(uname -r), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
if ! netns_star_up "$NODES" "$RATE"; then
  echo "SKIP: cannot create network namespaces ($NETNS_WHY)"
  exit 77
fi
for c in $CONTENDERS; do
  run_contender "$c"
  [[ -n $BASE_PERF ]] && run_contender "$c" "$BASE_PERF" "$c@base"
done
echo "# done $(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg)"

# hier against the best flat sign algorithm (ring, hd) at each size, from the
# figures above (medians over repeated contenders, per build): bytes per node
# to other nodes and out-of-place wall time.
python3 "$HERE/star_summary.py" cluster "$CSV" || FAILED+=("the summary (scripts/star_summary.py exited $?)")
echo "csv: $CSV ($(($(wc -l <"$CSV") - 1)) rows)"
for f in "${FAILED[@]}"; do echo "FAILED: $f"; done
((${#FAILED[@]} == 0))

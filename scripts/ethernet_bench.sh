#!/usr/bin/env bash
# Emulated Ethernet: every contender of the sign all-reduce across N network
# namespaces joined by tbf-limited veth pairs to a bridge (netns_lib.sh's
# star), one rank per namespace, for fp32 inputs of MINB..MAXB. Writes
# OUT/ethernet.csv, OUT/ethernet.png (time vs size, one line per contender;
# needs python3-matplotlib) and every rank-0 table under OUT/logs (each with
# the packets the links dropped during it). Deletes
# every namespace it made, also on failure or interrupt. Each rank gets
# SIGNLION_HOSTID=ns<r> (a namespace is a node) and no tuning variable: the
# communicator learns the link's rate (STAR_LINK_ENV=1: tells it, as before,
# SIGNLION_COST_BETA_MBPS and SIGNLION_SOCKET_SPEED from the tbf rate).
#   scripts/ethernet_bench.sh [BUILD_DIR] [OUT_DIR]            (root)
# Environment (defaults: the full sweep of docs/dev/SCALE.md, "The measured star: every contender"):
#   RANKS="4 8" RATES="1gbit 10gbit" MINB=1M MAXB=256M FACTOR=4 ITERS=2 WARMUP=1
#   CONTENDERS="sign-auto sign-ring sign-hd sign-allgather sign-direct fieldsum-4 fieldsum-8 onebit fp32-sum bf16-sum mpi-fp32"
#     (also sign-tree: the double binary tree, and sign-auto-tie / sign-direct-tie / sign-hd-tie: auto,
#     direct and halving-doubling with a tie rule (--tie-rule positive: every decided element one bit), not in the
#     default sweep)
#   RUN_TIMEOUT=600 (seconds per contender run)
#   POINT_BYTES=<bytes, K/M/G>: each size runs on its own, every contender in
#     turn before the next size, with max(ITERS, POINT_BYTES / size) calls
#     (small sizes get as many calls as large ones get bytes: two calls of a
#     1 MiB message are noise). Unset: one sweep MINB..MAXB per contender.
#   BASELINE=<build dir>: every contender runs again right after with that
#     build's sign_allreduce_perf, as "<name>@base" (A B A B ... when a
#     contender is listed several times); scripts/star_summary.py prints the
#     medians: wall vs wire time, auto vs every forced algorithm, new vs base.
#   TRANSPORTS="socket" (the host communicator's ncclNet; "socket ucx" runs every
#   contender but mpi-fp32 over both, the UCX ones as "<contender>+ucx":
#   sign_allreduce_perf --net-plugin BUILD/lib/libnccl-net-signlion-ucx.so with
#   UCX_TLS=tcp and UCX_NET_DEVICES the rank's interface unless UCX_TLS is set)
# Exit: 0 when every run that could run passed its check; 77 when namespaces
# cannot be made. A contender the build cannot run (fieldsum on a host
# communicator without it, mpi-fp32 without mpirun) is listed as skipped.
set -uo pipefail
BUILD=$(realpath "${1:-build}")
OUT=$(realpath -m "${2:-ethernet-out}")
PERF=$BUILD/perf/sign_allreduce_perf
HERE=$(cd "$(dirname "$0")" && pwd)
RANKS=${RANKS:-"4 8"}
RATES=${RATES:-"1gbit 10gbit"}
MINB=${MINB:-1M} MAXB=${MAXB:-256M} FACTOR=${FACTOR:-4} ITERS=${ITERS:-2} WARMUP=${WARMUP:-1}
CONTENDERS=${CONTENDERS:-"sign-auto sign-ring sign-hd sign-allgather sign-direct fieldsum-4 fieldsum-8 onebit fp32-sum bf16-sum mpi-fp32"}
RUN_TIMEOUT=${RUN_TIMEOUT:-600}
BASELINE=${BASELINE:-}
TRANSPORTS=${TRANSPORTS:-socket}
UCX_PLUGIN=$BUILD/lib/libnccl-net-signlion-ucx.so
for t in $TRANSPORTS; do
  case $t in
    socket) ;;
    ucx) [[ -f $UCX_PLUGIN ]] || { echo "TRANSPORTS=ucx: no $UCX_PLUGIN (a build with UCX)" >&2; exit 2; } ;;
    *) echo "TRANSPORTS: $t is not socket or ucx" >&2; exit 2 ;;
  esac
done
source "$HERE/netns_lib.sh"
source "$HERE/star_bench_lib.sh"
star_bench_check_sizes MINB MAXB ${POINT_BYTES:+POINT_BYTES}
star_bench_check_rates RATES $RATES
star_bench_begin "$PERF" "$OUT" eth
BASE_PERF=""
if [[ -n $BASELINE ]]; then
  BASE_PERF=$(realpath "$BASELINE")/perf/sign_allreduce_perf
  [[ -x $BASE_PERF ]] || { echo "no $BASE_PERF: build the baseline's sign_allreduce_perf first" >&2; exit 2; }
fi

CSV=$OUT/ethernet.csv
echo "nranks,rate,contender,bytes,count,type,redop,time_us,algbw_GBps,busbw_GBps,wrong,time_inplace_us,wire_bytes_per_rank,wire_bits_per_elt" >"$CSV"
FAILED=() SKIPPED=()

# contender -> perf arguments and environment for it
contender_args() {  # name nranks -> prints "ENV... -- ARGS..." or nothing when it does not apply
  local b=(-b "$MINB" -e "$MAXB")
  case $1 in
    sign-auto) echo "-- -o mavo -A auto ${b[*]}" ;;
    sign-ring) echo "-- -o mavo -A ring ${b[*]}" ;;
    sign-hd) echo "-- -o mavo -A hd ${b[*]}" ;;
    sign-allgather) echo "-- -o mavo -A allgather ${b[*]}" ;;
    # direct runs on at most 16 ranks (docs/ALGORITHMS.md)
    sign-direct) (($2 <= 16)) && echo "-- -o mavo -A direct ${b[*]}" ;;
    sign-tree) echo "-- -o mavo -A tree ${b[*]}" ;;
    sign-auto-tie) echo "-- -o mavo -A auto --tie-rule positive ${b[*]}" ;;
    sign-direct-tie) (($2 <= 16)) && echo "-- -o mavo -A direct --tie-rule positive ${b[*]}" ;;
    sign-hd-tie) echo "-- -o mavo -A hd --tie-rule positive ${b[*]}" ;;
    fieldsum-4) (($2 <= 15)) && echo "SIGNLION_FIELD_BITS=4 -- -o mavo -A fieldsum ${b[*]}" ;;
    fieldsum-8) echo "SIGNLION_FIELD_BITS=8 -- -o mavo -A fieldsum ${b[*]}" ;;
    # DeepSpeed's 1-bit compressed all-reduce of fp32 (1-bit Adam/LAMB), on
    # links of its own over the same transport: the 1-bit baseline (at most 16 ranks)
    onebit) (($2 <= 16)) && echo "-- -o onebit -d float ${b[*]}" ;;
    fp32-sum) echo "-- -o sum -d float ${b[*]}" ;;
    # the same element counts as the fp32 runs, in bf16: half the bytes
    bf16-sum) echo "-- -o sum -d bfloat16 -b $(half "$MINB") -e $(half "$MAXB")" ;;
    mpi-fp32) echo "-- -o mpisum -d float ${b[*]}" ;;
  esac
}
# Each namespace is a node of its own (SIGNLION_HOSTID; they share hostname
# and boot id); the link's rate is learned (star_link_env: nothing unless
# STAR_LINK_ENV=1).
to_bytes() { local v=${1%[KMGkmg]}; case ${1: -1} in K|k) echo $((v << 10)) ;; M|m) echo $((v << 20)) ;; G|g) echo $((v << 30)) ;; *) echo "$1" ;; esac; }
sizes() { local b e; b=$(to_bytes "$MINB"); e=$(to_bytes "$MAXB"); while ((b <= e)); do echo "$b"; b=$((b * FACTOR)); done; }
half() { local v=$1 s=${1//[0-9]/}; v=${v%[KMGkmg]}; case $s in M|m) echo "$((v * 512))K" ;; G|g) echo "$((v * 512))M" ;; K|k) echo "$((v * 512))" ;; *) echo $((v / 2)) ;; esac; }

run_contender() {  # name nranks rate [perf label transport]
  local name=$1 n=$2 rate=$3 perf=${4:-$PERF} label=${5:-$1} transport=${6:-socket} spec envs args log r rc=0
  spec=$(contender_args "$name" "$n") || true
  [[ -z $spec ]] && return 0
  envs=${spec%%--*}; args=${spec#*--}
  if [[ $transport == ucx ]]; then
    [[ $name == mpi-* ]] && return 0  # MPI's own transport
    label=${label%%@*}+ucx${label#"${label%%@*}"}  # sign-auto@base -> sign-auto+ucx@base
    args="$args --net-plugin $UCX_PLUGIN"
    envs="$envs UCX_TLS=${UCX_TLS:-tcp} UCX_NET_DEVICES=${UCX_NET_DEVICES:-$STAR_IF} UCX_WARN_UNUSED_ENV_VARS=n"
  fi
  log=$OUT/logs/n$n-$rate-$label${POINT:+-$POINT}.txt
  local common=(-f "$FACTOR" -n "$ITERS" -w "$WARMUP" -c 1 -T 120)
  echo "== N=$n $rate $label ($(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg))"
  star_drops_mark
  if [[ $name == mpi-* ]]; then
    if ! command -v mpirun >/dev/null; then SKIPPED+=("$name (no mpirun)"); return 0; fi
    # mpirun runs in the hub namespace; each rank enters its namespace
    # (netns_exec_rank.sh) and reaches mpirun's PMIx server over the bridge.
    ip netns exec "$STAR_HUB" env PMIX_MCA_ptl_tcp_remote_connections=1 PMIX_MCA_ptl_tcp_if_include=$STAR_NET \
      OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=$STAR_NET OMPI_MCA_oob_tcp_if_include=$STAR_NET \
      timeout "$RUN_TIMEOUT" mpirun --allow-run-as-root --oversubscribe -np "$n" \
      "$HERE/netns_exec_rank.sh" "sl$$r" "$STAR_IF" $envs "$perf" $args "${common[@]}" >"$log" 2>&1 || rc=$?
  else
    local idf=$WORK/id.$name.$n.$rate
    rm -f "$idf"; PIDS=()
    for ((r = n - 1; r >= 0; r--)); do
      ip netns exec "${STAR_NS[$r]}" env SIGNLION_SOCKET_IFNAME="=$STAR_IF" SIGNLION_HOSTID="ns$r" \
        $(star_link_env "$rate") $envs timeout "$RUN_TIMEOUT" \
        "$perf" --rank "$r" --nranks "$n" --id-file "$idf" $args "${common[@]}" \
        >"$([[ $r == 0 ]] && echo "$log" || echo "$WORK/rank$r.log")" 2>&1 &
      PIDS+=($!)
    done
    for p in "${PIDS[@]}"; do wait "$p" || rc=$?; done
    PIDS=()
  fi
  star_drops_note "$log" "$label"
  if ((rc != 0)); then
    if [[ $name == fieldsum-* ]] && grep -q "fieldsum is forced" "$log" "$WORK"/rank*.log 2>/dev/null; then
      SKIPPED+=("$name (the host communicator has no fieldsum)")
    else
      FAILED+=("N=$n $rate $name (exit $rc, $log)")
      tail -5 "$log"
    fi
    return 0
  fi
  awk -v n="$n" -v rate="$rate" -v c="$label" 'BEGIN { OFS = "," }
    !/^#/ && NF >= 15 { print n, rate, c, $1, $2, $3, $4, $6, $7, $8, $9, $10, $14, $15 }' "$log" >>"$CSV"
  grep -v '^#  Rank' "$log" | grep -v '^#$' | tail -n +2
}

echo "# $(date -u +%FT%TZ) $(uname -r), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
for n in $RANKS; do
  if ! netns_star_up "$n" "${RATES%% *}"; then
    echo "SKIP: cannot create network namespaces ($NETNS_WHY)"
    exit 77
  fi
  ip -n "$STAR_HUB" addr add 198.18.0.254/24 dev br0
  for rate in $RATES; do
    netns_star_rate "$rate"
    if [[ -z ${POINT_BYTES:-} ]]; then
      for c in $CONTENDERS; do
        for t in $TRANSPORTS; do
          run_contender "$c" "$n" "$rate" "$PERF" "$c" "$t"
          [[ -n $BASE_PERF ]] && run_contender "$c" "$n" "$rate" "$BASE_PERF" "$c@base" "$t"
        done
      done
      continue
    fi
    for size in $(sizes); do
      iters=$(( ($(to_bytes "$POINT_BYTES") + size - 1) / size ))
      ((iters < ITERS)) && iters=$ITERS
      for c in $CONTENDERS; do
        for t in $TRANSPORTS; do
          POINT=$size MINB=$size MAXB=$size ITERS=$iters run_contender "$c" "$n" "$rate" "$PERF" "$c" "$t"
          [[ -n $BASE_PERF ]] && POINT=$size MINB=$size MAXB=$size ITERS=$iters \
            run_contender "$c" "$n" "$rate" "$BASE_PERF" "$c@base" "$t"
        done
      done
    done
  done
  netns_star_down
done

PY=""  # Debian's python3-matplotlib is for /usr/bin/python3, which may not be first on PATH
for p in python3 /usr/bin/python3; do "$p" -c 'import matplotlib' 2>/dev/null && { PY=$p; break; }; done
if [[ -n $PY ]]; then
  "$PY" "$HERE/plot_ethernet.py" "$CSV" "$OUT/ethernet.png" && echo "plot: $OUT/ethernet.png"
else
  echo "no plot: python3-matplotlib is not installed (scripts/setup.sh)"
fi
python3 "$HERE/star_summary.py" ethernet "$CSV"
echo "csv: $CSV ($(($(wc -l <"$CSV") - 1)) rows)"
for s in "${SKIPPED[@]}"; do echo "skipped: $s"; done
for f in "${FAILED[@]}"; do echo "FAILED: $f"; done
((${#FAILED[@]} == 0))

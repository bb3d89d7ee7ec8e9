# What the benchmarks over netns_lib.sh's star share (ethernet_bench.sh,
# cluster_bench.sh). Source after netns_lib.sh.
#
#   star_bench_begin PERF OUT TAG -> exits 2 unless PERF is executable (and
#       NETNS_TBF_LATENCY, if set, a time such as 20ms); makes
#       OUT/logs and WORK (an empty temporary folder), sets PIDS=(); on exit,
#       interrupt or failure kills every pid left in PIDS, deletes the star
#       and WORK.
#   star_bench_check_sizes VAR... -> exits 2 unless each named variable is a
#       byte count with an optional K, M or G, and FACTOR an integer >= 2.
#   star_bench_check_rates NAME RATE... -> exits 2 unless each is a tbf rate.
#   star_drops_mark; star_drops_note LOG LABEL -> appends to LOG how many
#       packets the star's tbf queues dropped since the mark (netns_star_drops):
#       many TCP streams through one link overflow its queue, and a lost
#       packet stalls its stream until TCP resends it.
#   rate_mbps RATE -> a tbf rate (1gbit, 100mbit) in MB/s, what
#       SIGNLION_COST_BETA_MBPS takes: the benchmarks tell the cost model (and
#       the host executor's chunk size) the link, as a user would.
#   rate_mbits RATE -> the same rate in Mbit/s, what SIGNLION_SOCKET_SPEED
#       takes: a veth reports 10000 whatever tbf lets through, and the socket
#       transport picks its number of data streams from the link's speed.
#   star_link_env RATE -> nothing: signlion learns the link's rate itself
#       (docs/PARAMETERS.md, "Host communicator"). With STAR_LINK_ENV=1, both
#       settings above as NAME=VALUE words for env, as the benchmarks told
#       signlion the link before it learned it (to compare the two).

star_bench_cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  netns_star_down
  rm -rf "$WORK"
}

star_bench_begin() {
  [[ -x $1 ]] || { echo "no $1: build the target sign_allreduce_perf first" >&2; exit 2; }
  [[ ${NETNS_TBF_LATENCY:-20ms} =~ ^[0-9]+(us|ms|s)$ ]] ||
    { echo "NETNS_TBF_LATENCY=$NETNS_TBF_LATENCY: a time such as 20ms (us, ms or s)" >&2; exit 2; }
  mkdir -p "$2/logs"
  WORK=$(mktemp -d "/tmp/signlion-$3-XXXXXX")
  PIDS=()
  trap star_bench_cleanup EXIT
  trap 'exit 130' INT TERM
}

star_drops_mark() { STAR_DROPS0=$(netns_star_drops); }
star_drops_note() {  # LOG LABEL
  echo "# packets the links' tbf queues dropped during $2: $(($(netns_star_drops) - STAR_DROPS0))" >>"$1"
}

rate_mbps() { local b; b=$(netns_rate_bits "$1") && echo $((b / 8000000)); }
rate_mbits() { local b; b=$(netns_rate_bits "$1") && echo $((b / 1000000)); }
star_link_env() {
  [[ ${STAR_LINK_ENV:-0} == 1 ]] || return 0
  echo "SIGNLION_COST_BETA_MBPS=$(rate_mbps "$1") SIGNLION_SOCKET_SPEED=$(rate_mbits "$1")"
}

star_bench_check_sizes() {
  local v
  for v in "$@"; do
    [[ ${!v} =~ ^[0-9]+[KMGkmg]?$ ]] || { echo "$v=${!v}: a byte count with an optional K, M or G" >&2; exit 2; }
  done
  [[ $FACTOR =~ ^[0-9]+$ ]] && ((FACTOR >= 2)) || { echo "FACTOR=$FACTOR: an integer >= 2" >&2; exit 2; }
}

star_bench_check_rates() {  # NAME RATE...: exits 2 unless every RATE is a tbf rate netns_rate_bits reads
  local name=$1 r
  shift
  for r in "$@"; do
    netns_rate_bits "$r" >/dev/null || { echo "$name: '$r' is not a rate (digits then gbit or mbit)" >&2; exit 2; }
  done
}

#!/usr/bin/env bash
# CTest netns.link_rate_defaults: with no SIGNLION_* tuning variable, the host
# communicator learns the link's rate (src/host/link_rate.h) and makes the
# same choices as the variables a user who knows the link would set
# (scripts/star_bench_lib.sh star_link_env): the algorithm of every size, the
# host chunk, the data streams per connection. A 4-rank star (one namespace a
# node) at 100 Mbit/s, then the same star changed to 1 Gbit/s and 10 Gbit/s:
# each job is a new process and learns the rate anew. Choices are read from
# the INFO log of rank 0. Where the machine does not sustain a rate (10 Gbit/s
# on a small machine), the defaults are compared with the variables for the
# rate they learned, and the script says so. Last, SIGNLION_HOST_CHUNK_BYTES
# set on one rank only is refused at init. Exit 77 (skipped) only when
# namespaces cannot be made.
#   [LINK_RATES="100mbit 1gbit 10gbit"] netns_link_rate.sh SIGN_ALLREDUCE_PERF
set -uo pipefail
PERF=$1
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/netns_lib.sh"
source "$HERE/star_bench_lib.sh"
N=4
WORK=$(mktemp -d /tmp/signlion-linkrate-XXXXXX)
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  netns_star_down
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
[[ -x $PERF ]] || { echo "no $PERF" >&2; exit 2; }
if ! netns_star_up "$N" 100mbit; then
  echo "SKIP: cannot create network namespaces ($NETNS_WHY)"
  exit 77
fi
# Any variable that tells signlion the link must be absent from the defaults' jobs.
unset SIGNLION_COST_BETA_MBPS SIGNLION_SOCKET_SPEED SIGNLION_NSOCKS SIGNLION_HOST_CHUNK_BYTES SIGNLION_ALGO

job() {  # LABEL ENV... : one 4-rank run of sign_allreduce_perf; rank 0's log in $WORK/LABEL.log
  local label=$1 r rc=0 idf=$WORK/id.$1
  shift
  rm -f "$idf"
  PIDS=()
  for ((r = N - 1; r >= 0; r--)); do
    local only=()
    ((r == 0)) && only=(${RANK0_ENV:-})
    ip netns exec "${STAR_NS[$r]}" env SIGNLION_SOCKET_IFNAME="=$STAR_IF" SIGNLION_HOSTID="ns$r" \
      SIGNLION_DEBUG=INFO "$@" "${only[@]}" timeout 120 \
      "$PERF" --rank "$r" --nranks "$N" --id-file "$idf" -b 64K -e 16M -f 16 -n 2 -w 1 -c 1 -T 60 \
      >"$WORK/$label.rank$r.log" 2>&1 &
    PIDS+=($!)
  done
  for p in "${PIDS[@]}"; do wait "$p" || rc=$?; done
  PIDS=()
  cp "$WORK/$label.rank0.log" "$WORK/$label.log"
  if ((rc != 0)); then
    echo "FAIL: job $label exited $rc"; tail -n 20 "$WORK/$label.rank"*.log
    return 1
  fi
}

# The choices a job's log shows, one per line: each size's algorithm, the chunk, the streams.
# Streams are read from the connections made after the rate was learned: the
# defaults' job first connects the probe that measures the link (one stream,
# the rate still unknown), the variables' job has no probe.
choices() {
  grep -o 'count [0-9]*: chose [a-z_-]*' "$1" | sort -u
  grep -o 'host chunk [0-9]* bytes' "$1" | sort -u
  sed -n '/ncclSignCommInitRank: link rate/,$p' "$1" | grep -o 'connected to [^,]*, [0-9]* streams' |
    sed 's/connected to [^,]*, //' | sort -u
}

fails=0
for rate in ${LINK_RATES:-100mbit 1gbit 10gbit}; do
  netns_star_rate "$rate" || { echo "FAIL: cannot set the star to $rate"; fails=$((fails + 1)); continue; }
  job "defaults-$rate" || { fails=$((fails + 1)); continue; }
  line=$(grep -o 'link rate [0-9]* Mbit/s ([^)]*)' "$WORK/defaults-$rate.log" | head -1)
  echo "$rate, defaults: $line"
  learned=$(sed -n 's/.*link rate \([0-9]*\) Mbit\/s.*/\1/p' <<<"$line")
  if [[ $line != *measured* || -z $learned ]]; then
    echo "FAIL: $rate: the defaults' job did not measure the link"; fails=$((fails + 1)); continue
  fi
  want=$(rate_mbits "$rate")
  if ((learned != want)); then
    if [[ $rate == 10gbit ]]; then
      echo "NOTE: a $rate tbf star sustains $learned Mbit/s on this machine: compared with the variables for $learned"
      want=$learned
    else
      echo "FAIL: $rate: learned $learned Mbit/s, want $want"; fails=$((fails + 1)); continue
    fi
  fi
  job "variables-$rate" SIGNLION_COST_BETA_MBPS=$((want / 8)) SIGNLION_SOCKET_SPEED="$want" ||
    { fails=$((fails + 1)); continue; }
  choices "$WORK/defaults-$rate.log" >"$WORK/d"
  choices "$WORK/variables-$rate.log" >"$WORK/v"
  echo "$rate: choices with the variables for $want Mbit/s:"; sed 's/^/  /' "$WORK/v"
  if [[ $(grep -c chose "$WORK/v") -lt 3 || $(grep -c chunk "$WORK/v") -ne 1 || $(grep -c streams "$WORK/v") -ne 1 ]]; then
    echo "FAIL: $rate: the log does not show every choice"; fails=$((fails + 1)); continue
  fi
  if ! diff "$WORK/v" "$WORK/d" >/dev/null; then
    echo "FAIL: $rate: the defaults chose otherwise:"; diff "$WORK/v" "$WORK/d"; fails=$((fails + 1)); continue
  fi
  echo "$rate: the defaults made the same choices"
done
# A variable that stops the chunk from following the rate, set on one rank
# only with the value the others start from (so the settings check at init
# sees no difference): refused at init, naming it, rather than ranks that
# cut their messages differently.
netns_star_rate 100mbit
if RANK0_ENV=SIGNLION_HOST_CHUNK_BYTES=512K job one-rank-set >/dev/null 2>&1; then
  echo "FAIL: a SIGNLION_HOST_CHUNK_BYTES set on rank 0 only was not refused"; fails=$((fails + 1))
elif ! grep -q "did not set SIGNLION_HOST_CHUNK_BYTES\|set SIGNLION_HOST_CHUNK_BYTES, rank 0 did not\|rank 0 set it" \
    "$WORK"/one-rank-set.rank*.log; then
  echo "FAIL: no WARN names SIGNLION_HOST_CHUNK_BYTES"; grep -h WARN "$WORK"/one-rank-set.rank*.log | head -5
  fails=$((fails + 1))
else
  echo "SIGNLION_HOST_CHUNK_BYTES on one rank only: refused at init: $(grep -ho 'rank [0-9] did not set SIGNLION_HOST_CHUNK_BYTES[^(]*' "$WORK"/one-rank-set.rank*.log | head -1)"
fi
((fails == 0))

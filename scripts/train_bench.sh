#!/usr/bin/env bash
# End-to-end training benchmark (docs/TRAINING.md): examples/train.py itself,
# one rank per network namespace of netns_lib.sh's star (tbf-limited links to a
# bridge), launched as torchrun launches its workers (env://: MASTER_ADDR,
# MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE per rank; rank 0's
# namespace is the master), every contender in one run:
#   compute                  local Lion, no communication (the floor)
#   ddp-adamw ddp-lion       DDP (its fp32 all-reduce overlapped with backward)
#   ddp-fp16-lion ddp-bf16-lion   DDP + the fp16 / bf16 compression hook (bf16:
#                            skipped where gloo cannot all-reduce bfloat16)
#   ddp-powersgd-lion        DDP + the PowerSGD hook (one bucket's round at a time)
#   allgather-lion           the reference code's all-gather of packed 1-bit votes
#   signlion-mavo signlion-average            signlion, overlap off
#   signlion-mavo+overlap signlion-average+overlap   overlap on (when this
#                            signlion's DistributedLion takes overlap=)
#   signlion-mavo+delay      --delay 1: each step applies the previous step's
#                            vote (overlap off: the vote starts in step() and
#                            travels during the next forward and backward; not
#                            in the default lists)
#   any contender +clip      the same with --clip-grad-norm CLIP (default 1.0):
#                            clip_grad_norm_ between backward() and step()
#                            (not in the default lists; timed per run only)
# For each N and workload: every contender of CONV_CONTENDERS first trains
# CONV_STEPS steps at CONV_RATE with an evaluation every EVAL_EVERY steps (the
# accuracy or loss curve; the overlapped variants and allgather-lion apply the
# same update as signlion-mavo / -average and are timed only), then every
# contender runs TIME_STEPS steps at each rate of RATES (step times: medians of
# the last TIMED; the steps before are warm-up). Contenders alternate inside
# each rate. Each run's rank 0 writes OUT/runs/*.json; the ranks compare their
# parameters at the end (train.py exits 1 when a contender that communicates
# ends with ranks that differ). scripts/train_summary.py prints the tables and
# draws OUT/train_curves.png and OUT/train_throughput.png.
#   scripts/train_bench.sh [BUILD_DIR] [OUT_DIR]       (root)
# Environment (defaults: the benchmark of docs/TRAINING.md):
#   RANKS="4 8" WORKLOADS="mlp lm" RATES="100mbit 1gbit 10gbit" CONV_RATE=10gbit
#   CONTENDERS=<all of the above> CONV_CONTENDERS=<all but the overlapped
#   variants and allgather-lion> CONV_STEPS_mlp=100 CONV_STEPS_lm=150
#   EVAL_EVERY=5 TIME_STEPS=5 TIMED=3 BATCH_mlp=16 BATCH_lm=4 CONTEXT=32
#   VAL_SIZE_mlp=500 VAL_SIZE_lm=64 RUN_TIMEOUT=900 (seconds per run)
#   TRACE=DIR: the timed runs of the DistributedLion contenders (signlion-*,
#     compute) also record the step timeline of their last TIMED steps (train.py
#     --trace): DIR/<run>.rank<r>.json per rank, for ui.perfetto.dev
#   STAR_LINK_ENV=1: tell signlion the link's rate (SIGNLION_COST_BETA_MBPS,
#     SIGNLION_SOCKET_SPEED from the tbf rate) instead of letting it learn it
#   SMOKE=1: loopback, no namespaces, N=2, every contender 3 steps of the mlp
#     workload at width 256 (the CTest smoke test; exits 1 if a run fails or
#     ranks differ)
# Exit: 0 when every run passed; 77 when namespaces cannot be made.
set -uo pipefail
BUILD=$(realpath "${1:-build}")
OUT=$(realpath -m "${2:-train-out}")
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
PY=${SIGNLION_PYTHON:-/usr/bin/python3}
LIB=$BUILD/src/host/libnccl-sign.so
[[ -f $LIB ]] || { echo "no $LIB: build the target nccl-sign first" >&2; exit 2; }
SMOKE=${SMOKE:-0}
ALL="compute ddp-adamw ddp-lion ddp-fp16-lion ddp-bf16-lion ddp-powersgd-lion allgather-lion signlion-mavo signlion-mavo+overlap signlion-average signlion-average+overlap"
CONTENDERS=${CONTENDERS:-$ALL}
CONV_CONTENDERS=${CONV_CONTENDERS-"compute ddp-adamw ddp-lion ddp-fp16-lion ddp-bf16-lion ddp-powersgd-lion signlion-mavo signlion-average"}
RUN_TIMEOUT=${RUN_TIMEOUT:-900}
EVAL_EVERY=${EVAL_EVERY:-5} TIME_STEPS=${TIME_STEPS:-5} TIMED=${TIMED:-3} CONTEXT=${CONTEXT:-32}
WIDTH=${WIDTH:-4096}
if ((SMOKE)); then
  RANKS=2 WORKLOADS=mlp CONV_RATE=loopback RATES="" CONV_CONTENDERS=$CONTENDERS CONV_STEPS_mlp=3 EVAL_EVERY=2
  VAL_SIZE_mlp=64 BATCH_mlp=8 WIDTH=256
else
  RANKS=${RANKS:-"4 8"} WORKLOADS=${WORKLOADS:-"mlp lm"} CONV_RATE=${CONV_RATE:-10gbit}
  RATES=${RATES-"100mbit 1gbit 10gbit"}
  BATCH_lm=${BATCH_lm:-4} VAL_SIZE_lm=${VAL_SIZE_lm:-64} CONV_STEPS_lm=${CONV_STEPS_lm:-150}
fi
source "$HERE/netns_lib.sh"
source "$HERE/star_bench_lib.sh"
((SMOKE)) || star_bench_check_rates "CONV_RATE RATES" $CONV_RATE $RATES
# star_bench_begin wants an executable to check: the interpreter that runs the example
star_bench_begin "$PY" "$OUT" train
mkdir -p "$OUT/runs"
FAILED=() SKIPPED=()
OVERLAP_OK=$(SIGNLION_LIBRARY=$LIB "$PY" -c "import sys; sys.path[:0] = ['$ROOT/python', '$ROOT/examples']
import train_baselines; print(int(train_baselines.overlap_supported()))" 2>/dev/null || echo 0)

knob() { local v="$1_$2"; echo "${!v:-$3}"; }  # knob NAME WORKLOAD DEFAULT: NAME_<workload> or DEFAULT

run_contender() {  # label n rate workload steps eval_every phase
  local label=$1 n=$2 rate=$3 wl=$4 steps=$5 every=$6 phase=$7 r rc=0 name overlap port clip=() delay=0
  [[ $label == *+clip ]] && clip=(--clip-grad-norm "${CLIP:-1.0}")
  name=${label%+clip}
  name=${name%+overlap}
  [[ $name == *+delay ]] && delay=1
  name=${name%+delay}
  [[ $name == compute ]] && name=local-lion
  overlap=off; [[ ${label%+clip} == *+overlap ]] && overlap=on
  if [[ $overlap == on && $OVERLAP_OK != 1 ]]; then
    SKIPPED+=("$label (this signlion's DistributedLion has no overlap argument)")
    return 0
  fi
  local tag=$phase-$wl-n$n-$rate-$label
  local log=$OUT/logs/$tag.txt json=$OUT/runs/$tag.json trace=()
  if [[ -n ${TRACE:-} && $phase == time && ($name == signlion-* || $name == local-lion) ]]; then
    mkdir -p "$TRACE"
    trace=(--trace "$(realpath -m "$TRACE")/$tag.json" --trace-warmup $((steps - TIMED)) --trace-steps "$TIMED")
  fi
  local args=(--workload "$wl" --optimizer "$name" --overlap "$overlap" --delay "$delay" --steps "$steps"
              --eval-every "$every"
              --batch "$(knob BATCH "$wl" 16)" --val-size "$(knob VAL_SIZE "$wl" 500)" --threads 1
              --width "$WIDTH" --context "$CONTEXT" --log-every 1 --json "$json" "${clip[@]}" "${trace[@]}")
  echo "== $phase $wl N=$n $rate $label, $steps steps ($(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg))"
  rm -f "$json"
  port=$((29500 + RANDOM % 2000))
  PIDS=()
  ((SMOKE)) || star_drops_mark
  for ((r = n - 1; r >= 0; r--)); do
    local envs=(MASTER_PORT=$port RANK=$r WORLD_SIZE=$n LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 OMP_NUM_THREADS=1
                OPENBLAS_NUM_THREADS=1 SIGNLION_LIBRARY=$LIB)
    local out; out=$([[ $r == 0 ]] && echo "$log" || echo "$WORK/rank$r.log")
    if ((SMOKE)); then
      env "${envs[@]}" MASTER_ADDR=127.0.0.1 GLOO_SOCKET_IFNAME=lo timeout "$RUN_TIMEOUT" \
        "$PY" "$ROOT/examples/train.py" "${args[@]}" >"$out" 2>&1 &
    else
      ip netns exec "${STAR_NS[$r]}" env "${envs[@]}" MASTER_ADDR="${STAR_ADDR[0]}" GLOO_SOCKET_IFNAME=$STAR_IF \
        SIGNLION_HOSTID="ns$r" $(star_link_env "$rate") timeout "$RUN_TIMEOUT" \
        "$PY" "$ROOT/examples/train.py" "${args[@]}" >"$out" 2>&1 &
    fi
    PIDS+=($!)
  done
  for p in "${PIDS[@]}"; do wait "$p" || rc=$?; done
  PIDS=()
  ((SMOKE)) || star_drops_note "$log" "$label"
  if ((rc == 3)) && grep -q "^train.py: $name: " "$log"; then  # the contender cannot run with this PyTorch
    SKIPPED+=("$tag ($(grep -m1 "^train.py: $name: " "$log" | cut -d: -f3-))")
    return 0
  fi
  if ((rc != 0)) || [[ ! -s $json ]]; then
    FAILED+=("$tag (exit $rc, $log)")
    tail -5 "$log"; for f in "$WORK"/rank*.log; do tail -3 "$f"; done
    return 0
  fi
  grep -E "^(train.py|eval|final)" "$log"
  "$PY" "$HERE/train_summary.py" --timed "$TIMED" --one "$json"
}

echo "# $(date -u +%FT%TZ) $(uname -r), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); torch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null); overlap supported: $OVERLAP_OK"
for n in $RANKS; do
  if ((!SMOKE)) && ! netns_star_up "$n" "$CONV_RATE"; then
    echo "SKIP: cannot create network namespaces ($NETNS_WHY)"
    exit 77
  fi
  for wl in $WORKLOADS; do
    ((SMOKE)) || netns_star_rate "$CONV_RATE"
    for c in $CONV_CONTENDERS; do
      run_contender "$c" "$n" "$CONV_RATE" "$wl" "$(knob CONV_STEPS "$wl" 100)" "$EVAL_EVERY" conv
    done
    for rate in $RATES; do
      netns_star_rate "$rate"
      for c in $CONTENDERS; do
        run_contender "$c" "$n" "$rate" "$wl" "$TIME_STEPS" 0 time
      done
    done
  done
  ((SMOKE)) || netns_star_down
done

if ((!SMOKE)); then
  "$PY" "$HERE/train_summary.py" --timed "$TIMED" --plots "$OUT" "$OUT/runs"
fi
for s in "${SKIPPED[@]}"; do echo "skipped: $s"; done
for f in "${FAILED[@]}"; do echo "FAILED: $f"; done
echo "$(ls "$OUT/runs" | wc -l) runs in $OUT/runs, ${#FAILED[@]} failed"
((${#FAILED[@]} == 0))

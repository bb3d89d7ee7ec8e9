#!/usr/bin/env bash
# A rank lost mid-training (docs/PYTORCH.md, "When a rank fails"): examples/train.py
# with signlion's DistributedLion on 3 ranks, each rank a torchrun of its own
# (--nnodes 3 --node_rank i, static rendezvous at rank 0's address,
# --max_restarts 1) in its own network namespace of netns_lib.sh's star
# (198.18.0.0/24, 1 Gbit/s links), over each transport of the host communicator
# named (default: both):
#   socket  the built-in socket transport
#   ucx     the UCX net plugin (SIGNLION_NET_PLUGIN, UCX_TLS=tcp); skipped with
#           a note when the build has no libnccl-net-signlion-ucx.so
# First an uninterrupted reference run (socket), then per transport two faulted
# runs from scratch:
#   kill  rank 1's worker gets SIGKILL mid-training;
#   stop  rank 1's worker gets SIGSTOP mid-training, and SIGCONT once both
#         survivors have reported (it then fails on the closed links itself).
# Each faulted run passes when: both survivors print signlion's CommError
# naming their rank and the timeout (--timeout, the process group's, which the
# communicator follows), at a time (train.py's own timestamp of the error, so
# neither the polling here nor a late flush of the log counts) after the
# signal of: SIGKILL, under TIMEOUT / 2 (a broken connection is seen at once);
# SIGSTOP, from TIMEOUT / 2 (a frozen peer is told from a slow one only by the
# timeout) to TIMEOUT + MARGIN, MARGIN the library's propagation (the first
# survivor's abort reaching the other) and the step's return to Python on a
# loaded machine (gloo's error instead where a survivor was waiting in one of
# the process group's own collectives: a connection closed or reset by the
# killed peer, a timeout of the same length after a stop; bounded the same, the run
# prints which); the signal came before the training ended; every
# torchrun restarts its worker once and exits 0; the restarted job resumed from
# a checkpoint (step > 0); and every rank's final parameters equal the
# reference run's bit for bit.
#   scripts/netns_train_faults.sh PYTHON LIBNCCL_SIGN [TRANSPORT...]   (root)
# Exit: 0 pass, 1 fail, 2 bad arguments, 77 skip (not root, no namespaces, no
# torchrun, no dataset, no transport left to test). Every namespace is
# deleted at exit, also on failure.
set -uo pipefail
PY=${1:?python}
LIB=$(realpath "${2:?libnccl-sign.so}")
shift 2
TRANSPORTS=("$@")
((${#TRANSPORTS[@]})) || TRANSPORTS=(socket ucx)
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
# The signal goes SETTLE s after the first checkpoint (CKPT_EVERY), with about
# STEPS - CKPT_EVERY steps left: a step takes 3 to 8 ms on an idle machine, so
# the training outlasts the signal by seconds; a signal that still comes after
# the end is a failure that says so.
N=3 VICTIM=1 TIMEOUT=10 MARGIN=2 STEPS=1200 CKPT_EVERY=50 SETTLE=0.2 RUN_LIMIT=240
# How long the errors are looked for in the logs: the bound, and as long again
# for a log written late by a starved process (the bound itself is checked on
# train.py's timestamps).
COLLECT=$((2 * (TIMEOUT + MARGIN)))
# the UCX plugin: UCX_PLUGIN, else where the build puts it beside LIBNCCL_SIGN
UCX_PLUGIN=${UCX_PLUGIN:-$(dirname "$(dirname "$(dirname "$LIB")")")/lib/libnccl-net-signlion-ucx.so}

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; FAILED=1; }
RUN=()
for t in "${TRANSPORTS[@]}"; do
  case $t in
    socket) RUN+=(socket) ;;
    ucx) if [[ -f $UCX_PLUGIN ]]; then RUN+=(ucx); else
           echo "ucx: skipped: no $UCX_PLUGIN (CMake did not find UCX: Debian's libucx-dev)"; fi ;;
    *) echo "transport '$t': socket or ucx" >&2; exit 2 ;;
  esac
done
((${#RUN[@]})) || skip "no transport left to test"
transport_env() {  # TRANSPORT -> TRANSPORT_ENV
  TRANSPORT_ENV=()
  [[ $1 == ucx ]] && TRANSPORT_ENV=(SIGNLION_NET_PLUGIN="$UCX_PLUGIN" UCX_TLS=tcp UCX_NET_DEVICES="$STAR_IF"
                                    UCX_WARN_UNUSED_ENV_VARS=n)
  return 0
}
[[ -f $LIB ]] || { echo "no $LIB" >&2; exit 2; }
((EUID == 0)) || skip "network namespaces need root"
"$PY" -m torch.distributed.run --help >/dev/null 2>&1 || skip "torchrun ($PY -m torch.distributed.run) cannot run"
[[ -d /usr/share/datasets/fashion-mnist ]] || skip "no Fashion-MNIST (Debian's dataset-fashion-mnist; scripts/setup.sh)"

source "$HERE/netns_lib.sh"
DIR=$(mktemp -d /tmp/signlion-faults-XXXXXX)
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -KILL -- "-$p" 2>/dev/null; kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
  netns_star_down
  [[ -n ${KEEP:-} ]] || rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
netns_star_up "$N" 1gbit || skip "cannot create network namespaces ($NETNS_WHY)"
FAILED=0

ARGS=(--workload mlp --width 256 --batch 8 --val-size 64 --steps "$STEPS" --threads 1 --log-every 1
      --timeout "$TIMEOUT" --seed 3)

# start_job TAG EXTRA...: one torchrun per namespace, in new sessions (so that
# cleanup reaches their workers); their pids in PIDS, logs in DIR/TAG.rank*.log
start_job() {
  local tag=$1 r port=$((30000 + RANDOM % 2000))
  shift
  PIDS=()
  for ((r = 0; r < N; r++)); do
    setsid ip netns exec "${STAR_NS[$r]}" env SIGNLION_LIBRARY="$LIB" GLOO_SOCKET_IFNAME="$STAR_IF" \
      SIGNLION_HOSTID="ns$r" OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "${TRANSPORT_ENV[@]}" \
      timeout -k 5 "$RUN_LIMIT" "$PY" -m torch.distributed.run --redirects 9:0 --tee 9:0 --nnodes "$N" \
      --node_rank "$r" --nproc_per_node 1 --master_addr "${STAR_ADDR[0]}" --master_port "$port" \
      --max_restarts 1 "$ROOT/examples/train.py" "${ARGS[@]}" "$@" >"$DIR/$tag.rank$r.log" 2>&1 &
    PIDS+=($!)
  done
}

# wait_job TAG: every torchrun's exit status; fails the case unless all are 0
wait_job() {
  local tag=$1 r rc
  for ((r = 0; r < N; r++)); do
    wait "${PIDS[$r]}"; rc=$?
    ((rc == 0)) || { fail "$tag: rank $r's torchrun exited $rc"; tail -15 "$DIR/$tag.rank$r.log"; }
  done
  PIDS=()
}

# worker_of R: the pid of the training process under rank R's torchrun
# (setsid -> timeout -> torchrun -> worker; ip netns exec execs in place)
worker_of() {
  local t agent
  t=$(pgrep -P "${PIDS[$1]}" -x timeout || echo "${PIDS[$1]}")
  agent=$(pgrep -P "$t" | head -1)
  [[ -n $agent ]] && pgrep -P "$agent" -f train.py | head -1
}

compare_params() {  # TAG: every rank's final parameters against the reference's, bit for bit
  "$PY" - "$DIR" "$1" "$N" <<'EOF'
import sys, torch
d, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
bad = []
for r in range(n):
    ref, got = torch.load("%s/ref.params.rank%d" % (d, r)), torch.load("%s/%s.params.rank%d" % (d, tag, r))
    if len(ref) != len(got) or not all(torch.equal(a, b) for a, b in zip(ref, got)):
        bad.append(r)
print("%s: final parameters %s" % (tag, "equal the reference's bit for bit on every rank" if not bad
                                   else "DIFFER from the reference's on ranks %s" % bad))
sys.exit(1 if bad else 0)
EOF
}

T_START=$SECONDS
echo "# $(date -u +%FT%TZ) transports ${RUN[*]}, $N ranks (one namespace and torchrun each), timeout ${TIMEOUT}s"
transport_env socket
start_job ref --save-params "$DIR/ref.params"
wait_job ref
grep -h "^final" "$DIR/ref.rank0.log"
grep -h "^step $STEPS " "$DIR/ref.rank0.log"
((FAILED)) && exit 1

for transport in "${RUN[@]}"; do
transport_env "$transport"
for how in kill stop; do
  tag=$transport-$how ckpt=$DIR/$transport-$how.ckpt
  start_job "$tag" --ckpt-dir "$ckpt" --ckpt-every "$CKPT_EVERY" --resume --save-params "$DIR/$tag.params"
  # The moment comes from the workers' own files, not from their logs, which
  # reach DIR through torchrun's tee and lagged by seconds on a loaded machine
  # (a signal meant for step 65 once came after the last step): rank 0 writes
  # LATEST once every rank has written its checkpoint of step CKPT_EVERY. The
  # victim is found first, so that nothing slow stands between the file and
  # the signal; SETTLE lets the ranks leave the checkpoint's barriers.
  for ((i = 0; i < 600; i++)); do [[ -s $ckpt/LATEST ]] && break; sleep 0.1; done
  victim=$(worker_of "$VICTIM")
  if [[ ! -s $ckpt/LATEST || -z $victim ]]; then
    fail "$tag: no checkpoint of step $CKPT_EVERY (or no worker of rank $VICTIM) in 60 s"
    wait_job "$tag"; continue
  fi
  sleep "$SETTLE"
  t0=$(date +%s.%N)
  [[ $how == kill ]] && kill -KILL "$victim" || kill -STOP "$victim"
  if (($(cat "$ckpt/LATEST") >= STEPS - CKPT_EVERY)) || grep -q "^final step" "$DIR/$tag.rank0.log"; then
    fail "$tag: the training had (nearly) ended before the signal (raise STEPS)"
    [[ $how == stop ]] && kill -CONT "$victim"
    wait_job "$tag"; continue
  fi
  echo "$tag: SIG${how^^} to rank $VICTIM's worker (pid $victim)"
  # every survivor must fail within the bounds above: with signlion's
  # CommError, or, where it was waiting in one of the process group's own
  # collectives (train.py's, PyTorch's) when the peer was lost, with gloo's
  # error (a connection closed by the killed peer, or a timeout of the same
  # length after a stop); which one depends on where the signal caught it.
  # All survivors are looked for at once, each until its error shows or COLLECT
  # has passed.
  if [[ $how == kill ]]; then lo=0 hi=$(echo "$TIMEOUT / 2" | bc -l); else
    lo=$(echo "$TIMEOUT / 2" | bc -l) hi=$((TIMEOUT + MARGIN)); fi
  declare -A by=()
  for ((k = 0; k < 10 * COLLECT + 10; k++)); do
    for ((r = 0; r < N; r++)); do
      ((r == VICTIM)) || [[ -n ${by[$r]:-} ]] && continue
      if grep -q "train.py: rank $r failed at [^ ]* (CommError: signlion: rank $r of $N" "$DIR/$tag.rank$r.log"; then
        by[$r]=CommError
      elif [[ $how == stop ]] &&
        grep -q "train.py: rank $r failed at [^ ]* (RuntimeError: .*gloo.*Timed out waiting $((TIMEOUT * 1000))ms" \
          "$DIR/$tag.rank$r.log"; then
        by[$r]="gloo's timeout"
      elif [[ $how == kill ]] &&
        grep -Eq "train.py: rank $r failed at [^ ]* \(RuntimeError: .*gloo.*Connection (closed|reset) by peer" \
          "$DIR/$tag.rank$r.log"; then
        by[$r]="gloo's closed connection"
      fi
    done
    ((${#by[@]} == N - 1)) && break
    (($(echo "$(date +%s.%N) - $t0 < $COLLECT" | bc))) || break
    sleep 0.1
  done
  for ((r = 0; r < N; r++)); do
    ((r == VICTIM)) && continue
    if [[ -z ${by[$r]:-} ]]; then
      fail "$tag: rank $r reported no CommError (nor gloo's error) within $COLLECT s"
      # what it did report (its log's tail may be the restarted job's end)
      grep -m5 "failed at\|Error\|SignalException" "$DIR/$tag.rank$r.log" || tail -5 "$DIR/$tag.rank$r.log"
      continue
    fi
    at=$(grep -o -m1 "^train.py: rank $r failed at [^ ]*" "$DIR/$tag.rank$r.log" | awk '{print $NF}')
    seen=$(echo "$(date -d "$at" +%s.%N) - $t0" | bc -l)
    printf '%s: rank %d raised %s %.2f s after the signal (bound %g to %g s)\n' "$tag" "$r" "${by[$r]}" "$seen" \
      "$lo" "$hi"
    (($(echo "$seen >= $lo && $seen <= $hi" | bc -l))) ||
      fail "$tag: rank $r's error came $seen s after the signal, outside [$lo, $hi] s"
    [[ ${by[$r]} != CommError ]] || grep -q "timeout of $TIMEOUT s (the process group's timeout)" "$DIR/$tag.rank$r.log" ||
      fail "$tag: rank $r's error does not name the timeout"
  done
  unset by
  [[ $how == stop ]] && kill -CONT "$victim"
  wait_job "$tag"
  resumed=$(grep -ho "overlap on, steps [0-9]*\.\." "$DIR/$tag.rank0.log" | sed -n 2p | grep -o "[0-9]*")
  if [[ -z $resumed || $resumed == 0 ]]; then
    fail "$tag: the restarted job did not resume from a checkpoint (start step '${resumed}')"
  else
    echo "$tag: torchrun restarted the job, which resumed from step $resumed"
  fi
  compare_params "$tag" || FAILED=1
done
done
((FAILED)) && { echo "FAILED (${RUN[*]}, $((SECONDS - T_START)) s)"; exit 1; }
echo "PASS (${RUN[*]}, $((SECONDS - T_START)) s)"

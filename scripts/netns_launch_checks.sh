# Checks shared by the tests that launch across namespace "nodes"
# (mpirun_netns_test.sh, slurm_netns_test.sh, firewall_netns_test.sh). Source
# this file; the caller keeps a count of failed runs in `failures`.
#   perf_log_check WHAT LOG RC NODES  -> "ok: WHAT" and the last two rows, or
#       "FAIL: WHAT: why" and the log's tail (failures += 1). LOG holds rank 0's
#       table (and any rank's INFO lines); RC is the launcher's exit status; NODES
#       the layout the communicator must report ("2 nodes x 2": the INFO line of
#       ncclSignCommInitRank, SIGNLION_DEBUG=INFO SIGNLION_DEBUG_SUBSYS=INIT).
# A run passes when it exited 0, its footer reads "# Out of bounds values : 0 OK"
# and every row's #wrong (out of place and in place) is 0.
perf_log_check() {
  local what=$1 log=$2 rc=$3 nodes=$4 why=""
  if [ "$rc" != 0 ]; then why="exit status $rc"
  elif ! grep -q "Out of bounds values : 0 OK" "$log"; then why="no '# Out of bounds values : 0 OK'"
  elif awk '$1 ~ /^[0-9]+$/ && ($9 != 0 || $13 != 0) { bad = 1 } END { exit !bad }' "$log"; then why="#wrong not 0"
  elif ! grep -q "$nodes" "$log"; then why="the communicator did not see $nodes"
  fi
  if [ -n "$why" ]; then
    echo "FAIL: $what: $why"
    tail -30 "$log"
    failures=$((failures + 1))
  else
    echo "ok: $what"
    grep -E '^ +[0-9]+ ' "$log" | tail -2
  fi
}

# The training runs: examples/train.py on 2 nodes x 2 ranks for a few steps.
TRAIN_ARGS=(--workload mlp --width 256 --batch 8 --val-size 64 --steps 5 --threads 1 --log-every 1 --timeout 60)

#   train_unavailable PYTHON -> prints why the training run cannot run here
#       ("note: training not run: ...") and returns 0; returns 1 when it can.
train_unavailable() {
  if [[ -z $1 ]]; then
    echo "note: training not run (no PYTHON LIBNCCL_SIGN given)"
  elif ! "$1" -m torch.distributed.run --help >/dev/null 2>&1; then
    echo "note: training not run: $1 has no torch.distributed.run"
  elif [[ ! -d /usr/share/datasets/fashion-mnist ]]; then
    echo "note: training not run: no Fashion-MNIST (Debian's dataset-fashion-mnist; scripts/setup.sh)"
  else
    return 1
  fi
  return 0
}

#   train_log_check WHAT LOG RC [WHY] -> "ok: WHAT" and the final line when RC is 0, WHY
#       is empty and LOG (rank 0's output) says the 4 ranks' parameters are identical
#       and the communicator saw 2 nodes x 2; else "FAIL: WHAT: ..." (failures += 1).
train_log_check() {
  local what=$1 log=$2 rc=$3 why=${4:-}
  if [[ -z $why ]]; then
    if [[ $rc != 0 ]]; then why="exit status $rc"
    elif ! grep -q "parameters identical on all 4 ranks" "$log"; then why="no 'parameters identical on all 4 ranks'"
    elif ! grep -q "2 nodes x 2" "$log"; then why="the communicator did not see 2 nodes x 2"
    fi
  fi
  if [[ -z $why ]]; then
    echo "ok: $what"
    grep -E "^final" "$log"
  else
    echo "FAIL: $what: $why"
    tail -30 "$log"
    failures=$((failures + 1))
  fi
}

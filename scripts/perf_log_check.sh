# Checks one sign_allreduce_perf run for the netns launch tests. Source this file;
# the caller keeps a count in `failures`.
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

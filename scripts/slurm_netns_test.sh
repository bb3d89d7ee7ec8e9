#!/usr/bin/env bash
# Real Slurm across two "nodes" (network namespaces of this machine on a
# bridge, 198.18.0.0/24; scripts/slurm_netns_lib.sh runs slurmctld and one
# slurmd per node), launched as docs/dev/SCALE.md's recipes say, from the hub
# namespace (the login node):
#  1. srun -N 2 --ntasks-per-node 2 scripts/slurm_rank.sh ID_FILE sign_allreduce_perf ...
#     (no MPI: srun's variables mapped onto the rank options; -A hier, ring, auto);
#  2. srun --mpi=pmix -N 2 --ntasks-per-node 2 sign_allreduce_perf ... (an
#     MPI-built perf tool and Slurm's PMIx plugin: MPI shares the id);
#  3. with PYTHON and LIBNCCL_SIGN: srun -N 2 --ntasks-per-node 1 starts one
#     torchrun per node (--nnodes 2 --node_rank $SLURM_NODEID --nproc_per_node 2)
#     running examples/train.py for a few steps with signlion's DistributedLion.
# Every perf run checks each call (-c 1: "#wrong" 0 and the footer's OK); every
# run must see 2 nodes x 2 ranks (the INFO line of ncclSignCommInitRank) over
# the namespaces' interface only (SIGNLION_SOCKET_IFNAME==slv0); the training
# run must end with identical parameters on all 4 ranks.
#   slurm_netns_test.sh PATH/TO/sign_allreduce_perf [PYTHON LIBNCCL_SIGN]
# Exit 0 pass, 1 fail, 77 skip (not root, no namespaces, no Slurm: Debian's
# slurm-wlm; or its daemons would not start here). Daemons, their files and
# the namespaces are removed at exit, also on failure.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
PERF=${1:?usage: $0 PATH/TO/sign_allreduce_perf [PYTHON LIBNCCL_SIGN]}
PY=${2:-}
LIB=${3:-}
[[ -z $PY || -f $LIB ]] || { echo "FAIL: no library $LIB (LIBNCCL_SIGN)"; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root for network namespaces and Slurm's daemons"
command -v ip >/dev/null || skip "no ip(8)"
for tool in slurmctld slurmd srun sinfo nsenter; do
  command -v $tool >/dev/null || skip "no $tool (Debian's slurm-wlm: apt-get install slurm-wlm)"
done
[ -x "$PERF" ] || { echo "FAIL: $PERF is not executable"; exit 1; }

# shellcheck source=netns_lib.sh
source "$HERE/netns_lib.sh"
# shellcheck source=slurm_netns_lib.sh
source "$HERE/slurm_netns_lib.sh"
# shellcheck source=netns_launch_checks.sh
source "$HERE/netns_launch_checks.sh"
DIR=$(mktemp -d /tmp/signlion-slurm-XXXXXX)
cleanup() {
  slurm_netns_down
  netns_star_down
  [[ -n ${KEEP:-} ]] || rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
netns_star_up 2 10gbit || skip "namespaces unavailable: $NETNS_WHY"
slurm_netns_up "$DIR/slurm" 4 || skip "Slurm's daemons did not start here: $SLURM_WHY"
echo "# slurm: $(ip netns exec "$STAR_HUB" sinfo -h -N -o '%N %T %c' | tr '\n' ' ')"
ARGS=(-b 4K -e 1M -f 16 -n 2 -w 1 -c 1 -T 60)
export SIGNLION_SOCKET_IFNAME="=$STAR_IF" SIGNLION_DEBUG=INFO SIGNLION_DEBUG_SUBSYS=INIT
failures=0

# 1. srun without MPI, through slurm_rank.sh (the id through a file on the shared /tmp).
for algo in hier ring auto; do
  log="$DIR/srun_$algo.log"
  timeout -k 5 120 ip netns exec "$STAR_HUB" srun -N 2 --ntasks-per-node 2 --time 2 \
    "$HERE/slurm_rank.sh" "$DIR/job_$algo.id" "$PERF" "${ARGS[@]}" -A "$algo" >"$log" 2>&1
  perf_log_check "srun -N 2 --ntasks-per-node 2 slurm_rank.sh, -A $algo" "$log" $? "2 nodes x 2"
done

# 2. srun --mpi=pmix with the MPI-built tool (MPI_Bcast shares the id).
if ! ldd "$PERF" | grep -q libmpi; then
  echo "note: srun --mpi=pmix not run: $PERF was built without MPI"
elif ! ip netns exec "$STAR_HUB" srun --mpi=list 2>&1 | grep -q pmix; then
  echo "note: srun --mpi=pmix not run: this Slurm has no PMIx plugin"
else
  log="$DIR/srun_pmix.log"
  # Both namespace nodes share this machine's hostname and boot id: the host id is the node's
  # Slurm name, as slurm_rank.sh sets it; and Open MPI's own traffic goes over TCP on the star
  # (its shared-memory transport names its segments after the hostname, and crashed here).
  OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=$STAR_NET \
    timeout -k 5 120 ip netns exec "$STAR_HUB" srun --mpi=pmix -N 2 --ntasks-per-node 2 --time 2 \
    bash -c 'SIGNLION_HOSTID=$SLURMD_NODENAME exec "$@"' - "$PERF" "${ARGS[@]}" -A hier >"$log" 2>&1
  perf_log_check "srun --mpi=pmix -N 2 --ntasks-per-node 2, -A hier" "$log" $? "2 nodes x 2"
fi

# 3. Training: one torchrun per node, started by srun.
if ! train_unavailable "$PY"; then
  log="$DIR/train.log"
  port=$((30000 + RANDOM % 2000))
  # The host id is the node's Slurm name, as above.
  timeout -k 5 300 ip netns exec "$STAR_HUB" env SIGNLION_LIBRARY="$(realpath "$LIB")" GLOO_SOCKET_IFNAME="$STAR_IF" \
    OMP_NUM_THREADS=1 srun -N 2 --ntasks-per-node 1 --cpus-per-task 2 --time 4 \
    bash -c 'SIGNLION_HOSTID=$SLURMD_NODENAME exec "$0" -m torch.distributed.run --redirects 9:0 --tee 9:0 \
      --nnodes "$SLURM_NNODES" --node_rank "$SLURM_NODEID" --nproc_per_node 2 --master_addr "$1" \
      --master_port "$2" "${@:3}"' \
    "$PY" "${STAR_ADDR[0]}" "$port" "$ROOT/examples/train.py" "${TRAIN_ARGS[@]}" >"$log" 2>&1
  train_log_check "srun -N 2 --ntasks-per-node 1 torchrun --nnodes 2 --nproc_per_node 2 examples/train.py" "$log" $?
fi

[ "$failures" = 0 ] && echo "PASS" && exit 0
echo "FAIL: $failures run(s)"
exit 1

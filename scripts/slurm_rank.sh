#!/usr/bin/env bash
# Starts one rank of a signlion program under Slurm's srun without MPI: maps
# the variables srun sets for each task onto the program's rank options.
#   srun -N NODES --ntasks-per-node R scripts/slurm_rank.sh ID_FILE sign_allreduce_perf ARGS...
# runs `sign_allreduce_perf ARGS... --rank $SLURM_PROCID --nranks $SLURM_NTASKS
# --id-file ID_FILE`: task 0 writes the unique id to ID_FILE (a path every
# node sees: a shared file system), the others wait for it. SIGNLION_HOSTID
# defaults to $SLURMD_NODENAME, the node's name as Slurm knows it (ranks with
# equal host ids form a node; docs/HOST.md). docs/dev/SCALE.md has the table of
# srun's variables. Under srun --mpi=pmix with an MPI-built
# sign_allreduce_perf, this script is not needed: it initializes MPI itself.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 ID_FILE PROGRAM [ARGS...]" >&2
  exit 2
fi
id_file=$1
shift
: "${SLURM_PROCID:?not started by srun (SLURM_PROCID unset)}"
: "${SLURM_NTASKS:?not started by srun (SLURM_NTASKS unset)}"
if [ -n "${SLURMD_NODENAME:-}" ]; then export SIGNLION_HOSTID=${SIGNLION_HOSTID:-$SLURMD_NODENAME}; fi
exec "$@" --rank "$SLURM_PROCID" --nranks "$SLURM_NTASKS" --id-file "$id_file"

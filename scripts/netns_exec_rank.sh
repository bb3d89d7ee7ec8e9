#!/usr/bin/env bash
# Runs one MPI rank inside its own network namespace: mpirun starts this
# script once per rank (on the local node), and it enters namespace
# PREFIX<rank> before exec'ing the program. The rank keeps its tie to mpirun
# (PMIx over a Unix socket is not bound to a network namespace), while its MPI
# and signlion traffic use the namespace's interface.
#   mpirun -np N netns_exec_rank.sh PREFIX IFNAME program args...
set -euo pipefail
prefix=$1 ifname=$2
shift 2
rank=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:?not started by mpirun}}
exec ip netns exec "$prefix$rank" env SIGNLION_SOCKET_IFNAME="=$ifname" "$@"

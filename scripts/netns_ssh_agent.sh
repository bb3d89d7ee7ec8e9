#!/usr/bin/env bash
# mpirun's remote-launch agent (--mca plm_rsh_agent) for "nodes" that are
# network namespaces on this machine: mpirun calls it as it would call ssh,
#   netns_ssh_agent.sh HOST COMMAND-LINE...
# and it runs the command line in namespace HOST, with SIGNLION_HOSTID=HOST
# (namespaces share the hostname and boot id that tell real machines apart,
# docs/HOST.md). scripts/mpirun_netns_test.sh uses it; on a real cluster
# mpirun's ssh does this job.
set -euo pipefail
host=$1
shift
exec ip netns exec "$host" env SIGNLION_HOSTID="$host" /bin/sh -c "$*"

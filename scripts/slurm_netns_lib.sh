# A real Slurm cluster on netns_lib.sh's star: slurmctld in the hub namespace
# (the bridge's address 198.18.0.254, the "login node" where srun runs) and one
# slurmd per star namespace, each namespace a Slurm node named after it.
# Source after netns_lib.sh. Test-local configuration under a directory of the
# caller's: AuthType=auth/none and CredType=cred/none (no munge key to share;
# Slurm 22.05 has both plugins), every state, spool, pid and log file in that
# directory, proctrack/linuxproc and task/none (no cgroup set-up).
#
#   slurm_netns_up DIR CPUS -> after netns_star_up: writes DIR/slurm.conf
#       (every node CPUS CPUs), exports SLURM_CONF, starts the daemons, and waits
#       up to 30 s for every node to be idle; returns 1 when it cannot
#       (SLURM_WHY says why, the daemons' logs are in DIR)
#   slurm_netns_down -> kills every process left in the star's namespaces and
#       the hub (the daemons, slurmstepd, tasks, srun), waiting up to 10 s
#   slurm_netns_srun ARGS... -> srun ARGS in the hub namespace
#
# slurmd is started with nsenter --net, not `ip netns exec`: the latter mounts
# a fresh /sys, which hides /sys/fs/cgroup, and slurmd 22.05 will not start
# without a cgroup file system even when no cgroup plugin is configured.

SLURM_CTL_ADDR=198.18.0.254
SLURM_WHY=""

slurm_netns_up() {
  local dir=$1 cpus=$2 i ns idle
  local -a names=()
  ip -n "$STAR_HUB" addr show dev br0 | grep -q "$SLURM_CTL_ADDR/" ||
    ip -n "$STAR_HUB" addr add "$SLURM_CTL_ADDR/24" dev br0 || { SLURM_WHY="address on the bridge"; return 1; }
  mkdir -p "$dir/state"
  for ns in "${STAR_NS[@]}"; do mkdir -p "$dir/spool/$ns"; names+=("$ns"); done
  {
    echo "ClusterName=signlion"
    echo "SlurmctldHost=$(hostname -s)($SLURM_CTL_ADDR)"
    echo "AuthType=auth/none"
    echo "CredType=cred/none"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "StateSaveLocation=$dir/state"
    echo "SlurmdSpoolDir=$dir/spool/%n"
    echo "SlurmctldPidFile=$dir/slurmctld.pid"
    echo "SlurmdPidFile=$dir/slurmd.%n.pid"
    echo "SlurmctldLogFile=$dir/slurmctld.log"
    echo "SlurmdLogFile=$dir/slurmd.%n.log"
    echo "MailProg=/bin/true"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "MpiDefault=none"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_CPU"
    echo "SlurmdParameters=config_overrides"
    echo "ReturnToService=2"
    for ((i = 0; i < ${#STAR_NS[@]}; i++)); do
      echo "NodeName=${STAR_NS[$i]} NodeAddr=${STAR_ADDR[$i]} CPUs=$cpus State=UNKNOWN"
    done
    echo "PartitionName=netns Nodes=ALL Default=YES MaxTime=10 State=UP"
  } >"$dir/slurm.conf"
  export SLURM_CONF=$dir/slurm.conf
  ip netns exec "$STAR_HUB" slurmctld -D -i -f "$SLURM_CONF" >"$dir/slurmctld.out" 2>&1 &
  for ns in "${STAR_NS[@]}"; do
    # Each node reads its own copy, beside an mpi.conf of its own: PMIx's client directory
    # (/tmp/spmix_appdir_UID_STEP by default) would be the same path on both nodes here.
    mkdir -p "$dir/$ns" "$dir/pmix/$ns"
    cp "$SLURM_CONF" "$dir/$ns/slurm.conf"
    echo "PMIxCliTmpDirBase=$dir/pmix/$ns" >"$dir/$ns/mpi.conf"
    nsenter --net="/run/netns/$ns" slurmd -D -N "$ns" -f "$dir/$ns/slurm.conf" >"$dir/slurmd.$ns.out" 2>&1 &
  done
  for ((i = 0; i < 30; i++)); do
    idle=$(ip netns exec "$STAR_HUB" sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)
    ((idle == ${#STAR_NS[@]})) && return 0
    sleep 1
  done
  SLURM_WHY="$idle of ${#STAR_NS[@]} nodes idle after 30 s: $(tail -n 2 "$dir"/*.out | tr '\n' ' ')"
  return 1
}

slurm_netns_srun() {
  ip netns exec "$STAR_HUB" srun "$@"
}

# Every process in the namespaces is one this cluster started (the star's
# namespaces are the caller's own).
slurm_netns_down() {
  local ns pids i sig
  for ((i = 0; i < 20; i++)); do
    pids=$(for ns in "$STAR_HUB" "${STAR_NS[@]}"; do ip netns pids "$ns" 2>/dev/null; done)
    [[ -z $pids ]] && return 0
    sig=TERM
    ((i >= 10)) && sig=KILL
    # shellcheck disable=SC2086
    kill -$sig $pids 2>/dev/null
    sleep 0.5
  done
}

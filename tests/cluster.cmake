# Launching across machines as docs/ADMIN.md ("Launching") says,
# on "nodes" that are network namespaces of this machine (label netns; root;
# each skips, exit 77, with its reason where namespaces or a tool are missing).
#
# netns.slurm_two_nodes_two_ranks: a real Slurm (slurmctld and one slurmd per
# node, test-local configuration) runs sign_allreduce_perf with srun -N 2
# --ntasks-per-node 2 through scripts/slurm_rank.sh (hier, ring, auto) and with
# srun --mpi=pmix, and examples/train.py for 5 steps, one torchrun per node
# started by srun (scripts/slurm_netns_test.sh; 5 s without the training
# run, 21 to 34 s with it, here).
if(SIGNLION_BUILD_PERF)
  set(_cluster_train_args)
  if(NOT SIGNLION_SANITIZE AND EXISTS ${SIGNLION_PYTHON})
    set(_cluster_train_args ${SIGNLION_PYTHON} $<TARGET_FILE:nccl-sign>)
  endif()
  add_test(NAME netns.slurm_two_nodes_two_ranks
           COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/slurm_netns_test.sh $<TARGET_FILE:sign_allreduce_perf>
                   ${_cluster_train_args})
  set_tests_properties(netns.slurm_two_nodes_two_ranks PROPERTIES LABELS "scale;netns" SKIP_RETURN_CODE 77
                       TIMEOUT 900)
endif()

# netns.firewall_documented_ports_only: the same two nodes behind nftables
# firewalls that open only docs/ADMIN.md's ports ("Ports and firewalls") and
# drop the rest: sign_allreduce_perf passes with SIGNLION_SOCKET_PORT_RANGE set
# and opened (over the socket transport, and over UCX with UCX_TCP_PORT_RANGE
# opened too), and with the ephemeral range narrowed and opened (then also the
# training example with torchrun's port); with the root's port closed, or the
# range opened but not set, or UCX's own range closed (UCX_TCP_CONN_NB=y), every
# rank fails with an error naming what did not answer within the bootstrap
# timeout, never hangs
# (scripts/firewall_netns_test.sh; 18 to 29 s without the training run, 40 to 64 s with it, here).
if(SIGNLION_BUILD_PERF)
  add_test(NAME netns.firewall_documented_ports_only
           COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/firewall_netns_test.sh $<TARGET_FILE:sign_allreduce_perf>
                   ${_cluster_train_args})
  set_tests_properties(netns.firewall_documented_ports_only PROPERTIES LABELS "scale;netns" SKIP_RETURN_CODE 77
                       TIMEOUT 600)
endif()

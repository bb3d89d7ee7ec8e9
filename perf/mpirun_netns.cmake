# netns.mpirun_two_nodes_two_ranks: sign_allreduce_perf across two network-namespace "nodes" x 2 ranks, started
# by mpirun (one orted per node) and by srun's variables set by hand
# (scripts/mpirun_netns_test.sh; skips without root, namespaces or MPI).
if(SIGNLION_BUILD_TESTS)
  add_test(NAME netns.mpirun_two_nodes_two_ranks
           COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/mpirun_netns_test.sh $<TARGET_FILE:sign_allreduce_perf>)
  set_tests_properties(netns.mpirun_two_nodes_two_ranks PROPERTIES LABELS "scale;netns" SKIP_RETURN_CODE 77
                       TIMEOUT 900)
endif()

# Scale (label "scale"): the schedules at 64..4096 ranks in one process over
# in-memory links, and the host communicator with up to 32 rank processes.
# Not in the sanitizer passes (they run labels unit and multirank): the same
# code runs there at N <= 16, and these sizes cost minutes under ASan/TSan.
add_executable(signlion_scale_sim scale/scale_sim_main.cc scale/schedule_sim.cc)
target_link_libraries(signlion_scale_sim PRIVATE signlion_test_common)
# A subset of the full range (the tool alone runs N up to 4096, 512 nodes).
add_test(NAME scale.schedules_simulated_to_1024_ranks COMMAND signlion_scale_sim --quick --max-n 1024 --max-nodes 128)
set_tests_properties(scale.schedules_simulated_to_1024_ranks PROPERTIES LABELS scale TIMEOUT 600)

# The host communicator with N rank processes on loopback: every algorithm
# forced in turn, bit for bit against the reference, each rank's sockets and
# threads within what its schedule's peers need (signlion_rank_resources).
add_executable(signlion_rank_resources scale/rank_resources_main.cc scale/schedule_sim.cc)
target_link_libraries(signlion_rank_resources PRIVATE signlion_host signlion_test_common)
add_test(NAME scale.host_communicator_32_rank_processes
         COMMAND signlion_rank_resources --nranks 32 --algos ring,hd,allgather,fieldsum,hier,direct,tree,auto --check-bounds)
set_tests_properties(scale.host_communicator_32_rank_processes PROPERTIES LABELS scale TIMEOUT 600)

# The direct algorithm at its rank limit (algo/direct.h): 16 processes, each
# with links to the 15 others, within the bounds its peers need.
add_test(NAME scale.host_communicator_16_rank_processes_direct
         COMMAND signlion_rank_resources --nranks 16 --algos direct,auto --check-bounds)
set_tests_properties(scale.host_communicator_16_rank_processes_direct PROPERTIES LABELS scale TIMEOUT 600)

# A rank lost mid-training (docs/PYTORCH.md, "When a rank fails"), included from
# tests/CMakeLists.txt inside its Python block (SIGNLION_PYTHON exists, not a
# sanitizer build).
#
# python.faults.*: DistributedLion on 3 spawned gloo ranks (loopback) whose
# timeout follows init_process_group(timeout=3 s): a frozen rank (overlap on)
# and an exited rank (overlap off) give CommError on the others within the
# timeout, then every call is refused (python/tests/test_torch_lion_faults.py).
signlion_python_tests(faults test_torch_lion_faults.py LostRank frozen_rank_overlap_on exited_rank_overlap_off
                      TIMEOUT 180)
# The same with the 300-element bucket's step pipelined in 5 chunks (SIGNLION_LION_CHUNK=64): the
# lost rank is seen by a collective on the optimizer's own thread.
signlion_python_tests(faults-pipelined test_torch_lion_faults.py LostRank frozen_rank_overlap_on
                      exited_rank_overlap_off TIMEOUT 180
                      ENVIRONMENT SIGNLION_LIBRARY=$<TARGET_FILE:nccl-sign> SIGNLION_SOCKET_IFNAME=lo
                                  SIGNLION_LION_CHUNK=64)

# netns.train_lost_rank: examples/train.py on 3 ranks, each a torchrun in its own
# network namespace, a rank killed (SIGKILL) and one frozen (SIGSTOP) mid-training,
# over the socket transport and the UCX plugin (when built): the others raise
# CommError within the timeout, torchrun restarts the job, which resumes from the
# last checkpoint and ends bit for bit as an uninterrupted run
# (scripts/netns_train_faults.sh; root; about 4 minutes).
set(_signlion_faults_env "")
if(TARGET nccl-net-signlion-ucx)
  set(_signlion_faults_env "UCX_PLUGIN=$<TARGET_FILE:nccl-net-signlion-ucx>")
endif()
add_test(NAME netns.train_lost_rank
         COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/netns_train_faults.sh ${SIGNLION_PYTHON} $<TARGET_FILE:nccl-sign>)
set_tests_properties(netns.train_lost_rank PROPERTIES LABELS "python;netns" SKIP_RETURN_CODE 77 TIMEOUT 900
                     ENVIRONMENT "${_signlion_faults_env}")

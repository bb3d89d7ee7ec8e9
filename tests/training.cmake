# Training with torchrun (docs/TRAINING.md), included from tests/CMakeLists.txt
# inside its python block (SIGNLION_PYTHON exists, not a sanitizer build).
#
# The training benchmark's smoke configuration: every contender of
# scripts/train_bench.sh, 2 ranks on loopback, 3 steps of the mlp workload;
# fails when a run fails or a synchronous contender's ranks differ.
add_test(NAME python.train_bench_smoke
         COMMAND env SMOKE=1 SIGNLION_PYTHON=${SIGNLION_PYTHON} bash ${PROJECT_SOURCE_DIR}/scripts/train_bench.sh
                 ${PROJECT_BINARY_DIR} ${PROJECT_BINARY_DIR}/train-smoke)
set_tests_properties(python.train_bench_smoke PROPERTIES LABELS python TIMEOUT 900)
# Interface selection: with SIGNLION_SOCKET_IFNAME unset the host communicator
# follows GLOO_SOCKET_IFNAME, then NCCL_SOCKET_IFNAME, across two namespaces
# where the right interface is not the first (scripts/netns_ifname_follow.sh).
add_test(NAME netns.ifname_follows_gloo_and_nccl
         COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/netns_ifname_follow.sh ${SIGNLION_PYTHON} $<TARGET_FILE:nccl-sign>)
set_tests_properties(netns.ifname_follows_gloo_and_nccl PROPERTIES LABELS "python;netns" SKIP_RETURN_CODE 77
                     TIMEOUT 300)

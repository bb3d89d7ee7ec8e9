# ncclSignAllReduce on a GPU (label "gpu"): ranks as processes on the one
# device, each its own NCCL_HOSTID, NCCL's traffic over our net plugin. The
# test links NCCL and the shared CUDA runtime as a framework does;
# libnccl-sign.so finds that NCCL in the process. Without a device each test
# prints "[  SKIPPED ]" with the reason, and CTest reports it skipped.
add_executable(signlion_gpu_nccl_tests ${CMAKE_CURRENT_LIST_DIR}/nccl_sign_allreduce_test.cc
                                       ${PROJECT_SOURCE_DIR}/perf/nccl_ranks.cc)
target_include_directories(signlion_gpu_nccl_tests PRIVATE ${PROJECT_SOURCE_DIR}/perf ${NCCL_INCLUDE_DIR})
target_link_libraries(signlion_gpu_nccl_tests PRIVATE nccl-sign signlion_test_common ${NCCL_LIBRARY} CUDA::cudart
                      GTest::gtest_main)
target_compile_definitions(signlion_gpu_nccl_tests PRIVATE
                           SIGNLION_TEST_PLUGIN_PATH="$<TARGET_FILE:nccl-net-signlion>")
add_dependencies(signlion_gpu_nccl_tests nccl-net-signlion)
gtest_discover_tests(signlion_gpu_nccl_tests TEST_PREFIX "gpu."
                     PROPERTIES LABELS gpu TIMEOUT 900 SKIP_REGULAR_EXPRESSION "\\[  SKIPPED"
                     DISCOVERY_TIMEOUT 60)

# Distributed Lion's device path (label "gpu"), built with it
# (src/lion/CMakeLists.txt: when the library has ncclSignAllReduce). Without
# a device each test prints GTEST_SKIP's "[  SKIPPED ]" with the reason, and
# CTest reports it skipped (not passed).

# In one process: the CUDA passes against the CPU passes, the device
# optimizer ("local") against the host one.
add_executable(signlion_gpu_lion_tests ${CMAKE_CURRENT_LIST_DIR}/lion_kernel_test.cc
                                       ${CMAKE_CURRENT_LIST_DIR}/lion_device_test.cc)
target_link_libraries(signlion_gpu_lion_tests PRIVATE signlion_lion signlion_test_common GTest::gtest_main)
gtest_discover_tests(signlion_gpu_lion_tests TEST_PREFIX "gpu."
                     PROPERTIES LABELS gpu TIMEOUT 600 SKIP_REGULAR_EXPRESSION "\\[  SKIPPED"
                     DISCOVERY_TIMEOUT 60)

# The passes' source on the SIMT emulator too (label unit): the emulated
# kernel binary already holds every kernels/*.cu (tests/simt/CMakeLists.txt).
if(TARGET signlion_simt_kernel_tests)
  target_sources(signlion_simt_kernel_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/lion_kernel_test.cc
                                                    ${PROJECT_SOURCE_DIR}/src/lion/lion_passes.cc)
endif()
# The device optimizer itself (src/lion, nccl_lion_comm.cc included, through
# its C entry points) on the emulator with the emulated NCCL path
# (tests/simt/nccl_executor.cmake): what its steps ask of CUDA events, in and
# out of graph capture (label unit).
if(TARGET signlion_simt_nccl_tests)
  file(GLOB _lion_emulated CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/lion/*.cc)
  target_sources(signlion_simt_nccl_tests PRIVATE ${PROJECT_SOURCE_DIR}/tests/simt/nccl_lion_comm_test.cc
                                                  ${_lion_emulated})
  target_compile_definitions(signlion_simt_nccl_tests PRIVATE SIGNLION_LION_ON_NCCL=1)
  target_link_libraries(signlion_simt_nccl_tests PRIVATE signlion_host)
endif()

# Across processes on one GPU (N = 2, 4), over the shared library as a
# framework loads it, NCCL linked by the test as a framework links it, NCCL's
# traffic through our net plugin.
add_executable(signlion_gpu_lion_mp_tests ${CMAKE_CURRENT_LIST_DIR}/lion_nccl_mp_test.cc
                                          ${PROJECT_SOURCE_DIR}/perf/nccl_ranks.cc)
target_include_directories(signlion_gpu_lion_mp_tests PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/perf
                           ${NCCL_INCLUDE_DIR})
target_link_libraries(signlion_gpu_lion_mp_tests PRIVATE nccl-sign ${NCCL_LIBRARY} CUDA::cudart GTest::gtest_main)
target_compile_definitions(signlion_gpu_lion_mp_tests PRIVATE
                           SIGNLION_TEST_PLUGIN_PATH="$<TARGET_FILE:nccl-net-signlion>")
add_dependencies(signlion_gpu_lion_mp_tests nccl-net-signlion)
gtest_discover_tests(signlion_gpu_lion_mp_tests TEST_PREFIX "gpu."
                     PROPERTIES LABELS gpu TIMEOUT 900 SKIP_REGULAR_EXPRESSION "\\[  SKIPPED"
                     DISCOVERY_TIMEOUT 60)

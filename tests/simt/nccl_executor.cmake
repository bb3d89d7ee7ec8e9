# The NCCL executor's device path on the SIMT emulator (label unit): the
# executor, DeviceBackend and the kernels' own source (the emulated
# translation units that simt/CMakeLists.txt generated, _emulated_sources),
# with NCCL played by threads behind an NcclApi table (ncclCommSplit too),
# the comm context that learns the nodes and caches plans, and the entry
# points' bodies (sign_allreduce_nccl.h: which rules a call runs with). Only the src/nccl
# files that path needs are compiled in (not signlion_nccl: it links cudart).
# Built as the emulated kernel tests are (their flags, definitions, includes).
add_executable(signlion_simt_nccl_tests ${CMAKE_CURRENT_LIST_DIR}/nccl_executor_test.cc
               ${CMAKE_CURRENT_LIST_DIR}/emulator.cc ${CMAKE_CURRENT_LIST_DIR}/cuda_runtime.cc
               ${CMAKE_CURRENT_LIST_DIR}/nccl_runtime.cc ${_emulated_sources}
               ${PROJECT_SOURCE_DIR}/src/nccl/nccl_plan.cc ${PROJECT_SOURCE_DIR}/src/nccl/nccl_executor.cc
               ${PROJECT_SOURCE_DIR}/src/nccl/device_backend.cc ${PROJECT_SOURCE_DIR}/src/nccl/call_agreement.cc
               ${PROJECT_SOURCE_DIR}/src/nccl/comm_context.cc ${PROJECT_SOURCE_DIR}/src/nccl/node_groups.cc
               ${PROJECT_SOURCE_DIR}/src/nccl/nccl_params.cc ${PROJECT_SOURCE_DIR}/src/nccl/segments.cc
               ${PROJECT_SOURCE_DIR}/src/nccl/sign_allreduce_nccl.cc ${PROJECT_SOURCE_DIR}/src/nccl/nccl_symbols.cc)
foreach(_prop INCLUDE_DIRECTORIES COMPILE_DEFINITIONS COMPILE_OPTIONS LINK_OPTIONS)
  set_property(TARGET signlion_simt_nccl_tests PROPERTY ${_prop} $<TARGET_PROPERTY:signlion_simt_kernel_tests,${_prop}>)
endforeach()
target_include_directories(signlion_simt_nccl_tests SYSTEM PRIVATE ${NCCL_INCLUDE_DIR})
# nccl_symbols.cc: the entry points look up the process's NCCL when given
# none; the tests always give theirs, so it is linked, never searched.
target_link_libraries(signlion_simt_nccl_tests PRIVATE signlion_test_common GTest::gtest_main ${CMAKE_DL_LIBS})
gtest_discover_tests(signlion_simt_nccl_tests TEST_PREFIX "simt."
                     PROPERTIES LABELS unit TIMEOUT 900 DISCOVERY_TIMEOUT 60)

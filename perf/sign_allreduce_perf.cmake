# sign_allreduce_perf: nccl-tests' all_reduce_perf for the host sign all-reduce
# (ranks as threads, as processes started by hand, or as MPI processes when
# OpenMPI is found: the same binary initializes MPI only under mpirun).
# It calls the library as users do, through libnccl-sign.so; signlion_core gives
# it the plain reference of the contract (bits/vote_reference.h) for -c.
if(TARGET nccl-sign)
  add_executable(sign_allreduce_perf ${CMAKE_CURRENT_LIST_DIR}/sign_allreduce_perf.cc
                                     ${CMAKE_CURRENT_LIST_DIR}/perf_inputs.cc ${CMAKE_CURRENT_LIST_DIR}/perf_report.cc
                                     ${CMAKE_CURRENT_LIST_DIR}/onebit_baseline.cc
                                     ${CMAKE_CURRENT_LIST_DIR}/onebit_reference.cc)
  # signlion_host: the transport (host::Net) under -o onebit, the 1-bit
  # compressed all-reduce baseline (onebit_baseline.h), which has links of its own.
  target_link_libraries(sign_allreduce_perf PRIVATE nccl-sign signlion_core signlion_host Threads::Threads)
  # --nccl, the GPU mode, when libnccl-sign.so has ncclSignAllReduce. The
  # binary links NCCL and the CUDA runtime as a framework does.
  if(SIGNLION_LIB_HAS_NCCL)
    target_sources(sign_allreduce_perf PRIVATE ${CMAKE_CURRENT_LIST_DIR}/sign_allreduce_perf_nccl.cc
                                               ${CMAKE_CURRENT_LIST_DIR}/nccl_ranks.cc)
    target_include_directories(sign_allreduce_perf PRIVATE ${NCCL_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS})
    target_link_libraries(sign_allreduce_perf PRIVATE ${NCCL_LIBRARY} CUDA::cudart)
    target_compile_definitions(sign_allreduce_perf PRIVATE SIGNLION_PERF_NCCL)
  endif()
  find_package(MPI COMPONENTS C QUIET)
  if(MPI_C_FOUND)
    target_link_libraries(sign_allreduce_perf PRIVATE MPI::MPI_C)
    # OMPI_SKIP_MPICXX: the C API only, from C++ (no libmpi_cxx).
    target_compile_definitions(sign_allreduce_perf PRIVATE SIGNLION_PERF_MPI OMPI_SKIP_MPICXX MPICH_SKIP_MPICXX)
    message(STATUS "signlion: sign_allreduce_perf with MPI (${MPI_C_LIB_NAMES})")
  else()
    message(STATUS "signlion: sign_allreduce_perf without MPI (no MPI found)")
  endif()
endif()

# The inputs and expected outputs of its -c check, against the plain reference (label "unit").
if(SIGNLION_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
  add_executable(sign_allreduce_perf_inputs_test ${CMAKE_CURRENT_LIST_DIR}/perf_inputs_test.cc
                                                 ${CMAKE_CURRENT_LIST_DIR}/perf_inputs.cc)
  target_link_libraries(sign_allreduce_perf_inputs_test PRIVATE signlion_core GTest::gtest_main)
  gtest_discover_tests(sign_allreduce_perf_inputs_test TEST_PREFIX "perf." PROPERTIES LABELS unit
                       DISCOVERY_TIMEOUT 60)
endif()

# The 1-bit compressed all-reduce baseline (-o onebit) against its plain
# reference bit for bit, and its wire bytes against the formula: ranks as
# threads on loopback. Label "multirank".
if(SIGNLION_BUILD_TESTS)
  add_executable(onebit_baseline_test ${PROJECT_SOURCE_DIR}/tests/perf/onebit_baseline_test.cc
                                      ${CMAKE_CURRENT_LIST_DIR}/onebit_baseline.cc
                                      ${CMAKE_CURRENT_LIST_DIR}/onebit_reference.cc)
  target_include_directories(onebit_baseline_test PRIVATE ${CMAKE_CURRENT_LIST_DIR})
  target_link_libraries(onebit_baseline_test PRIVATE signlion_host GTest::gtest_main Threads::Threads)
  gtest_discover_tests(onebit_baseline_test TEST_PREFIX "perf." PROPERTIES LABELS multirank TIMEOUT 300
                       ENVIRONMENT SIGNLION_SOCKET_IFNAME=lo DISCOVERY_TIMEOUT 60)
endif()

# The binary itself, ranks as threads on loopback: every op and datatype,
# checked (a wrong element makes it exit non-zero). Label "multirank".
if(SIGNLION_BUILD_TESTS)
  add_test(NAME perf.sign_allreduce_perf_threads
           COMMAND sign_allreduce_perf -t 5 -b 8 -e 1M -f 16 -w 1 -n 1 -c 1 -o all -d all)
  set_tests_properties(perf.sign_allreduce_perf_threads PROPERTIES LABELS multirank TIMEOUT 300
                       ENVIRONMENT SIGNLION_SOCKET_IFNAME=lo PASS_REGULAR_EXPRESSION "Out of bounds values : 0 OK")
endif()

# Every nccl-tests all_reduce_perf flag accepted, each run's output parsed
# (tests/perf/sign_allreduce_perf_flags_test.py). Label "multirank".
if(SIGNLION_BUILD_TESTS AND EXISTS "${SIGNLION_PYTHON}")
  add_test(NAME perf.sign_allreduce_perf_flags
           COMMAND ${SIGNLION_PYTHON} ${PROJECT_SOURCE_DIR}/tests/perf/sign_allreduce_perf_flags_test.py
                   $<TARGET_FILE:sign_allreduce_perf>)
  set_tests_properties(perf.sign_allreduce_perf_flags PROPERTIES LABELS multirank TIMEOUT 600)
  # -o/-d combinations it cannot run: exit 2 naming them, or a note under -o all / -d all.
  add_test(NAME perf.sign_allreduce_perf_unsupported_combos
           COMMAND ${SIGNLION_PYTHON} ${PROJECT_SOURCE_DIR}/tests/perf/unsupported_combos_test.py
                   $<TARGET_FILE:sign_allreduce_perf>)
  set_tests_properties(perf.sign_allreduce_perf_unsupported_combos PROPERTIES LABELS multirank TIMEOUT 300)
  # Ranks as processes whose environments differ: init fails on every rank,
  # naming the variable (tests/perf/settings_agree_test.py).
  add_test(NAME perf.settings_agree
           COMMAND ${SIGNLION_PYTHON} ${PROJECT_SOURCE_DIR}/tests/perf/settings_agree_test.py
                   $<TARGET_FILE:sign_allreduce_perf>)
  set_tests_properties(perf.settings_agree PROPERTIES LABELS multirank TIMEOUT 300)
endif()

# The GPU mode, small and checked: 2 ranks on the machine's GPUs (sharing one:
# each its own NCCL_HOSTID). Label "gpu"; exit 77 (no GPU) is a skip.
if(SIGNLION_BUILD_TESTS AND SIGNLION_LIB_HAS_NCCL)
  add_test(NAME perf.sign_allreduce_perf_nccl
           COMMAND sign_allreduce_perf --nccl -t 2 -b 8 -e 4M -f 8 -w 1 -n 2 -c 1 -o all -d all)
  set_tests_properties(perf.sign_allreduce_perf_nccl PROPERTIES LABELS gpu TIMEOUT 600 SKIP_RETURN_CODE 77
                       ENVIRONMENT "NCCL_SOCKET_IFNAME=lo;SIGNLION_SOCKET_IFNAME=lo"
                       FAIL_REGULAR_EXPRESSION "FAILED")
endif()

# A small emulated-Ethernet run (scripts/ethernet_bench.sh): 4 namespaces on a
# 1 Gbit/s bridge, 2 sizes, 1 iteration, a few contenders; exit 77 = skipped.
if(SIGNLION_BUILD_TESTS)
  add_test(NAME netns.ethernet_bench_small
           COMMAND ${CMAKE_COMMAND} -E env RANKS=4 RATES=1gbit MINB=1M MAXB=4M ITERS=1 WARMUP=0 RUN_TIMEOUT=60
                   "CONTENDERS=sign-auto sign-hd sign-allgather fieldsum-4 onebit fp32-sum mpi-fp32"
                   bash ${PROJECT_SOURCE_DIR}/scripts/ethernet_bench.sh ${PROJECT_BINARY_DIR}
                   ${CMAKE_CURRENT_BINARY_DIR}/ethernet_small)
  set_tests_properties(netns.ethernet_bench_small PROPERTIES LABELS netns SKIP_RETURN_CODE 77 TIMEOUT 120
                       FAIL_REGULAR_EXPRESSION "FAILED")
endif()

# With no SIGNLION_* tuning variable, the defaults learn the link and make the
# choices the right variables make (algorithm, chunk, streams): a 4-rank star
# at 100 Mbit/s, 1 and 10 Gbit/s, one job each (scripts/netns_link_rate.sh).
if(SIGNLION_BUILD_TESTS)
  add_test(NAME netns.link_rate_defaults
           COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/netns_link_rate.sh $<TARGET_FILE:sign_allreduce_perf>)
  set_tests_properties(netns.link_rate_defaults PROPERTIES LABELS netns SKIP_RETURN_CODE 77 TIMEOUT 600)
endif()

# A small emulated cluster (scripts/cluster_bench.sh): 2 namespaces as nodes,
# 2 ranks each, 1 Gbit/s node links, int8 votes (SIGN_DTYPE), 2 sizes; every
# contender checks its results, and the summary compares hier with the flat
# algorithms at both sizes (a pass regex makes CTest ignore the exit status:
# the script prints FAILED for a failed run or summary); exit 77 = skipped.
if(SIGNLION_BUILD_TESTS)
  add_test(NAME netns.cluster_bench_small
           COMMAND ${CMAKE_COMMAND} -E env NODES=2 PER=2 RATE=1gbit MINB=1M MAXB=4M ITERS=1 WARMUP=0 RUN_TIMEOUT=60
                   SIGN_DTYPE=int8 "CONTENDERS=sign-hier sign-hd sign-ring sign-auto fp32-sum"
                   bash ${PROJECT_SOURCE_DIR}/scripts/cluster_bench.sh ${PROJECT_BINARY_DIR}
                   ${CMAKE_CURRENT_BINARY_DIR}/cluster_small)
  set_tests_properties(netns.cluster_bench_small PROPERTIES LABELS netns SKIP_RETURN_CODE 77 TIMEOUT 120
                       FAIL_REGULAR_EXPRESSION "FAILED" PASS_REGULAR_EXPRESSION "summary .*4194304 B: hier inter-node bytes")
endif()

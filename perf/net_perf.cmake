# net_perf: latency and bandwidth of the socket transport (scripts/net_bench.sh).
if(TARGET signlion_net_socket)
  add_executable(net_perf ${CMAKE_CURRENT_LIST_DIR}/net_perf.cc)
  target_link_libraries(net_perf PRIVATE signlion_net_socket)
endif()

# --role self with its default sizes (8 B .. 1 MiB): every size gets a row,
# the plain socket pair's included (it stages a whole message). Label "unit".
if(SIGNLION_BUILD_TESTS AND TARGET net_perf)
  add_test(NAME perf.net_perf_self_default_sizes COMMAND net_perf --role self --iters 40 --blocks 2)
  set_tests_properties(perf.net_perf_self_default_sizes PROPERTIES LABELS unit TIMEOUT 120
                       PASS_REGULAR_EXPRESSION " 1048576 +[0-9.]+ +[0-9.]+ ")
endif()

# net_perf: latency and bandwidth of the socket transport (scripts/net_bench.sh).
if(TARGET signlion_net_socket)
  add_executable(net_perf ${CMAKE_CURRENT_LIST_DIR}/net_perf.cc)
  target_link_libraries(net_perf PRIVATE signlion_net_socket)
endif()

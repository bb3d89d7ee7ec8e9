# plugin_perf: the socket and the UCX transport measured like ucx_perftest
# (scripts/ucx_bench.sh).
if(TARGET signlion_net_socket)
  add_executable(plugin_perf ${CMAKE_CURRENT_LIST_DIR}/plugin_perf.cc)
  target_link_libraries(plugin_perf PRIVATE signlion_net_socket)
  if(TARGET signlion_net_ucx)
    target_link_libraries(plugin_perf PRIVATE signlion_net_ucx)
    target_compile_definitions(plugin_perf PRIVATE SIGNLION_PERF_HAVE_UCX)
  endif()
endif()
# ucp_layout_perf: plain UCP ping-pong in ucx_perftest's layout and in the UCX
# transport's (what the layout costs, apart from our code).
if(TARGET signlion_net_ucx)
  add_executable(ucp_layout_perf ${CMAKE_CURRENT_LIST_DIR}/ucp_layout_perf.cc)
  target_link_libraries(ucp_layout_perf PRIVATE signlion_net_ucx)
endif()

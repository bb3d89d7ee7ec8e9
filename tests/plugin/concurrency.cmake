# Comms of several threads are independent (net_concurrency_main.cc): two
# processes, 4 threads each, 3 send and 3 recv comms per thread per round,
# random interleavings of every call, closes with requests in flight on both
# sides, one listen comm per thread reused every round. A random seed each
# run (printed; replay with --seed). Labels: "plugin" (the main pass and
# ThreadSanitizer's) and "concurrency" (the AddressSanitizer pass of
# scripts/run_tests.sh takes that label too).
# The defects it found, each in its smallest deterministic form, in the
# in-process suite (so once per transport, as every plugin test).
target_sources(signlion_plugin_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/comm_independence_test.cc)

add_executable(signlion_net_concurrency net_concurrency_main.cc)
target_link_libraries(signlion_net_concurrency PRIVATE signlion_net_harness)
add_dependencies(signlion_net_concurrency nccl-net-signlion)

set(_conc_args --threads 4 --comms 3 --round-limit-ms 20000 --limit-ms 100000)
# Fewer rounds under a sanitizer (ThreadSanitizer takes about 15x as long).
if(SIGNLION_SANITIZE)
  set(_socket_rounds 15)
else()
  set(_socket_rounds 40)
endif()
add_test(NAME plugin.concurrency.socket
         COMMAND signlion_net_concurrency --lib $<TARGET_FILE:nccl-net-signlion> ${_conc_args} --rounds ${_socket_rounds})
set_tests_properties(plugin.concurrency.socket PROPERTIES LABELS "plugin;concurrency" TIMEOUT 150)

# UCX: over TCP and over shared memory in the main pass; over TCP under
# AddressSanitizer (with UCX's memory hooks off and its pools' allocations
# suppressed, as plugin.ucx_tcp.inprocess_suite); not under ThreadSanitizer,
# which cannot see UCX's own synchronization (CMakeLists.txt beside this).
if(TARGET nccl-net-signlion-ucx AND SIGNLION_TEST_UCX)
  add_dependencies(signlion_net_concurrency nccl-net-signlion-ucx)
  set(_ucx_cfgs)
  if(NOT SIGNLION_SANITIZE)
    set(_ucx_cfgs "tcp;tcp;plugin" "sm;sm,self;plugin")
  elseif(SIGNLION_SANITIZE MATCHES "address")
    set(_ucx_cfgs "tcp;tcp;concurrency")
  endif()
  list(LENGTH _ucx_cfgs _n)
  set(_i 0)
  while(_i LESS _n)
    list(GET _ucx_cfgs ${_i} _name)
    math(EXPR _j "${_i} + 1")
    list(GET _ucx_cfgs ${_j} _tls)
    math(EXPR _j "${_i} + 2")
    list(GET _ucx_cfgs ${_j} _label)
    math(EXPR _i "${_i} + 3")
    add_test(NAME plugin.concurrency.ucx_${_name}
             COMMAND signlion_net_concurrency --lib $<TARGET_FILE:nccl-net-signlion-ucx> ${_conc_args} --rounds 15)
    set(_env "UCX_TLS=${_tls}" "UCX_WARN_UNUSED_ENV_VARS=n")
    if(SIGNLION_SANITIZE)
      list(APPEND _env "UCX_MEM_EVENTS=no" "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/ucx_lsan.supp")
    endif()
    set_tests_properties(plugin.concurrency.ucx_${_name} PROPERTIES LABELS ${_label} TIMEOUT 150
                         ENVIRONMENT "${_env}")
    # One thread, one comm each way per round, half of them aborted by the
    # sender: endpoints of opposite directions between the two processes
    # (which UCX pairs when one worker both sends and receives).
    add_test(NAME plugin.concurrency.ucx_${_name}.opposite_directions
             COMMAND signlion_net_concurrency --lib $<TARGET_FILE:nccl-net-signlion-ucx> --threads 1 --comms 1
                     --rounds 20 --fates 1,1,0 --seed 1 --round-limit-ms 20000 --limit-ms 60000)
    set_tests_properties(plugin.concurrency.ucx_${_name}.opposite_directions PROPERTIES LABELS ${_label} TIMEOUT 90
                         ENVIRONMENT "${_env}")
  endwhile()
endif()

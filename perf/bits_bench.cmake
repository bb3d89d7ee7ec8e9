# bits_bench: Google Benchmark micro-benchmarks of the CPU vote algebra.
add_executable(bits_bench ${CMAKE_CURRENT_LIST_DIR}/bits_bench.cc)
target_link_libraries(bits_bench PRIVATE signlion_core benchmark::benchmark)

# --benchmark_color=false gives a log without ANSI escapes (README command (1) uses it).
if(SIGNLION_BUILD_TESTS)
  string(ASCII 27 _esc)
  add_test(NAME perf.bits_bench_color_false
           COMMAND bits_bench --elems=4096 --benchmark_min_time=0.001 --benchmark_filter=^Pack/0/4/0/
                   --benchmark_color=false)
  set_tests_properties(perf.bits_bench_color_false PROPERTIES LABELS unit FAIL_REGULAR_EXPRESSION "${_esc}"
                       PASS_REGULAR_EXPRESSION "Pack/0/4/0")
endif()

# A --benchmark_filter that leaves out the baselines: the summary says N/A
# for their ratio, not a ratio of 0 (which would read as infinitely slower).
if(SIGNLION_BUILD_TESTS)
  add_test(NAME perf.bits_bench_filtered_baseline_na
           COMMAND bits_bench --elems=4096 --benchmark_min_time=0.001 --benchmark_filter=^DecodeTrits/0/
                   --benchmark_color=false)
  set_tests_properties(perf.bits_bench_filtered_baseline_na PROPERTIES LABELS unit
                       PASS_REGULAR_EXPRESSION "DecodeTrits/0/[^\n]* write fp32 +N/A +N/A"
                       FAIL_REGULAR_EXPRESSION " 0\\.00 +0\\.00")
endif()

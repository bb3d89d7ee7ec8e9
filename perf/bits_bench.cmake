# bits_bench: Google Benchmark micro-benchmarks of the CPU vote algebra.
add_executable(bits_bench ${CMAKE_CURRENT_LIST_DIR}/bits_bench.cc)
target_link_libraries(bits_bench PRIVATE signlion_core benchmark::benchmark)

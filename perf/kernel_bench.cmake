# kernel_bench: throughput of the CUDA kernels on one GPU, next to a
# device-to-device copy of the same bytes (built when nvcc is found; without
# a device it says so and exits 77).
if(SIGNLION_HAVE_CUDA)
  add_executable(kernel_bench ${CMAKE_CURRENT_LIST_DIR}/kernel_bench.cu)
  target_link_libraries(kernel_bench PRIVATE signlion_kernels)
  set_target_properties(kernel_bench PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON)
  target_compile_options(kernel_bench PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
endif()

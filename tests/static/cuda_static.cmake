# Static checks of the CUDA kernels in libnccl-sign.so, no GPU needed (label
# "static"; tests/static/cuda_static_check.py says what each checks):
#  - static.cuda_resources: registers, shared, stack and local memory of every
#    kernel on every architecture; fails when a streaming kernel spills or
#    uses local memory.
#  - static.cuda_sass: the warp vote / shuffle / popcount instructions the
#    source asks for, no local loads or stores, SASS for every real and PTX for
#    every virtual architecture of CMAKE_CUDA_ARCHITECTURES.
# They read the library with cuobjdump and nvdisasm (the toolkit's, or the
# nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm Python packages that
# scripts/setup.sh installs). Skipped (77), with the reason, in a build without
# CUDA or where the tools are missing. About 11 CPU-seconds each (the SASS of
# 62 kernels on three architectures).
#  - static.stream_order: in the sources that enqueue work on a non-blocking
#    stream, no copy or fill on the legacy default stream (which that stream
#    does not wait for); reads the sources only, well under a second.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  set(_static_args --library $<TARGET_FILE:nccl-sign> --source-dir ${PROJECT_SOURCE_DIR})
  if(SIGNLION_HAVE_CUDA AND TARGET signlion_kernels)
    string(REPLACE ";" "," _static_archs "${CMAKE_CUDA_ARCHITECTURES}")
    list(APPEND _static_args --archs ${_static_archs} --cuda-bin ${CUDAToolkit_BIN_DIR})
  else()
    list(APPEND _static_args --skip "this build has no CUDA code (no nvcc found, or SIGNLION_ENABLE_CUDA=OFF)")
  endif()
  foreach(_check resources sass)
    add_test(NAME static.cuda_${_check}
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/cuda_static_check.py ${_check} ${_static_args})
    set_tests_properties(static.cuda_${_check} PROPERTIES LABELS static SKIP_RETURN_CODE 77 TIMEOUT 600)
  endforeach()
  add_test(NAME static.stream_order
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/stream_order_check.py ${PROJECT_SOURCE_DIR})
  set_tests_properties(static.stream_order PROPERTIES LABELS static TIMEOUT 60)
endif()

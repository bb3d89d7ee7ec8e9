# Fails if LIB records a dependency (DT_NEEDED) on the CUDA runtime, the CUDA
# driver or NCCL: libnccl-sign.so links the runtime statically and finds NCCL
# in the process at run time, so it loads on machines with neither.
execute_process(COMMAND readelf -d ${LIB} OUTPUT_VARIABLE dyn RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "readelf failed on ${LIB}")
endif()
string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*" needed "${dyn}")
foreach(line IN LISTS needed)
  if(line MATCHES "lib(cudart|cuda|nccl)\\.so")
    message(FATAL_ERROR "${LIB} depends on ${CMAKE_MATCH_0}: ${line}")
  endif()
  message(STATUS "${line}")
endforeach()

# signlion_python_tests(PREFIX SCRIPT CLASS CASES... [TIMEOUT s] [ENVIRONMENT list] [LABELS list]):
# one CTest test per unittest case, ROOT.PREFIX.CASE (ROOT.CASE for an empty PREFIX) running
# python/tests/SCRIPT CLASS.test_CASE under the interpreter SIGNLION_TEST_PYTHON (exit 77 skips).
# ROOT is SIGNLION_TEST_ROOT: "python" for SIGNLION_PYTHON (Debian's PyTorch), "torch2" for
# SIGNLION_TORCH2_PYTHON (tests/python_torch.cmake). ENVIRONMENT defaults to the built library on
# loopback, TIMEOUT to 300 s, LABELS to python (plus ROOT when that is not "python"). Included from
# tests/CMakeLists.txt inside its Python block.
function(signlion_python_tests prefix script test_class)
  cmake_parse_arguments(PARSE_ARGV 3 _arg "" "TIMEOUT" "ENVIRONMENT;LABELS")
  if(NOT DEFINED _arg_TIMEOUT)
    set(_arg_TIMEOUT 300)
  endif()
  if(NOT DEFINED SIGNLION_TEST_PYTHON)
    set(SIGNLION_TEST_PYTHON ${SIGNLION_PYTHON})
  endif()
  if(NOT DEFINED SIGNLION_TEST_ROOT)
    set(SIGNLION_TEST_ROOT python)
  endif()
  if(NOT DEFINED _arg_LABELS)
    set(_arg_LABELS python)
  endif()
  if(NOT SIGNLION_TEST_ROOT STREQUAL "python")
    list(APPEND _arg_LABELS ${SIGNLION_TEST_ROOT})
  endif()
  set(_names ${SIGNLION_TEST_ROOT}.${prefix}.)
  if(prefix STREQUAL "")
    set(_names ${SIGNLION_TEST_ROOT}.)
  endif()
  if(NOT DEFINED _arg_ENVIRONMENT)
    set(_arg_ENVIRONMENT "SIGNLION_LIBRARY=$<TARGET_FILE:nccl-sign>;SIGNLION_SOCKET_IFNAME=lo")
  endif()
  foreach(_case ${_arg_UNPARSED_ARGUMENTS})
    add_test(NAME ${_names}${_case}
             COMMAND ${SIGNLION_TEST_PYTHON} ${PROJECT_SOURCE_DIR}/python/tests/${script} ${test_class}.test_${_case})
    set_tests_properties(${_names}${_case} PROPERTIES LABELS "${_arg_LABELS}" TIMEOUT ${_arg_TIMEOUT}
                         SKIP_RETURN_CODE 77 ENVIRONMENT "${_arg_ENVIRONMENT}")
  endforeach()
endfunction()

# signlion_python_tests(PREFIX SCRIPT CLASS CASES... [TIMEOUT s] [ENVIRONMENT list] [LABELS list]):
# one CTest test per unittest case, python.PREFIX.CASE (python.CASE for an empty PREFIX) running
# python/tests/SCRIPT CLASS.test_CASE under SIGNLION_PYTHON (exit 77 skips). ENVIRONMENT defaults
# to the built library on loopback, TIMEOUT to 300 s, LABELS to python. Included from
# tests/CMakeLists.txt inside its Python block.
function(signlion_python_tests prefix script test_class)
  cmake_parse_arguments(PARSE_ARGV 3 _arg "" "TIMEOUT" "ENVIRONMENT;LABELS")
  if(NOT DEFINED _arg_TIMEOUT)
    set(_arg_TIMEOUT 300)
  endif()
  if(NOT DEFINED _arg_LABELS)
    set(_arg_LABELS python)
  endif()
  set(_names python.${prefix}.)
  if(prefix STREQUAL "")
    set(_names python.)
  endif()
  if(NOT DEFINED _arg_ENVIRONMENT)
    set(_arg_ENVIRONMENT "SIGNLION_LIBRARY=$<TARGET_FILE:nccl-sign>;SIGNLION_SOCKET_IFNAME=lo")
  endif()
  foreach(_case ${_arg_UNPARSED_ARGUMENTS})
    add_test(NAME ${_names}${_case}
             COMMAND ${SIGNLION_PYTHON} ${PROJECT_SOURCE_DIR}/python/tests/${script} ${test_class}.test_${_case})
    set_tests_properties(${_names}${_case} PROPERTIES LABELS "${_arg_LABELS}" TIMEOUT ${_arg_TIMEOUT}
                         SKIP_RETURN_CODE 77 ENVIRONMENT "${_arg_ENVIRONMENT}")
  endforeach()
endfunction()

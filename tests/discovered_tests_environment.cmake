# signlion_discovered_tests_environment(<test list variable> <VAR=value>...)
#
# Gives the tests gtest_discover_tests(... TEST_LIST <test list variable>)
# found the environment VAR=value... . gtest_discover_tests (CMake 3.25)
# writes each element of a PROPERTIES list as an argument of its own, so its
# own ENVIRONMENT keeps only the first variable of several: this sets it after
# discovery instead, from a file CTest includes after the discovered tests'
# (one per directory, appended to TEST_INCLUDE_FILES after all of theirs).
function(signlion_discovered_tests_environment test_list)
  list(JOIN ARGN ";" env)  # written inside quotes: one argument of set_tests_properties
  get_property(lines DIRECTORY PROPERTY SIGNLION_DISCOVERED_ENV_LINES)
  string(APPEND lines "foreach(_t IN LISTS ${test_list})\n"
                      "  set_tests_properties(\"\${_t}\" PROPERTIES ENVIRONMENT \"${env}\")\n"
                      "endforeach()\n")
  set_property(DIRECTORY PROPERTY SIGNLION_DISCOVERED_ENV_LINES "${lines}")
  get_property(registered DIRECTORY PROPERTY SIGNLION_DISCOVERED_ENV_REGISTERED)
  if(NOT registered)
    set_property(DIRECTORY PROPERTY SIGNLION_DISCOVERED_ENV_REGISTERED TRUE)
    # Written, and included after every discovered test list of the
    # directory, once the directory is processed.
    cmake_language(DEFER CALL signlion_write_discovered_tests_environment)
  endif()
endfunction()

# (A deferred call's arguments are expanded when it runs: it takes none.)
function(signlion_write_discovered_tests_environment)
  get_property(lines DIRECTORY PROPERTY SIGNLION_DISCOVERED_ENV_LINES)
  set(script "${CMAKE_CURRENT_BINARY_DIR}/discovered_tests_environment.cmake")
  file(GENERATE OUTPUT "${script}" CONTENT "${lines}")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${script}")
endfunction()

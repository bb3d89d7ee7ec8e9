# DistributedLion's overlap with backward and the sign all-reduce for any PyTorch code
# (python/tests/test_torch_lion_overlap.py, python/tests/test_torch_collectives.py): gloo
# process groups of 2 to 4 spawned ranks on CPU tensors. Included from tests/CMakeLists.txt
# inside its Python block (SIGNLION_PYTHON set, no sanitizer).
set(_signlion_py_env "SIGNLION_LIBRARY=$<TARGET_FILE:nccl-sign>;SIGNLION_SOCKET_IFNAME=lo")
foreach(_case matches_reference_world2 matches_reference_world3 options_on_vs_off_world2 accumulation_world2
              accumulation_world3 overlaps_backward_world2 failed_background_step_is_raised arguments_checked)
  add_test(NAME python.overlap.${_case}
           COMMAND ${SIGNLION_PYTHON} ${PROJECT_SOURCE_DIR}/python/tests/test_torch_lion_overlap.py
                   Overlap.test_${_case})
  set_tests_properties(python.overlap.${_case} PROPERTIES LABELS python TIMEOUT 300 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${_signlion_py_env}")
endforeach()

# The documents as a user meets them (label "unit", or "python" where PyTorch runs):
# every public Python name has a docstring, the README's quick starts are run as
# written (tests/docs/quickstart_test.py reads the blocks from README.md, and runs them
# with the machine's PATH), and the documents hold no notebook traces, dead links or
# README figures their linked sections lack (tests/docs/docs_check.py).
set(_docs ${CMAKE_CURRENT_LIST_DIR})
set(_quickstarts pytorch-cpu pytorch-cuda nccl perf)  # every block of README.md's "Quick start"
if(Python3_Interpreter_FOUND)
  add_test(NAME docs.quickstart.every_block_tested
           COMMAND ${Python3_EXECUTABLE} ${_docs}/quickstart_test.py ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}
                   check ${_quickstarts})
  set_tests_properties(docs.quickstart.every_block_tested PROPERTIES LABELS unit)
  # No time of day, commit hash or /tmp path; every link, anchor and named path resolves; every
  # figure of the README is in the section it links (tests/docs/docs_check.py).
  add_test(NAME docs.check COMMAND ${Python3_EXECUTABLE} ${_docs}/docs_check.py ${PROJECT_SOURCE_DIR})
  add_test(NAME docs.check_self_test COMMAND ${Python3_EXECUTABLE} ${_docs}/docs_check.py --self-test)
  set_tests_properties(docs.check docs.check_self_test PROPERTIES LABELS unit)
endif()
if(SIGNLION_SANITIZE OR NOT EXISTS ${SIGNLION_PYTHON})
  return()  # the runs below load the library into unsanitized programs, as a user does
endif()
add_test(NAME docs.python_api_docstrings
         COMMAND ${SIGNLION_PYTHON} ${_docs}/api_docstrings_test.py ${PROJECT_SOURCE_DIR})
set_tests_properties(docs.python_api_docstrings PROPERTIES LABELS python
                     ENVIRONMENT "SIGNLION_LIBRARY=$<TARGET_FILE:nccl-sign>")

# QUICKSTART_PYTHON becomes the blocks' PY (the Python with PyTorch they document), not python3.
set(_quickstart_env "QUICKSTART_PYTHON=${SIGNLION_PYTHON};SIGNLION_SOCKET_IFNAME=lo;NCCL_SOCKET_IFNAME=lo;GLOO_SOCKET_IFNAME=lo")
# PyTorch: a venv, `pip install .` of the scratch copy (a host-only wheel: about as long as
# python.wheel_install), two ranks of examples/train.py on CPU tensors for 10 steps: 240 s on the
# shared 2-core machine, of which about 75 s the training. The CUDA block runs where a GPU answers.
foreach(_qs pytorch-cpu pytorch-cuda)
  add_test(NAME docs.quickstart.${_qs}
           COMMAND ${SIGNLION_PYTHON} ${_docs}/quickstart_test.py ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR} run ${_qs})
  set_tests_properties(docs.quickstart.${_qs} PROPERTIES LABELS python TIMEOUT 1800 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${_quickstart_env}")
endforeach()
set_tests_properties(docs.quickstart.pytorch-cuda PROPERTIES LABELS "python;gpu")
# NCCL: cmake --install into the scratch HOME, examples/nccl_minimal built with find_package
# (always), run where a GPU answers.
if(SIGNLION_HAVE_NCCL)
  add_test(NAME docs.quickstart.nccl
           COMMAND ${SIGNLION_PYTHON} ${_docs}/quickstart_test.py ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR} run nccl)
  set_tests_properties(docs.quickstart.nccl PROPERTIES LABELS "unit;gpu" TIMEOUT 900 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${_quickstart_env}")
endif()
if(SIGNLION_BUILD_PERF)
  add_test(NAME docs.quickstart.perf
           COMMAND ${SIGNLION_PYTHON} ${_docs}/quickstart_test.py ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR} run perf)
  set_tests_properties(docs.quickstart.perf PROPERTIES LABELS unit TIMEOUT 600 ENVIRONMENT "${_quickstart_env}")
endif()

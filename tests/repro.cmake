# attnfuzz.repro's rebuilt physical inputs against hand-computed strides and values
# (tests/repro_layout_test.py). The project's Python (.venv/bin/python, else $ATTNFUZZ_PYTHON at configure time);
# skipped (77) by a Python without numpy.
if(EXISTS ${PROJECT_SOURCE_DIR}/.venv/bin/python)
  set(af_repro_python ${PROJECT_SOURCE_DIR}/.venv/bin/python)
elseif(DEFINED ENV{ATTNFUZZ_PYTHON})
  set(af_repro_python $ENV{ATTNFUZZ_PYTHON})
else()
  find_program(af_repro_python python3)
endif()
if(af_repro_python)
  add_test(NAME repro_layouts COMMAND ${af_repro_python} ${CMAKE_CURRENT_SOURCE_DIR}/repro_layout_test.py)
  set_tests_properties(repro_layouts PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77
                       ENVIRONMENT "PYTHONPATH=${PROJECT_SOURCE_DIR}/python")
endif()

# The real targets (python/attnfuzz/targets: torch, ort, tensorrt), each variant's run function
# called directly on a handful of cases against a float64 reference (tests/targets_selftest.py).
# They need the project's Python environment (.venv, scripts/setup.sh); without it they are not
# registered. A variant whose stack does not import skips (exit 77).
if(NOT DEFINED AF_VENV_PYTHON)   # tests/python.cmake may have set it (a cache variable)
  set(AF_VENV_PYTHON ${PROJECT_SOURCE_DIR}/.venv/bin/python)
endif()
if(NOT EXISTS ${AF_VENV_PYTHON})
  message(STATUS "targets tests skipped: ${AF_VENV_PYTHON} is missing (run scripts/setup.sh)")
else()
  set(af_targets_script ${PROJECT_SOURCE_DIR}/tests/targets_selftest.py)
  set(af_targets_env "PYTHONPATH=${PROJECT_SOURCE_DIR}/python;PYTHONDONTWRITEBYTECODE=1")
  foreach(spec
      "torch_eager:torch sdpa_math sdpa_flash explicit --protocol"
      "torch_compile:torch compile compile_sdpa --quick"
      "torch_flex:torch flex --quick"
      "ort:ort attention explicit explicit_noopt exported_sdpa --protocol"
      "unavailable:--unavailable")
    string(REPLACE ":" ";" parts "${spec}")
    list(GET parts 0 name)
    list(GET parts 1 args)
    separate_arguments(args)
    add_test(NAME targets_${name} COMMAND ${AF_VENV_PYTHON} ${af_targets_script} ${args})
    set_tests_properties(targets_${name} PROPERTIES ENVIRONMENT "${af_targets_env}"
                         SKIP_RETURN_CODE 77 LABELS "python;targets" TIMEOUT 900)
  endforeach()
endif()

# The Python package (python/attnfuzz): unit tests under python/tests, run with the
# project's virtual environment (.venv/, made by scripts/setup.sh). Without it the tests are
# skipped with a message; -DAF_VENV_PYTHON=/path/to/python picks another interpreter.
set(AF_VENV_PYTHON ${PROJECT_SOURCE_DIR}/.venv/bin/python CACHE FILEPATH "Python with numpy and ml_dtypes for the Python tests")
set(AF_PYTHON_TESTS protocol case layouts rng reference reference_backward worker targets repro serving jax_serving torch_batch known bisect triage request export capture guard gpu_targets)

if(NOT EXISTS ${AF_VENV_PYTHON})
  message(STATUS "Python tests skipped: ${AF_VENV_PYTHON} not found (run scripts/setup.sh, or pass -DAF_VENV_PYTHON=...)")
else()
  execute_process(COMMAND ${AF_VENV_PYTHON} -c "import numpy, ml_dtypes"
                  RESULT_VARIABLE af_venv_deps OUTPUT_QUIET ERROR_QUIET)
  if(NOT af_venv_deps EQUAL 0)
    message(STATUS "Python tests skipped: ${AF_VENV_PYTHON} cannot import numpy and ml_dtypes")
  else()
    foreach(t ${AF_PYTHON_TESTS})
      add_test(NAME python_${t} COMMAND ${AF_VENV_PYTHON} ${PROJECT_SOURCE_DIR}/python/tests/test_${t}.py)
      set_tests_properties(python_${t} PROPERTIES LABELS "python" TIMEOUT 600 SKIP_RETURN_CODE 77
        ENVIRONMENT "PYTHONPATH=${PROJECT_SOURCE_DIR}/python;PYTHONDONTWRITEBYTECODE=1")
    endforeach()
  endif()
endif()

# A campaign of 3000 cases (three seeds, every layout met; about 12 s) against the numpy_ref
# worker must be clean: the Python reference and the C oracle agree, zero-weight keys
# included (skipped, exit 77, while attnfuzz has no worker: backend).
if(TARGET attnfuzz AND EXISTS ${AF_VENV_PYTHON} AND af_venv_deps EQUAL 0)
  add_test(NAME python_numpy_ref_campaign
           COMMAND ${AF_VENV_PYTHON} ${PROJECT_SOURCE_DIR}/python/tests/campaign_numpy_ref.py $<TARGET_FILE:attnfuzz> 3000 3)
  set_tests_properties(python_numpy_ref_campaign PROPERTIES LABELS "python" TIMEOUT 300 SKIP_RETURN_CODE 77
    ENVIRONMENT "PYTHONPATH=${PROJECT_SOURCE_DIR}/python;PYTHONDONTWRITEBYTECODE=1;${AF_BLAS_ENV}")
endif()

# Softmax statistics through the protocol (python/tests/campaign_lse.py; about 10 s): 300 cases
# each of a worker returning them in natural log and in declared base 2 must be clean; the
# same worker's undeclared base 2 must be found as lse_diverge, its bundle's ref_lse as plain numpy has it.
if(TARGET attnfuzz AND EXISTS ${AF_VENV_PYTHON} AND af_venv_deps EQUAL 0)
  add_test(NAME python_lse_campaign
           COMMAND ${AF_VENV_PYTHON} ${PROJECT_SOURCE_DIR}/python/tests/campaign_lse.py $<TARGET_FILE:attnfuzz> 300)
  set_tests_properties(python_lse_campaign PROPERTIES LABELS "python" TIMEOUT 600 SKIP_RETURN_CODE 77
    ENVIRONMENT "PYTHONPATH=${PROJECT_SOURCE_DIR}/python;PYTHONDONTWRITEBYTECODE=1;${AF_BLAS_ENV}")
endif()

# 1500 serving cases (fuzz --serving 1) against a worker that checks every serving tensor
# attnfuzz sends with attnfuzz.serving's mirror of it and answers with the Python reference:
# clean, every combination of forms met (python/tests/campaign_serving.py; about 15 s).
if(TARGET attnfuzz AND EXISTS ${AF_VENV_PYTHON} AND af_venv_deps EQUAL 0)
  add_test(NAME python_serving_campaign
           COMMAND ${AF_VENV_PYTHON} ${PROJECT_SOURCE_DIR}/python/tests/campaign_serving.py $<TARGET_FILE:attnfuzz> 1500)
  set_tests_properties(python_serving_campaign PROPERTIES LABELS "python" TIMEOUT 600 SKIP_RETURN_CODE 77
    ENVIRONMENT "PYTHONPATH=${PROJECT_SOURCE_DIR}/python;PYTHONDONTWRITEBYTECODE=1;${AF_BLAS_ENV}")
endif()

# The pytest plugin (python/tests/test_pytest_plugin.py: each regress verdict as its item's
# outcome on a corpus made from one seeded bug, the in-process fixture on an honest and a
# buggy function; 2 to 3 minutes). The plugin over the repository's corpus/findings as CI
# runs it is regress_findings (tests/targets.cmake). Both need pytest
# (python/requirements-test.txt).
if(TARGET attnfuzz AND EXISTS ${AF_VENV_PYTHON} AND af_venv_deps EQUAL 0)
  add_test(NAME python_pytest_plugin COMMAND ${AF_VENV_PYTHON} ${PROJECT_SOURCE_DIR}/python/tests/test_pytest_plugin.py)
  set_tests_properties(python_pytest_plugin PROPERTIES LABELS "python" TIMEOUT 600 SKIP_RETURN_CODE 77
    ENVIRONMENT "PYTHONPATH=${PROJECT_SOURCE_DIR}/python;PYTHONDONTWRITEBYTECODE=1;ATTNFUZZ_EXE=$<TARGET_FILE:attnfuzz>;${AF_BLAS_ENV}")
endif()

# The README's worker example, as printed there (tests/readme_worker_test.sh).
if(TARGET attnfuzz AND EXISTS ${AF_VENV_PYTHON})
  add_test(NAME readme_worker COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/readme_worker_test.sh $<TARGET_FILE:attnfuzz>
           ${AF_VENV_PYTHON} ${CMAKE_CURRENT_BINARY_DIR}/readme-worker)
  set_tests_properties(readme_worker PROPERTIES LABELS "python" TIMEOUT 600 SKIP_RETURN_CODE 77
    ENVIRONMENT "PYTHONPATH=${PROJECT_SOURCE_DIR}/python;PYTHONDONTWRITEBYTECODE=1;${AF_BLAS_ENV}")
endif()

# The C float64 reference backward against python/attnfuzz/reference.py backward() on 600
# generated backward cases (tests/ref_grad_cross.py; ref_grad_dump writes the C side).
add_executable(ref_grad_dump ${CMAKE_CURRENT_SOURCE_DIR}/grad/ref_grad_dump.c)
target_include_directories(ref_grad_dump PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/src/core)
target_compile_options(ref_grad_dump PRIVATE ${AF_WARNINGS} -Wno-missing-prototypes)
target_link_libraries(ref_grad_dump PRIVATE attnfuzz_lib)
if(EXISTS ${AF_VENV_PYTHON} AND af_venv_deps EQUAL 0)
  add_test(NAME python_ref_grad_cross
           COMMAND ${AF_VENV_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/ref_grad_cross.py $<TARGET_FILE:ref_grad_dump> 600 1)
  set_tests_properties(python_ref_grad_cross PROPERTIES LABELS "python" TIMEOUT 600
    ENVIRONMENT "PYTHONPATH=${PROJECT_SOURCE_DIR}/python;PYTHONDONTWRITEBYTECODE=1;${AF_BLAS_ENV}")
endif()

# FP8 cases through the worker protocol (python/tests/campaign_fp8.py): 600 cases of fuzz --fp8 1
# against a worker that checks the float8 views and descales the kit hands it and answers with
# the Python reference: clean, both formats met; the same worker forgetting the descales found.
if(TARGET attnfuzz AND EXISTS ${AF_VENV_PYTHON} AND af_venv_deps EQUAL 0)
  add_test(NAME python_fp8_campaign
           COMMAND ${AF_VENV_PYTHON} ${PROJECT_SOURCE_DIR}/python/tests/campaign_fp8.py $<TARGET_FILE:attnfuzz> 600)
  set_tests_properties(python_fp8_campaign PROPERTIES LABELS "python" TIMEOUT 600 SKIP_RETURN_CODE 77
    ENVIRONMENT "PYTHONPATH=${PROJECT_SOURCE_DIR}/python;PYTHONDONTWRITEBYTECODE=1;${AF_BLAS_ENV}")
endif()

# FP8 SDPA's roundings (python/tests/campaign_fp8_probs.py; about 5 s): 2000 FP8 cases each
# against cuDNN's sdpa_fp8 emulated in numpy (P in the FP8 format before P @ V; O too, as on
# Hopper, and not) must be clean with the roundings declared (conventions fp8_probs, fp8_out),
# both formats emulated; the same worker undeclared must be found.
if(TARGET attnfuzz AND EXISTS ${AF_VENV_PYTHON} AND af_venv_deps EQUAL 0)
  add_test(NAME python_fp8_probs_campaign
           COMMAND ${AF_VENV_PYTHON} ${PROJECT_SOURCE_DIR}/python/tests/campaign_fp8_probs.py $<TARGET_FILE:attnfuzz> 2000)
  set_tests_properties(python_fp8_probs_campaign PROPERTIES LABELS "python" TIMEOUT 600 SKIP_RETURN_CODE 77
    ENVIRONMENT "PYTHONPATH=${PROJECT_SOURCE_DIR}/python;PYTHONDONTWRITEBYTECODE=1;${AF_BLAS_ENV}")
endif()

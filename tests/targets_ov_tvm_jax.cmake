# The openvino, tvm and jax targets (python/attnfuzz/targets): each variant's run function on
# a handful of cases against the float64 reference, its declared conventions, and one round
# trip as a worker process (tests/targets_ov_tvm_jax.py). They need the project's Python
# environment (.venv, scripts/setup.sh); without it they are not registered. A stack that
# does not import skips (exit 77).
set(af_ovtj_python ${PROJECT_SOURCE_DIR}/.venv/bin/python)
if(NOT EXISTS ${af_ovtj_python})
  message(STATUS "openvino/tvm/jax target tests skipped: ${af_ovtj_python} is missing (run scripts/setup.sh)")
elseif(NOT EXISTS ${PROJECT_SOURCE_DIR}/python/attnfuzz/worker.py)
  message(STATUS "openvino/tvm/jax target tests skipped: the Python kit (python/attnfuzz) is missing")
else()
  foreach(spec
      "openvino:openvino/sdpa openvino/explicit openvino/sdpa_nosnippets"
      "tvm:tvm/relax_attention tvm/torch_sdpa tvm/torch_sdpa_decomp tvm/explicit"
      "jax:jax/xla jax/explicit jax/cudnn")
    string(REPLACE ":" ";" parts "${spec}")
    list(GET parts 0 name)
    list(GET parts 1 args)
    separate_arguments(args)
    add_test(NAME targets_${name} COMMAND ${af_ovtj_python} ${PROJECT_SOURCE_DIR}/tests/targets_ov_tvm_jax.py ${args})
    set_tests_properties(targets_${name} PROPERTIES
      ENVIRONMENT "PYTHONPATH=${PROJECT_SOURCE_DIR}/python;PYTHONDONTWRITEBYTECODE=1"
      SKIP_RETURN_CODE 77 LABELS "python;targets" TIMEOUT 600)
  endforeach()
endif()

# CI smoke of the real targets through attnfuzz itself (tests/targets_smoke.py): for each
# stack, a campaign of a few seconds over its CPU variants; it fails on a bundle of kind
# error or crash (the worker broke on a case it declares) and prints, without failing, the
# stack's own findings (diverge, nan_mismatch, ...). A stack that does not import, or has no
# variant available here, skips (exit 77). 8 s of campaign a stack (plus imports and compiles: 15-45 s), about 2 minutes in all.
# findings_repros runs every corpus/findings/<stack>/*.py repro and fails when one no
# longer shows its bug ("FIXED": an upgrade fixed it) or breaks (tests/findings_repros.py);
# regress_findings replays the bundles of those bugs.
set(af_smoke_python ${PROJECT_SOURCE_DIR}/.venv/bin/python)
if(NOT EXISTS ${af_smoke_python})
  message(STATUS "target smoke campaigns and findings_repros skipped: ${af_smoke_python} is missing (run scripts/setup.sh)")
elseif(TARGET attnfuzz)
  foreach(spec
      "torch:torch explicit sdpa_math sdpa_flash"
      "ort:ort attention explicit exported_sdpa"
      "openvino:openvino sdpa explicit sdpa_nosnippets"
      "tvm:tvm torch_sdpa relax_attention"
      "jax:jax xla explicit"
      "tensorrt:tensorrt exported_sdpa explicit")
    string(REPLACE ":" ";" parts "${spec}")
    list(GET parts 0 name)
    list(GET parts 1 args)
    separate_arguments(args)
    add_test(NAME targets_smoke_${name}
             COMMAND ${af_smoke_python} ${PROJECT_SOURCE_DIR}/tests/targets_smoke.py $<TARGET_FILE:attnfuzz> ${args} --time 8)
    set_tests_properties(targets_smoke_${name} PROPERTIES
      ENVIRONMENT "PYTHONPATH=${PROJECT_SOURCE_DIR}/python;PYTHONDONTWRITEBYTECODE=1"
      SKIP_RETURN_CODE 77 LABELS "python;targets;smoke" TIMEOUT 300)
  endforeach()
  add_test(NAME findings_repros COMMAND ${af_smoke_python} ${PROJECT_SOURCE_DIR}/tests/findings_repros.py --jobs 2)
  set_tests_properties(findings_repros PROPERTIES ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1"
    SKIP_RETURN_CODE 77 LABELS "python;findings" TIMEOUT 1200)
  # regress_findings replays the campaigns' bundles of real stack bugs (every
  # corpus/findings/<stack>/bundles but the GPU ones, <stack>-cuda/bundles: scripts/gpu_campaign.sh
  # replays those) and fails when one is fixed or changed kind (--strict)
  file(GLOB af_findings_bundles LIST_DIRECTORIES true ${PROJECT_SOURCE_DIR}/corpus/findings/*/bundles)
  list(FILTER af_findings_bundles EXCLUDE REGEX "-cuda/bundles$")
  add_test(NAME regress_findings COMMAND attnfuzz regress --strict ${af_findings_bundles})
  set_tests_properties(regress_findings PROPERTIES ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1;${AF_BLAS_ENV}"
    LABELS "python;findings" TIMEOUT 600)
endif()

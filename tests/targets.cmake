# The real targets (python/attnfuzz/targets), every variant the stack modules declare, read
# at configure time from `python -m attnfuzz.targets --names` (declarations only: no stack
# is imported; a new module is picked up by the next configure, CONFIGURE_DEPENDS below):
#   targets_<stack>_<variant>  the variant's self-test (tests/targets_selftest.py): its run
#                              function against the float64 reference on a set of cases, its
#                              repro snippet, conventions, cache and a worker round trip
#   targets_unavailable        every stack's unknown-variant and cannot-run-here paths
#   targets_smoke_<stack>      a few seconds of campaign through attnfuzz over the stack's
#                              smoke variants; fails on a bundle of kind error or crash
#   findings_repros            every corpus/findings/<stack>/*.py still shows its bug
#   regress_findings           attnfuzz regress --strict over the campaigns' bundles (skips where
#                              this host lacks what a bug needs)
# GPU variants are not registered (no GPU here: scripts/gpu_campaign.sh runs them), but for the
# jax pallas ones in interpret mode (targets_jax_pallas_*_interpret, below). They need
# the project's Python environment (.venv, scripts/setup.sh); without it they are not
# registered. A variant whose stack does not import skips (exit 77).
if(NOT DEFINED AF_VENV_PYTHON)   # tests/python.cmake may have set it (a cache variable)
  set(AF_VENV_PYTHON ${PROJECT_SOURCE_DIR}/.venv/bin/python)
endif()
file(GLOB af_target_modules CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/python/attnfuzz/targets/*.py)
set(af_targets_env "PYTHONPATH=${PROJECT_SOURCE_DIR}/python;PYTHONDONTWRITEBYTECODE=1")
if(NOT EXISTS ${AF_VENV_PYTHON})
  message(STATUS "targets tests skipped: ${AF_VENV_PYTHON} is missing (run scripts/setup.sh)")
  return()
endif()

function(af_target_names out)   # af_target_names(VAR WHERE...): STACK/VARIANT list
  execute_process(COMMAND ${CMAKE_COMMAND} -E env PYTHONPATH=${PROJECT_SOURCE_DIR}/python
                          ${AF_VENV_PYTHON} -m attnfuzz.targets --names ${ARGN}
                  OUTPUT_VARIABLE names RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "python -m attnfuzz.targets --names ${ARGN} failed: ${err}")
  endif()
  string(REPLACE "\n" ";" names "${names}")
  set(${out} "${names}" PARENT_SCOPE)
endfunction()

af_target_names(af_cpu_variants cpu)
foreach(t ${af_cpu_variants})
  string(REPLACE "/" "_" name "${t}")
  add_test(NAME targets_${name} COMMAND ${AF_VENV_PYTHON} ${PROJECT_SOURCE_DIR}/tests/targets_selftest.py ${t})
  set_tests_properties(targets_${name} PROPERTIES ENVIRONMENT "${af_targets_env}"
                       SKIP_RETURN_CODE 77 LABELS "python;targets" TIMEOUT 900)
endforeach()
# The jax pallas variants (GPU kernels) in pallas's interpret mode on the CPU
# (ATTNFUZZ_PALLAS_INTERPRET=1, attnfuzz.targets._jax_serving): the same self-test, the
# conversion code and the kernels' logic run as jax programs; the Triton lowering is the GPU
# run's (scripts/gpu_campaign.sh). A jax without the module skips (exit 77).
af_target_names(af_jax_gpu_variants gpu jax)
foreach(t ${af_jax_gpu_variants})
  if(t MATCHES "^jax/pallas_")
    string(REPLACE "/" "_" name "${t}")
    add_test(NAME targets_${name}_interpret
             COMMAND ${AF_VENV_PYTHON} ${PROJECT_SOURCE_DIR}/tests/targets_selftest.py ${t})
    set_tests_properties(targets_${name}_interpret PROPERTIES ENVIRONMENT "${af_targets_env};ATTNFUZZ_PALLAS_INTERPRET=1"
                         SKIP_RETURN_CODE 77 LABELS "python;targets" TIMEOUT 900)
  endif()
endforeach()
# The CPU self-tests again with every stack forced onto its AVX2 path (scripts/lower_isa.sh:
# ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA, OV_CPU_MAX_ISA, XLA's max ISA, and the CPU flags
# known entries' `needs` read), so that a machine with AVX-512 checks what an AVX2 user gets
# (docs/targets.md, "Lower ISA paths"): targets_isa_avx2_<stack>_<variant>, label "isa".
# Registered by default only where the CPU has AVX-512 (elsewhere they would repeat the
# plain self-tests); -DAF_ISA_TESTS=ON/OFF says otherwise, AF_ISA_TARGETS which variants.
set(af_isa_default OFF)
if(EXISTS /proc/cpuinfo)
  file(STRINGS /proc/cpuinfo af_isa_flags REGEX "^flags" LIMIT_COUNT 1)
  if(" ${af_isa_flags} " MATCHES "[ \t]avx512f[ \t]")
    set(af_isa_default ON)
  endif()
endif()
option(AF_ISA_TESTS "self-tests of a few CPU variants under scripts/lower_isa.sh avx2" ${af_isa_default})
set(AF_ISA_TARGETS "torch/sdpa_flash;torch/flex;openvino/sdpa;openvino/explicit;jax/xla" CACHE STRING
    "the variants targets_isa_avx2_* self-test on the AVX2 path")
if(AF_ISA_TESTS)
  foreach(t ${AF_ISA_TARGETS})
    if(NOT t IN_LIST af_cpu_variants)
      continue()
    endif()
    string(REPLACE "/" "_" name "${t}")
    add_test(NAME targets_isa_avx2_${name}
             COMMAND ${PROJECT_SOURCE_DIR}/scripts/lower_isa.sh avx2 ${AF_VENV_PYTHON}
                     ${PROJECT_SOURCE_DIR}/tests/targets_selftest.py ${t})
    set_tests_properties(targets_isa_avx2_${name} PROPERTIES ENVIRONMENT "${af_targets_env}"
                         SKIP_RETURN_CODE 77 LABELS "python;targets;isa" TIMEOUT 900)
  endforeach()
endif()
add_test(NAME targets_unavailable COMMAND ${AF_VENV_PYTHON} ${PROJECT_SOURCE_DIR}/tests/targets_selftest.py --unavailable)
set_tests_properties(targets_unavailable PROPERTIES ENVIRONMENT "${af_targets_env}"
                     SKIP_RETURN_CODE 77 LABELS "python;targets" TIMEOUT 900)

if(NOT TARGET attnfuzz)
  return()
endif()
# 8 s of campaign a stack (plus imports and compiles: 15-45 s)
af_target_names(af_smoke_variants cpu smoke campaign)
set(af_smoke_stacks "")
foreach(t ${af_smoke_variants})
  string(REGEX REPLACE "/.*" "" stack "${t}")
  list(APPEND af_smoke_stacks ${stack})
  string(REGEX REPLACE ".*/" "" variant "${t}")
  list(APPEND af_smoke_${stack} ${variant})
endforeach()
list(REMOVE_DUPLICATES af_smoke_stacks)
foreach(stack ${af_smoke_stacks})
  add_test(NAME targets_smoke_${stack}
           COMMAND ${AF_VENV_PYTHON} ${PROJECT_SOURCE_DIR}/tests/targets_smoke.py $<TARGET_FILE:attnfuzz> ${stack}
                   ${af_smoke_${stack}} --time 8)
  set_tests_properties(targets_smoke_${stack} PROPERTIES ENVIRONMENT "${af_targets_env}"
                       SKIP_RETURN_CODE 77 LABELS "python;targets;smoke" TIMEOUT 300)
endforeach()

# findings_repros runs every corpus/findings/<stack>/*.py repro and fails when one no longer
# shows its bug ("FIXED": an upgrade fixed it) or breaks (tests/findings_repros.py)
add_test(NAME findings_repros COMMAND ${AF_VENV_PYTHON} ${PROJECT_SOURCE_DIR}/tests/findings_repros.py --jobs 2)
set_tests_properties(findings_repros PROPERTIES ENVIRONMENT "${af_targets_env}"
  SKIP_RETURN_CODE 77 LABELS "python;findings" TIMEOUT 1200)
# regress_findings replays the campaigns' bundles of real stack bugs (every
# corpus/findings/<stack>/bundles but the GPU ones, <stack>-cuda/bundles: scripts/gpu_campaign.sh
# replays those) through the pytest plugin, as a user's CI would (`pytest --attnfuzz-regress`:
# each known bug an expected failure), and fails when one is fixed or changed kind (strict), or
# when a bundle's failing check is not its own known bug (tests/known_entries_test.py --replay; the GPU
# bundles are matched without running in the known_entries test). A bug that shows only on
# a CPU with a feature has an entry that says so ("needs": {"cpu": ["amx_bf16"]},
# docs/known.md): where this CPU lacks it, regress says "skip (needs amx_bf16)", no failure
file(GLOB af_findings_bundles LIST_DIRECTORIES true ${PROJECT_SOURCE_DIR}/corpus/findings/*/bundles)
list(FILTER af_findings_bundles EXCLUDE REGEX "-cuda/bundles$")
add_test(NAME regress_findings COMMAND ${AF_VENV_PYTHON} ${PROJECT_SOURCE_DIR}/tests/known_entries_test.py --replay
         $<TARGET_FILE:attnfuzz> ${PROJECT_SOURCE_DIR} ${af_findings_bundles})
set_tests_properties(regress_findings PROPERTIES ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1;${AF_BLAS_ENV}"
  LABELS "python;findings" TIMEOUT 1200)

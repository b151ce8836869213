# Known bugs as data (docs/known.md): docs/findings.md and the known.json entries agree, and
# every committed bundle (the GPU ones too) is matched by its entry without running a
# backend (tests/known_entries_test.py, standard library only). test_known (cmocka) covers
# the module itself; regress_findings (targets.cmake) replays the CPU bundles.
find_program(AF_PYTHON3_KNOWN python3)
if(AF_PYTHON3_KNOWN)
  add_test(NAME known_entries COMMAND ${AF_PYTHON3_KNOWN} ${CMAKE_CURRENT_SOURCE_DIR}/known_entries_test.py
           $<TARGET_FILE:attnfuzz> ${PROJECT_SOURCE_DIR})
  set_tests_properties(known_entries PROPERTIES TIMEOUT 120 LABELS "findings" ENVIRONMENT "${AF_BLAS_ENV}")
endif()

# The regression corpus: one minimized bundle per seeded bug, each must still be found.
add_test(NAME regress_corpus COMMAND ${PROJECT_BINARY_DIR}/attnfuzz regress --strict ${PROJECT_SOURCE_DIR}/corpus/regress)
set_tests_properties(regress_corpus PROPERTIES LABELS "sanitize" TIMEOUT 120)
# A bundle named itself (a directory holding case.json) is a corpus of one; a directory with
# no bundle in it says so on stderr.
add_test(NAME regress_one_bundle COMMAND ${PROJECT_BINARY_DIR}/attnfuzz regress --strict
         ${PROJECT_SOURCE_DIR}/corpus/regress/diverge-5868ff954b2aa973/)
set_tests_properties(regress_one_bundle PROPERTIES TIMEOUT 60
                     PASS_REGULAR_EXPRESSION "1 bundles: 1 checks same, 0 fixed, 0 regressed")
file(MAKE_DIRECTORY ${PROJECT_BINARY_DIR}/regress-empty)
add_test(NAME regress_empty_dir COMMAND ${PROJECT_BINARY_DIR}/attnfuzz regress ${PROJECT_BINARY_DIR}/regress-empty)
set_tests_properties(regress_empty_dir PROPERTIES TIMEOUT 60 PASS_REGULAR_EXPRESSION "regress-empty: no bundle in it")

# regress --junit / --waive: the XML's testsuite/testcase/failure/error/skipped counts
# agree, one testcase per bundle, the failure text is the verdict line (stdlib Python).
find_program(AF_PYTHON3 python3)
if(AF_PYTHON3)
  add_test(NAME regress_junit COMMAND ${AF_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/regress_junit_test.py
           ${PROJECT_BINARY_DIR}/attnfuzz ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}/regress-junit)
  set_tests_properties(regress_junit PROPERTIES TIMEOUT 120 ENVIRONMENT "${AF_BLAS_ENV}")
endif()

# One worker per backend for the whole corpus (tests/regress_pool_test.py): bundles of two C
# workers interleaved start each once (the workers log their starts), a worker that crashes on
# one bundle is restarted and the later ones replay, --jobs 2 prints and writes the JUnit of
# --jobs 1, three workers slow to start start side by side before the first bundle runs.
if(AF_PYTHON3) # c_worker: tests/worker.cmake (included after this file)
  add_test(NAME regress_pool COMMAND ${AF_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/regress_pool_test.py
           $<TARGET_FILE:attnfuzz> $<TARGET_FILE:c_worker> ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}/regress-pool)
  set_tests_properties(regress_pool PROPERTIES LABELS "worker" TIMEOUT 300 ENVIRONMENT "${AF_BLAS_ENV}")
endif()

# The regression corpus: one minimized bundle per seeded bug, each must still be found.
add_test(NAME regress_corpus COMMAND ${PROJECT_BINARY_DIR}/attnfuzz regress --strict ${PROJECT_SOURCE_DIR}/corpus/regress)
set_tests_properties(regress_corpus PROPERTIES LABELS "sanitize" TIMEOUT 120)

# regress --junit / --waive: the XML's testsuite/testcase/failure/error/skipped counts
# agree, one testcase per bundle, the failure text is the verdict line (stdlib Python).
find_program(AF_PYTHON3 python3)
if(AF_PYTHON3)
  add_test(NAME regress_junit COMMAND ${AF_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/regress_junit_test.py
           ${PROJECT_BINARY_DIR}/attnfuzz ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}/regress-junit)
  set_tests_properties(regress_junit PROPERTIES TIMEOUT 120 ENVIRONMENT "${AF_BLAS_ENV}")
endif()

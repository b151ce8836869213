# The regression corpus: one minimized bundle per seeded bug, each must still be found.
add_test(NAME regress_corpus COMMAND ${PROJECT_BINARY_DIR}/attnfuzz regress --strict ${PROJECT_SOURCE_DIR}/corpus/regress)
set_tests_properties(regress_corpus PROPERTIES LABELS "sanitize" TIMEOUT 120)

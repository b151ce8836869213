# The command line, end to end (tests/cli_test.sh).
add_test(NAME cli COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli_test.sh ${PROJECT_BINARY_DIR})
set_tests_properties(cli PROPERTIES TIMEOUT 300 LABELS "sanitize")

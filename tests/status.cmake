# The campaign's progress line: one updating line on a terminal (script(1)), log lines
# otherwise (tests/status_line_test.sh).
add_test(NAME campaign_status_line COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/status_line_test.sh
         ${PROJECT_BINARY_DIR}/attnfuzz ${PROJECT_BINARY_DIR}/status-line)
set_tests_properties(campaign_status_line PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77 ENVIRONMENT "${AF_BLAS_ENV}")

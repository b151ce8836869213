# attnfuzz report end to end: two mutants' findings and a numpy worker's, the HTML in
# headless Chromium (screenshot in build/test-artefacts/report/), the worker finding's
# standalone repro.py. Skipped (77) without chromium or a Python with numpy.
add_test(NAME report_browser COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/report_test.sh ${PROJECT_BINARY_DIR}/attnfuzz
         ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}/test-artefacts/report)
set_tests_properties(report_browser PROPERTIES TIMEOUT 240 SKIP_RETURN_CODE 77 ENVIRONMENT "${AF_BLAS_ENV}")

# attnfuzz report for a bug tracker: known real bugs once with their issues linked and repros
# copied, upstream pages through attnfuzz triage (tests/report_tracker_test.sh). Skipped (77)
# without a Python with numpy.
add_test(NAME report_tracker COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/report_tracker_test.sh ${PROJECT_BINARY_DIR}/attnfuzz
         ${PROJECT_SOURCE_DIR})
set_tests_properties(report_tracker PROPERTIES TIMEOUT 240 SKIP_RETURN_CODE 77 ENVIRONMENT "${AF_BLAS_ENV}")

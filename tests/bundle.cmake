# The Python bundle loader (scripts/attnfuzz_bundle.py), tested under Debian's python3 with
# python3-numpy and python3-zstandard. test_bundle writes bundles under
# ${PROJECT_BINARY_DIR}/bundle-from-c; the Python test checks them (AF_BUNDLE_FROM_C), so it
# requires test_bundle as a fixture and ctest runs that first, even for -R python_bundle.
set(AF_PYTHON3 /usr/bin/python3)
set(AF_BUNDLE_FROM_C ${PROJECT_BINARY_DIR}/bundle-from-c)

execute_process(COMMAND ${AF_PYTHON3} -c "import numpy, zstandard"
                RESULT_VARIABLE af_python_bundle_deps OUTPUT_QUIET ERROR_QUIET)
if(NOT af_python_bundle_deps EQUAL 0)
  message(STATUS "python_bundle_loader test skipped: ${AF_PYTHON3} lacks numpy or zstandard")
else()
  add_test(NAME python_bundle_loader COMMAND ${AF_PYTHON3} ${PROJECT_SOURCE_DIR}/scripts/test_attnfuzz_bundle.py)
  set_tests_properties(python_bundle_loader PROPERTIES ENVIRONMENT "AF_BUNDLE_FROM_C=${AF_BUNDLE_FROM_C}")
  if(TEST test_bundle)
    set_tests_properties(test_bundle PROPERTIES FIXTURES_SETUP af_bundle_from_c)
    set_tests_properties(python_bundle_loader PROPERTIES FIXTURES_REQUIRED af_bundle_from_c)
  endif()
endif()

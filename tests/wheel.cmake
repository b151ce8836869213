# The wheel end to end (tests/wheel_test.sh): built from a clean clone of this checkout's
# HEAD with scripts/build_wheel.sh, installed into a fresh virtual environment, run from
# outside the checkout. It takes minutes and PyPI (or pip's cache), so it has a label of its
# own, "wheel", which scripts/test.sh runs apart from the rest (see there); skipped (77)
# without git or PyPI.
find_program(AF_GIT git)
if(AF_GIT AND TARGET attnfuzz)
  add_test(NAME wheel COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/wheel_test.sh ${PROJECT_SOURCE_DIR}
           ${CMAKE_CURRENT_BINARY_DIR}/wheel)
  set_tests_properties(wheel PROPERTIES LABELS "wheel" TIMEOUT 1200 SKIP_RETURN_CODE 77)
endif()

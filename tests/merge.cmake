# attnfuzz merge against itself and a running shard (tests/merge_race_test.py): merges at
# once from different shards keep the smallest case of every name; three periodic merges
# and a reader beside a shard writing: no bundle lost, none read half-written. Standard
# library Python only.
find_program(AF_PYTHON3 python3)
if(AF_PYTHON3)
  add_test(NAME merge_race COMMAND ${AF_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/merge_race_test.py
           ${PROJECT_BINARY_DIR}/attnfuzz ${PROJECT_BINARY_DIR}/merge-race)
  set_tests_properties(merge_race PROPERTIES TIMEOUT 300 ENVIRONMENT "${AF_BLAS_ENV}")
endif()

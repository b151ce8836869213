# python -m attnfuzz.summary, the closing table of scripts/campaign.sh, over a crashes
# directory of two small mutant campaigns (one with a known bug of a known.json of its own)
# and a stats file never written: every row as the stats hold it, every bundle's path
# (tests/summary_test.py, standard library only).
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND AND TARGET attnfuzz)
  add_test(NAME campaign_summary COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/summary_test.py
           $<TARGET_FILE:attnfuzz> ${PROJECT_SOURCE_DIR})
  set_tests_properties(campaign_summary PROPERTIES LABELS "smoke" TIMEOUT 300 ENVIRONMENT "${AF_BLAS_ENV}")
endif()

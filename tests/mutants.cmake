# The backward and serving mutants through whole campaigns (scripts/bench_time_to_bug.py, standard
# library only): each found on three seeds, every time within a second of the campaign's
# clock (docs/mutants.md); run alone (RUN_SERIAL): the clock is the machine's.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND AND TARGET attnfuzz)
  foreach(group backward serving)
    add_test(NAME ttb_${group}_mutants
             COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/bench_time_to_bug.py --trials 3 --budget 10
                     --strategies generator --mutants ${group} --jobs 2 --attnfuzz $<TARGET_FILE:attnfuzz>
                     --require-within 1)
    set_tests_properties(ttb_${group}_mutants PROPERTIES LABELS "smoke" TIMEOUT 300 RUN_SERIAL TRUE
                         ENVIRONMENT "${AF_BLAS_ENV}")
  endforeach()
endif()

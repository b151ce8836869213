# The backward, serving, FP8 and LSE mutants through whole campaigns (scripts/bench_time_to_bug.py, standard
# library only): each found on three seeds, every time within 1000 executions of the campaign
# (--require-execs: each campaign runs with --runs 1000). For a seed the executions to the first
# finding follow the seeded case stream, not the clock, so the bound holds on any machine under any
# load; the most measured for seeds 1..3 is 301, for seeds 1..20 506 (alibi_off_by_one; docs/mutants.md). The
# seconds are the benchmark's to print, never a test's to bound; --budget 120 is only a hang guard.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND AND TARGET attnfuzz)
  foreach(group backward serving fp8 checks lse)
    add_test(NAME ttb_${group}_mutants
             COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/bench_time_to_bug.py --trials 3 --budget 120
                     --strategies generator --mutants ${group} --jobs 2 --attnfuzz $<TARGET_FILE:attnfuzz>
                     --require-execs 1000)
    set_tests_properties(ttb_${group}_mutants PROPERTIES LABELS "smoke" TIMEOUT 600
                         ENVIRONMENT "${AF_BLAS_ENV}")
  endforeach()
endif()

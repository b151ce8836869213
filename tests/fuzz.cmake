# Fuzz harness tests (fuzz/, scripts/fuzz_*.sh):
#
#   fuzz_mutator            cmocka: the structure-aware mutators and AFL++ trimming
#   fuzz_seed_corpus        every seed of corpus/seeds/ runs through the replay harness
#                           without a crash, and no built-in check (explicit,fused and
#                           the relations) fires on any of them: exit 0
#   fuzz_seed_corpus_mutant the same seeds against a seeded-bug backend: the harness
#                           must report it (exit 1) and write bundles
#   fuzz_libfuzzer_smoke_build / fuzz_libfuzzer_smoke
#                           the libFuzzer harness built with clang under address and
#                           undefined sanitizers in its own directory (so a gcc build
#                           runs it too), then fuzzed for 1000 inputs; skipped (77) when
#                           clang has no libFuzzer runtime
#
# Each test command finishes well under a minute on two cores.

set(AF_FUZZ_ENV_CLEAN "ATTNFUZZ_BACKENDS=;ATTNFUZZ_PAIRS=;ATTNFUZZ_RELATIONS=;ATTNFUZZ_ABORT=;ATTNFUZZ_MAX_FLOPS=;ATTNFUZZ_BUDGET_MIB=;ATTNFUZZ_SAMPLE_RELATIONS=;ATTNFUZZ_WAIVE=;ATTNFUZZ_PRINT_FEATURES=;ATTNFUZZ_QUIET=1")

add_executable(test_fuzz_mutator ${PROJECT_SOURCE_DIR}/fuzz/test_fuzz_mutator.c
               ${PROJECT_SOURCE_DIR}/fuzz/case_mutator.c ${PROJECT_SOURCE_DIR}/fuzz/afl_mutator.c)
target_include_directories(test_fuzz_mutator PRIVATE ${PROJECT_SOURCE_DIR}/fuzz)
target_compile_options(test_fuzz_mutator PRIVATE ${AF_WARNINGS} -Wno-missing-prototypes)
target_link_libraries(test_fuzz_mutator PRIVATE attnfuzz_lib PkgConfig::CMOCKA)
add_test(NAME fuzz_mutator COMMAND test_fuzz_mutator)
set_tests_properties(fuzz_mutator PROPERTIES ENVIRONMENT "${AF_FUZZ_ENV_CLEAN}" TIMEOUT 60)

if(TARGET attnfuzz_replay)
  add_test(NAME fuzz_seed_corpus COMMAND attnfuzz_replay ${PROJECT_SOURCE_DIR}/corpus/seeds)
  set_tests_properties(fuzz_seed_corpus PROPERTIES TIMEOUT 60 ENVIRONMENT
    "${AF_BLAS_ENV};${AF_FUZZ_ENV_CLEAN};ATTNFUZZ_CRASHES=${PROJECT_BINARY_DIR}/fuzz-seed-corpus-bundles")

  # exit status 1 (findings) is the pass; 0 (missed) or 2 (error) or a crash fail
  set(af_mutant_bundles ${PROJECT_BINARY_DIR}/fuzz-seed-mutant-bundles)
  add_test(NAME fuzz_seed_corpus_mutant COMMAND sh -c
    "rm -rf \"$2\"; \"$0\" \"$1\"; rc=$?; n=$(ls \"$2\" 2>/dev/null | wc -l); echo \"exit $rc, $n bundles\"; test $rc -eq 1 && test $n -gt 0"
    $<TARGET_FILE:attnfuzz_replay> ${PROJECT_SOURCE_DIR}/corpus/seeds ${af_mutant_bundles})
  set_tests_properties(fuzz_seed_corpus_mutant PROPERTIES TIMEOUT 60 ENVIRONMENT
    "${AF_BLAS_ENV};${AF_FUZZ_ENV_CLEAN};ATTNFUZZ_BACKENDS=mutant:bshd_as_bhsd;ATTNFUZZ_CRASHES=${af_mutant_bundles}")
endif()

# libFuzzer under sanitizers: only when clang can link a libFuzzer target at all.
find_program(AF_CLANG clang)
set(af_libfuzzer_ok FALSE)
if(AF_CLANG)
  set(af_probe ${CMAKE_CURRENT_BINARY_DIR}/libfuzzer_probe.c)
  file(WRITE ${af_probe} "int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n")
  execute_process(COMMAND ${AF_CLANG} -fsanitize=fuzzer,address,undefined ${af_probe}
                          -o ${CMAKE_CURRENT_BINARY_DIR}/libfuzzer_probe
                  RESULT_VARIABLE af_probe_rc OUTPUT_QUIET ERROR_QUIET)
  if(af_probe_rc EQUAL 0)
    set(af_libfuzzer_ok TRUE)
  endif()
endif()
if(af_libfuzzer_ok)
  set(af_smoke_dir ${PROJECT_BINARY_DIR}/fuzz-smoke)
  add_test(NAME fuzz_libfuzzer_smoke_build
           COMMAND ${PROJECT_SOURCE_DIR}/scripts/fuzz_smoke_libfuzzer.sh build ${af_smoke_dir})
  add_test(NAME fuzz_libfuzzer_smoke
           COMMAND ${PROJECT_SOURCE_DIR}/scripts/fuzz_smoke_libfuzzer.sh run ${af_smoke_dir})
  set_tests_properties(fuzz_libfuzzer_smoke_build PROPERTIES FIXTURES_SETUP af_fuzz_smoke TIMEOUT 300
                       SKIP_RETURN_CODE 77 ENVIRONMENT "${AF_FUZZ_ENV_CLEAN}")
  set_tests_properties(fuzz_libfuzzer_smoke PROPERTIES FIXTURES_REQUIRED af_fuzz_smoke TIMEOUT 120
                       SKIP_RETURN_CODE 77 ENVIRONMENT "${AF_BLAS_ENV};${AF_FUZZ_ENV_CLEAN};AF_SMOKE_RUNS=1000")
else()
  message(STATUS "fuzz_libfuzzer_smoke skipped: clang cannot link -fsanitize=fuzzer,address,undefined")
endif()

# One bug, one signature across engines (tests/same_signature_test.sh): the campaign, the
# libFuzzer harness (the sanitizer build of fuzz.cmake's fixture) and the replay harness
# store mutant:causal_top_left's diverge under one bundle name.
if(af_libfuzzer_ok AND TARGET attnfuzz_replay)
  add_test(NAME fuzz_same_signature COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/same_signature_test.sh
           ${PROJECT_BINARY_DIR}/attnfuzz ${af_smoke_dir}/fuzz/attnfuzz_harness $<TARGET_FILE:attnfuzz_replay>
           ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}/same-signature)
  set_tests_properties(fuzz_same_signature PROPERTIES FIXTURES_REQUIRED af_fuzz_smoke TIMEOUT 300
                       ENVIRONMENT "${AF_BLAS_ENV}")
endif()

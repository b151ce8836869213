# Out-of-process targets (docs/worker-protocol.md): a C worker, faulty workers, and tests
# of the worker backend against them.
# c_worker reads its JSON with the library's dependency-free reader, compiled in, not linked.
add_executable(c_worker ${CMAKE_CURRENT_SOURCE_DIR}/worker/c_worker.c ${PROJECT_SOURCE_DIR}/src/core/json_scan.c)
target_include_directories(c_worker PRIVATE ${PROJECT_SOURCE_DIR}/src/core)
target_compile_options(c_worker PRIVATE ${AF_WARNINGS} -Wno-missing-prototypes -Wno-double-promotion)
target_link_libraries(c_worker PRIVATE m)

# A worker that answers with hand-written broken frames (tests/test_worker_proto.c).
add_executable(frame_worker ${CMAKE_CURRENT_SOURCE_DIR}/worker/frame_worker.c)
target_compile_options(frame_worker PRIVATE ${AF_WARNINGS} -Wno-missing-prototypes)
target_link_libraries(frame_worker PRIVATE PkgConfig::CJSON)
add_dependencies(test_worker_proto frame_worker c_worker)
add_dependencies(test_backend_pool c_worker) # it pools a C worker
set_tests_properties(test_worker_proto PROPERTIES LABELS "unit;sanitize;worker")

# Campaigns through the worker backend (tests/worker_campaign_test.py): faulty workers give
# their documented kinds with the stderr tail in each bundle and the campaign goes on; a
# worker dying at start is exit 2; wrong workers are found and replay; c_worker is clean.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND AND TARGET attnfuzz)
  set(AF_WORKER_SCENARIOS crash exit hang hang_eager garbage shape error flaky die wrong_c clean clean_masked_rows_nan bind
      restart_cost batch batch_crash batch_device batch_hang min_only_failing min_jobs_shared min_budget min_dir new_amid_known known_crash pipeline
      compiled_seeds compiled_errors)
  if(EXISTS "${AF_VENV_PYTHON}" AND af_venv_deps EQUAL 0) # tests/python.cmake: it imports numpy
    list(APPEND AF_WORKER_SCENARIOS wrong_numpy)
  endif()
  foreach(s ${AF_WORKER_SCENARIOS})
    add_test(NAME worker_campaign_${s}
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/worker_campaign_test.py ${s}
                     $<TARGET_FILE:attnfuzz> $<TARGET_FILE:c_worker> ${AF_VENV_PYTHON})
    set_tests_properties(worker_campaign_${s} PROPERTIES LABELS "worker" TIMEOUT 300
      ENVIRONMENT "${AF_BLAS_ENV}" SKIP_RETURN_CODE 77)
  endforeach()
  # it counts the CPUs other campaigns hold: not beside other tests
  set_tests_properties(worker_campaign_bind PROPERTIES RUN_SERIAL TRUE)
endif()

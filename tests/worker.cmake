# Out-of-process targets (docs/worker-protocol.md): a C worker, faulty workers, and tests
# of the worker backend against them.
add_executable(c_worker ${CMAKE_CURRENT_SOURCE_DIR}/worker/c_worker.c)
target_compile_options(c_worker PRIVATE ${AF_WARNINGS} -Wno-missing-prototypes -Wno-double-promotion)
target_link_libraries(c_worker PRIVATE PkgConfig::CJSON m)

# A worker that answers with hand-written broken frames (tests/test_worker_proto.c).
add_executable(frame_worker ${CMAKE_CURRENT_SOURCE_DIR}/worker/frame_worker.c)
target_compile_options(frame_worker PRIVATE ${AF_WARNINGS} -Wno-missing-prototypes)
target_link_libraries(frame_worker PRIVATE PkgConfig::CJSON)
add_dependencies(test_worker_proto frame_worker c_worker)
set_tests_properties(test_worker_proto PROPERTIES LABELS "unit;sanitize;worker")

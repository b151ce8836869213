# Out-of-process targets (docs/worker-protocol.md): a C worker, faulty workers, and tests
# of the worker backend against them.
add_executable(c_worker ${CMAKE_CURRENT_SOURCE_DIR}/worker/c_worker.c)
target_compile_options(c_worker PRIVATE ${AF_WARNINGS} -Wno-missing-prototypes -Wno-double-promotion)
target_link_libraries(c_worker PRIVATE PkgConfig::CJSON m)

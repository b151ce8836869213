# The plugin ABI: a small implementation built as a shared library (tests/plugin/) and
# loaded by test_plugin as "plugin:PATH.so".
add_library(af_test_plugin MODULE ${CMAKE_CURRENT_SOURCE_DIR}/plugin/naive_plugin.c)
target_include_directories(af_test_plugin PRIVATE ${PROJECT_SOURCE_DIR}/include)
target_compile_options(af_test_plugin PRIVATE ${AF_WARNINGS})
target_link_libraries(af_test_plugin PRIVATE m)
set_target_properties(af_test_plugin PROPERTIES PREFIX "")
add_dependencies(test_plugin af_test_plugin)
set_property(TEST test_plugin APPEND PROPERTY ENVIRONMENT "AF_TEST_PLUGIN=$<TARGET_FILE:af_test_plugin>")

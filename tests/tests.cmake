tessera_add_test_area(llm tessera_llm nlohmann_json::nlohmann_json)
# the CLI tests run the tessera program
add_dependencies(test_llm tessera)
tessera_add_test_area(backends/cpu tessera_cpu_static)

# --- backend layer (issue 3): registry, loader, graph allocator, CPU backend
# through the C tables. Fake plugins (tests/backend/plugins) are built as
# MODULE libraries into build/tests/fake_plugins/<case>/.
if(TARGET tessera_backend)
  include(${CMAKE_CURRENT_SOURCE_DIR}/backend/backend_tests.cmake)
endif()

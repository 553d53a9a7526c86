# The `tessera` program: tools/main.cpp plus one file per subcommand.
# A subcommand file tools/cmd_<name>.cpp is compiled in when present and its
# libraries exist; TESSERA_HAVE_CMD_<NAME> tells main.cpp to register it.
add_executable(tessera ${CMAKE_CURRENT_LIST_DIR}/main.cpp)
# bench/machine_peaks.hpp: `tessera bench --limits` measures the machine's limits as the microbenchmarks do
target_include_directories(tessera PRIVATE ${PROJECT_SOURCE_DIR}/src ${CMAKE_CURRENT_LIST_DIR} ${PROJECT_SOURCE_DIR}/bench)
target_compile_options(tessera PRIVATE ${TESSERA_WARNINGS})
target_link_libraries(tessera PRIVATE tessera_core CLI11::CLI11 fmt::fmt nlohmann_json::nlohmann_json)
# generated/build_info.hpp: the git commit built (`tessera --version`, bench's
# build_commit), refreshed by every build (tools/build_info.cmake).
set(TESSERA_BUILD_INFO ${CMAKE_CURRENT_BINARY_DIR}/generated/build_info.hpp)
add_custom_target(tessera_build_info
  COMMAND ${CMAKE_COMMAND} -DSRC=${PROJECT_SOURCE_DIR} -DOUT=${TESSERA_BUILD_INFO} -DVERSION=${PROJECT_VERSION}
          -P ${CMAKE_CURRENT_LIST_DIR}/build_info.cmake
  BYPRODUCTS ${TESSERA_BUILD_INFO}
  COMMENT "build_info.hpp: the git commit")
add_dependencies(tessera tessera_build_info)
target_include_directories(tessera PRIVATE ${CMAKE_CURRENT_BINARY_DIR}/generated)
if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/cmd_gguf.cpp)
  target_sources(tessera PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cmd_gguf.cpp)
  target_link_libraries(tessera PRIVATE tessera_gguf)
  target_compile_definitions(tessera PRIVATE TESSERA_HAVE_CMD_GGUF)
endif()
if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/cmd_devices.cpp AND TARGET tessera_backend)
  target_sources(tessera PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cmd_devices.cpp)
  target_link_libraries(tessera PRIVATE tessera_backend)
  target_compile_definitions(tessera PRIVATE TESSERA_HAVE_CMD_DEVICES)
endif()
if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/cmd_run.cpp AND TARGET tessera_llm)
  target_sources(tessera PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cmd_run.cpp)
  target_link_libraries(tessera PRIVATE tessera_llm)
  target_compile_definitions(tessera PRIVATE TESSERA_HAVE_CMD_RUN)
endif()
if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/cmd_perplexity.cpp AND TARGET tessera_llm)
  target_sources(tessera PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cmd_perplexity.cpp)
  target_link_libraries(tessera PRIVATE tessera_llm)
  target_compile_definitions(tessera PRIVATE TESSERA_HAVE_CMD_PERPLEXITY)
endif()
if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/cmd_quantize.cpp AND TARGET tessera_llm)
  target_sources(tessera PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cmd_quantize.cpp)
  target_link_libraries(tessera PRIVATE tessera_llm)
  target_compile_definitions(tessera PRIVATE TESSERA_HAVE_CMD_QUANTIZE)
endif()
if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/cmd_bench.cpp AND TARGET tessera_llm)
  target_sources(tessera PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cmd_bench.cpp ${CMAKE_CURRENT_LIST_DIR}/bench_report.cpp)
  target_link_libraries(tessera PRIVATE tessera_llm)
  target_compile_definitions(tessera PRIVATE TESSERA_HAVE_CMD_BENCH)
endif()
# `tessera gguf synth` (a subcommand of cmd_gguf.cpp, generator in tessera_llm)
if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/cmd_synth.cpp AND EXISTS ${CMAKE_CURRENT_LIST_DIR}/cmd_gguf.cpp AND TARGET tessera_llm)
  target_sources(tessera PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cmd_synth.cpp)
  target_link_libraries(tessera PRIVATE tessera_llm)
  target_compile_definitions(tessera PRIVATE TESSERA_HAVE_GGUF_SYNTH)
endif()
# tessera-probe: opens and scores backend plugins in a fresh process for
# the loader (src/backend/score_probe.hpp); found beside the program that
# loads them (or in the plugin install directory, or $TESSERA_PROBE_HELPER).
if(TARGET tessera_backend)
  add_executable(tessera-probe ${CMAKE_CURRENT_LIST_DIR}/probe_main.cpp)
  target_include_directories(tessera-probe PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(tessera-probe PRIVATE ${TESSERA_WARNINGS})
  target_link_libraries(tessera-probe PRIVATE tessera_backend)
  add_dependencies(tessera tessera-probe)
  install(TARGETS tessera-probe RUNTIME DESTINATION ${TESSERA_PLUGIN_INSTALL_DIR})
endif()
install(TARGETS tessera RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# Backend layer: the C ABI's C++ handles, the registry and plugin loader,
# the graph allocator. Target tessera_backend.
# (TESSERA_PLUGIN_INSTALL_FULL_DIR and TESSERA_PLUGIN_DIR_FROM_BINDIR: the
# top-level CMakeLists.txt.)

file(GLOB TESSERA_BACKEND_SRC CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.cpp)
add_library(tessera_backend STATIC ${TESSERA_BACKEND_SRC})
target_include_directories(tessera_backend PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
                                           PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_options(tessera_backend PRIVATE ${TESSERA_WARNINGS})
target_compile_definitions(tessera_backend PRIVATE
                           TESSERA_PLUGIN_INSTALL_DIR="${TESSERA_PLUGIN_INSTALL_FULL_DIR}"
                           TESSERA_PLUGIN_DIR_FROM_BINDIR="${TESSERA_PLUGIN_DIR_FROM_BINDIR}")
target_link_libraries(tessera_backend PUBLIC tessera_core $<BUILD_INTERFACE:fmt::fmt> Threads::Threads ${CMAKE_DL_LIBS})

# With TESSERA_CPU_STATIC the CPU backend is compiled in (cpu.cmake) and
# registered by registry::global(); otherwise tessera loads its plugins.
if(TESSERA_CPU_STATIC AND TARGET tessera_cpu_backend)
  target_link_libraries(tessera_backend PUBLIC tessera_cpu_backend)
  target_compile_definitions(tessera_backend PRIVATE TESSERA_CPU_STATIC)
endif()

# Everything that links the backend layer (the tessera program, tests) finds
# the CPU plugins built next to it.
if(TARGET tessera_cpu_plugins)
  add_dependencies(tessera_backend tessera_cpu_plugins)
endif()

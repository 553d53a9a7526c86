# CPU backend. tessera_cpu_static: the kernels + thread pool + graph compute,
# compiled for the build machine's baseline (tests and benchmarks link it).
#
# TESSERA_CPU_SRC is the compute part (kernels, thread pool, graph walk):
# the same list can be compiled again per instruction-set variant
# (e.g. with -march flags) to build the variant plugins. It lists the
# top-level files explicitly so that backend files added to this folder
# (the C-ABI adapter, features, variants) are not pulled in by accident;
# kernels are every ops/*.cpp.
file(GLOB TESSERA_CPU_OPS_SRC CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/ops/*.cpp)
set(TESSERA_CPU_SRC
    ${CMAKE_CURRENT_LIST_DIR}/compute.cpp
    ${CMAKE_CURRENT_LIST_DIR}/thread_pool.cpp
    ${CMAKE_CURRENT_LIST_DIR}/graph_compute.cpp
    ${TESSERA_CPU_OPS_SRC})
add_library(tessera_cpu_static STATIC ${TESSERA_CPU_SRC})
target_include_directories(tessera_cpu_static PUBLIC ${PROJECT_SOURCE_DIR}/include PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_options(tessera_cpu_static PRIVATE ${TESSERA_WARNINGS})
target_link_libraries(tessera_cpu_static PUBLIC tessera_core Threads::Threads)

# ---------------------------------------------------------------------------
# The CPU backend behind the backend layer's C tables (issue 3): the adapter
# (cpu_buffer/cpu_device/cpu_backend.cpp), feature detection and variant
# scores (features.cpp, score.cpp), and the plugins.
#
#   tessera_cpu_backend   static library: adapter + the kernels above, for
#                         compiled-in use (tests; TESSERA_CPU_STATIC builds)
#   tessera_cpu_<variant> MODULE libtessera-cpu-<variant>.so next to the
#                         tessera executable: the kernels of TESSERA_CPU_SRC
#                         compiled with the variant's -m flags; adapter,
#                         detection, entry points, thread pool and graph walk
#                         compiled once for the baseline ISA
option(TESSERA_CPU_STATIC
       "Compile one CPU backend for this machine (-march=native) into tessera instead of building the loadable variant plugins"
       OFF)
set(_cpu_dir ${CMAKE_CURRENT_LIST_DIR})
# -fno-gnu-unique (GCC only; clang emits no STB_GNU_UNIQUE symbols anyway).
set(_cpu_no_gnu_unique $<$<CXX_COMPILER_ID:GNU>:-fno-gnu-unique>)

# Baseline objects shared by the static backend and every variant (compiled once).
add_library(tessera_cpu_adapter OBJECT
            ${_cpu_dir}/cpu_buffer.cpp ${_cpu_dir}/cpu_device.cpp ${_cpu_dir}/cpu_backend.cpp
            ${_cpu_dir}/cpu_repack_buffer.cpp ${_cpu_dir}/features.cpp ${_cpu_dir}/score.cpp)
target_include_directories(tessera_cpu_adapter PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
target_compile_options(tessera_cpu_adapter PRIVATE ${TESSERA_WARNINGS} ${_cpu_no_gnu_unique})
set_target_properties(tessera_cpu_adapter PROPERTIES CXX_VISIBILITY_PRESET hidden
                      VISIBILITY_INLINES_HIDDEN ON)

add_library(tessera_cpu_backend STATIC $<TARGET_OBJECTS:tessera_cpu_adapter> ${_cpu_dir}/variant_isa.cpp)
target_include_directories(tessera_cpu_backend PUBLIC ${PROJECT_SOURCE_DIR}/include
                                               PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_options(tessera_cpu_backend PRIVATE ${TESSERA_WARNINGS})
target_link_libraries(tessera_cpu_backend PUBLIC tessera_cpu_static)
if(TESSERA_CPU_STATIC)
  target_compile_options(tessera_cpu_static PRIVATE -march=native)
  target_compile_options(tessera_cpu_backend PRIVATE -march=native)
  target_compile_definitions(tessera_cpu_backend PRIVATE TESSERA_CPU_VARIANT="native")
endif()

# Variants: name and the -m flags its kernels are compiled with. The
# features each needs at run time are listed in score.cpp (keep in step).
set(_cpu_flags_x64 "")
set(_cpu_flags_sse42 -msse4.2 -mpopcnt)
set(_cpu_flags_sandybridge ${_cpu_flags_sse42} -mavx)
set(_cpu_flags_haswell ${_cpu_flags_sandybridge} -mavx2 -mfma -mf16c -mbmi2)
set(_cpu_flags_alderlake ${_cpu_flags_haswell} -mavxvnni)
set(_cpu_flags_skylakex ${_cpu_flags_haswell} -mavx512f -mavx512bw -mavx512dq -mavx512vl)
set(_cpu_flags_icelake ${_cpu_flags_skylakex} -mavx512vnni -mavx512vbmi)
set(_cpu_flags_zen4 ${_cpu_flags_icelake} -mavx512bf16)
set(_cpu_flags_sapphirerapids ${_cpu_flags_zen4} -mamx-tile -mamx-int8 -mamx-bf16)
set(TESSERA_CPU_VARIANTS x64 sse42 sandybridge haswell alderlake skylakex icelake zen4 sapphirerapids
    CACHE STRING "CPU plugin variants to build (x86-64)")

# The thread pool and the graph walk have no instruction-set-specific code
# (they include no SIMD header): compiled once for every plugin instead of
# once per variant. The kernels (the rest of TESSERA_CPU_SRC) are per variant.
set(_cpu_isa_free_src ${_cpu_dir}/thread_pool.cpp ${_cpu_dir}/graph_compute.cpp)
set(_cpu_variant_src ${TESSERA_CPU_SRC})
list(REMOVE_ITEM _cpu_variant_src ${_cpu_isa_free_src})
add_library(tessera_cpu_plugin_common OBJECT ${_cpu_isa_free_src})
target_include_directories(tessera_cpu_plugin_common PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
target_compile_options(tessera_cpu_plugin_common PRIVATE ${TESSERA_WARNINGS} ${_cpu_no_gnu_unique})
set_target_properties(tessera_cpu_plugin_common PROPERTIES CXX_VISIBILITY_PRESET hidden
                      VISIBILITY_INLINES_HIDDEN ON EXCLUDE_FROM_ALL ON)

# tessera_cpu_plugin(<target> <file stem> <variant name> <flags...>): one
# plugin next to the tessera executable.
function(tessera_cpu_plugin target stem variant)
  # The entry points run before the variant is known to fit: baseline.
  add_library(${target}_entry OBJECT ${_cpu_dir}/plugin_entry.cpp)
  target_include_directories(${target}_entry PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
  target_compile_definitions(${target}_entry PRIVATE TESSERA_CPU_VARIANT="${variant}")
  if(variant STREQUAL "generic")
    target_compile_definitions(${target}_entry PRIVATE TESSERA_CPU_BASE)
  endif()
  target_compile_options(${target}_entry PRIVATE ${TESSERA_WARNINGS})

  add_library(${target} MODULE ${_cpu_variant_src} ${_cpu_dir}/variant_isa.cpp
              $<TARGET_OBJECTS:${target}_entry> $<TARGET_OBJECTS:tessera_cpu_adapter>
              $<TARGET_OBJECTS:tessera_cpu_plugin_common>)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
  target_compile_definitions(${target} PRIVATE TESSERA_CPU_VARIANT="${variant}")
  # -fno-gnu-unique: no STB_GNU_UNIQUE symbols, so a variant that loses
  # the scoring can really be unloaded again.
  target_compile_options(${target} PRIVATE ${TESSERA_WARNINGS} ${ARGN} ${_cpu_no_gnu_unique})
  # Static libraries' symbols stay private to the plugin; a symbol missing
  # from the plugin fails the link instead of the load.
  target_link_options(${target} PRIVATE -Wl,--exclude-libs,ALL -Wl,-z,defs)
  target_link_libraries(${target} PRIVATE tessera_core Threads::Threads)
  set_target_properties(${target} PROPERTIES
                        OUTPUT_NAME ${stem}
                        LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}
                        CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
endfunction()

set(TESSERA_CPU_PLUGINS "")
if(NOT TESSERA_CPU_STATIC AND CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  foreach(_v ${TESSERA_CPU_VARIANTS})
    if(NOT DEFINED _cpu_flags_${_v})
      message(FATAL_ERROR "TESSERA_CPU_VARIANTS: unknown CPU variant '${_v}'")
    endif()
    tessera_cpu_plugin(tessera_cpu_${_v} tessera-cpu-${_v} ${_v} ${_cpu_flags_${_v}})
    list(APPEND TESSERA_CPU_PLUGINS tessera_cpu_${_v})
  endforeach()
elseif(NOT TESSERA_CPU_STATIC)
  # Other architectures: one base library for the compiler's default target.
  tessera_cpu_plugin(tessera_cpu_generic tessera-cpu generic)
  list(APPEND TESSERA_CPU_PLUGINS tessera_cpu_generic)
endif()
if(TESSERA_CPU_PLUGINS)
  install(TARGETS ${TESSERA_CPU_PLUGINS} LIBRARY DESTINATION ${TESSERA_PLUGIN_INSTALL_DIR})
endif()
add_custom_target(tessera_cpu_plugins)
if(TESSERA_CPU_PLUGINS)
  add_dependencies(tessera_cpu_plugins ${TESSERA_CPU_PLUGINS})
endif()

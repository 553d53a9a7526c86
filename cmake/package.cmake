# `cmake --install`: the public headers (include/tessera/: the C plugin ABI
# and the C++ API), the static libraries and a CMake package, so that a
# program embeds tessera with
#
#   find_package(tessera 0.1 REQUIRED)   # CMAKE_PREFIX_PATH = the install prefix
#   target_link_libraries(app PRIVATE tessera::llm)
#
# tessera::core (tensors, graphs), tessera::gguf (reader, writer),
# tessera::backend (registry, plugin loader, devices) and tessera::llm
# (models, tokenizers, sessions). The CPU backend stays a set of plugins
# (TESSERA_PLUGIN_INSTALL_DIR), found by the embedding program as the
# registry finds them (README "Installing"). The programs and plugins have
# their own install rules (tools.cmake, cpu.cmake).
include(CMakePackageConfigHelpers)

# (Not backend/cpu.hpp: the compiled-in CPU backend it declares is not
# installed; installed programs load the CPU plugins.)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/tessera DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        PATTERN cpu.hpp EXCLUDE)

# A build with the CPU backend compiled in (TESSERA_CPU_STATIC) links its
# objects into tessera_backend's users: no package for it.
if(TESSERA_CPU_STATIC OR NOT TARGET tessera_llm OR NOT TARGET tessera_backend)
  return()
endif()

set(_tessera_libs tessera_core tessera_gguf tessera_backend tessera_llm)
foreach(_t ${_tessera_libs})
  string(REPLACE "tessera_" "" _name ${_t})
  set_target_properties(${_t} PROPERTIES EXPORT_NAME ${_name})
endforeach()
install(TARGETS ${_tessera_libs} EXPORT tesseraTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})

set(_tessera_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/tessera)
install(EXPORT tesseraTargets NAMESPACE tessera:: DESTINATION ${_tessera_cmake_dir})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/tesseraConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/tesseraConfig.cmake INSTALL_DESTINATION ${_tessera_cmake_dir}
                              PATH_VARS TESSERA_PLUGIN_INSTALL_DIR)
# 0.x: a package of another minor version may differ in its API.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/tesseraConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/tesseraConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/tesseraConfigVersion.cmake
        DESTINATION ${_tessera_cmake_dir})

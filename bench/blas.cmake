# bench_blas (bench_blas.cpp): tessera's F32 GEMM against OpenBLAS in the
# same run, built against the haswell and native copies of the kernels like
# bench_ops_<isa> (included from bench/CMakeLists.txt after those are made).
# OpenBLAS (Debian: libopenblas-dev) is optional: found through pkg-config
# (`openblas`) or FindBLAS with BLA_VENDOR OpenBLAS; without it the
# comparison is not built.
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(TESSERA_OPENBLAS QUIET IMPORTED_TARGET openblas)
endif()
set(_openblas_target "")
if(TESSERA_OPENBLAS_FOUND)
  set(_openblas_target PkgConfig::TESSERA_OPENBLAS)
else()
  set(BLA_VENDOR OpenBLAS)
  find_package(BLAS QUIET)
  find_path(TESSERA_OPENBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas openblas-pthread openblas-openmp
            openblas-serial)
  if(BLAS_FOUND AND TESSERA_OPENBLAS_INCLUDE_DIR)
    add_library(tessera_openblas INTERFACE)
    target_link_libraries(tessera_openblas INTERFACE ${BLAS_LIBRARIES})
    target_include_directories(tessera_openblas INTERFACE ${TESSERA_OPENBLAS_INCLUDE_DIR})
    set(_openblas_target tessera_openblas)
  endif()
endif()

if(NOT _openblas_target)
  message(STATUS "bench: OpenBLAS not found (Debian package libopenblas-dev): bench_blas (tessera vs OpenBLAS) not built")
elseif(NOT CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  message(STATUS "bench: bench_blas is x86-64 only: not built")
else()
  include(${PROJECT_SOURCE_DIR}/src/backends/cpu/ops/isa_libs.cmake)
  foreach(_isa haswell native)
    tessera_cpu_isa_lib(${_isa} ${TESSERA_ISA_FLAGS_${_isa}})
    add_executable(bench_blas_${_isa} ${CMAKE_CURRENT_LIST_DIR}/bench_blas.cpp)
    target_compile_options(bench_blas_${_isa} PRIVATE ${TESSERA_ISA_FLAGS_${_isa}})
    target_link_libraries(bench_blas_${_isa} PRIVATE tessera_cpu_static_${_isa} ${_openblas_target}
                          benchmark::benchmark Threads::Threads)
    target_include_directories(bench_blas_${_isa} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  endforeach()
endif()

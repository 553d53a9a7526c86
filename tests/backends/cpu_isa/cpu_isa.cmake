# The CPU op tests (tests/backends/cpu/*.cpp) once more against copies of
# the kernels (TESSERA_CPU_SRC) compiled for an instruction-set variant, so
# the vector paths are tested on every machine that can run them:
#   test_backends_cpu_haswell    AVX2/FMA/F16C/BMI2 (the haswell plugin's flags)
#   test_backends_cpu_alderlake  + AVX-VNNI (256-bit vpdpbusd)
#   test_backends_cpu_skylakex   AVX-512 F/BW/DQ/VL without VNNI
#   test_backends_cpu_zen4       AVX-512 F/BW/DQ/VL/VNNI/VBMI/BF16 (the zen4 plugin's)
#   test_backends_cpu_sapphirerapids  + AMX-TILE/INT8/BF16 (the repacked
#                                Q8_0/Q4_0/Q5_0/Q5_1, K-quant and F16 GEMMs on
#                                tiles): the MUL_MAT, repack, tuning and graph
#                                walk (shared scratch reuse) tests only, and
#                                built only where the build machine has AMX
# Each is a distinct set of kernel paths (simd.hpp).
# Each test program skips all its tests on a processor without those
# features (require_isa.cpp); on such a build machine they are also left out
# of ctest.
if(NOT CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  return()
endif()
include(CheckCXXSourceRuns)
include(${PROJECT_SOURCE_DIR}/src/backends/cpu/ops/isa_libs.cmake)
set(_isa_haswell_features "avx2,fma,f16c,bmi2")
set(_isa_alderlake_features "avx2,fma,f16c,bmi2,avxvnni")
set(_isa_skylakex_features "avx2,fma,f16c,bmi2,avx512f,avx512bw,avx512dq,avx512vl")
set(_isa_zen4_features "avx2,fma,f16c,bmi2,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx512vbmi,avx512bf16")
set(_isa_sapphirerapids_features "${_isa_zen4_features},amx-tile,amx-int8,amx-bf16")
file(GLOB _cpu_test_src CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/backends/cpu/*.cpp)
file(GLOB _cpu_mul_mat_test_src CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/backends/cpu/test_ops_mul_mat*.cpp
     ${CMAKE_CURRENT_SOURCE_DIR}/backends/cpu/test_repack_kernels.cpp ${CMAKE_CURRENT_SOURCE_DIR}/backends/cpu/test_tuning.cpp
     ${CMAKE_CURRENT_SOURCE_DIR}/backends/cpu/test_graph_compute.cpp)
foreach(_isa haswell alderlake skylakex zen4 sapphirerapids)
  # Register with ctest only when this build machine can run the kernels.
  string(REPLACE "," ";" _feats "${_isa_${_isa}_features}")
  set(_probe "int main() { __builtin_cpu_init(); return 0")
  foreach(_f ${_feats})
    string(APPEND _probe " || !__builtin_cpu_supports(\"${_f}\")")
  endforeach()
  string(APPEND _probe "; }")
  check_cxx_source_runs("${_probe}" TESSERA_BUILD_MACHINE_RUNS_${_isa})
  if(_isa STREQUAL "sapphirerapids" AND NOT TESSERA_BUILD_MACHINE_RUNS_${_isa})
    continue()
  endif()
  tessera_cpu_isa_lib(${_isa} ${TESSERA_ISA_FLAGS_${_isa}})

  set(_src ${_cpu_test_src})
  if(_isa STREQUAL "sapphirerapids")
    # AMX changes only the GEMMs: their tests, the other products' and the walk's (the prepared scratch)
    set(_src ${_cpu_mul_mat_test_src})
  endif()
  add_executable(test_backends_cpu_${_isa} ${_src} ${CMAKE_CURRENT_SOURCE_DIR}/backends/cpu_isa/require_isa.cpp)
  target_link_libraries(test_backends_cpu_${_isa} PRIVATE tessera_cpu_static_${_isa} GTest::gtest GTest::gtest_main
                        Threads::Threads)
  target_include_directories(test_backends_cpu_${_isa} PRIVATE ${PROJECT_SOURCE_DIR}/src ${CMAKE_CURRENT_SOURCE_DIR})
  target_compile_definitions(test_backends_cpu_${_isa} PRIVATE TESSERA_SHARED_DIR="${TESSERA_SHARED_DIR}"
                             TESSERA_BINARY_DIR="${PROJECT_BINARY_DIR}" TESSERA_REQUIRE_ISA="${_isa_${_isa}_features}")

  if(TESSERA_BUILD_MACHINE_RUNS_${_isa})
    gtest_discover_tests(test_backends_cpu_${_isa} DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 600
                         ENVIRONMENT "TESSERA_TEST_AREA=backends/cpu_${_isa}")
  endif()
endforeach()

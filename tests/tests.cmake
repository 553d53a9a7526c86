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

# --- tools (quantize, gguf synth, bench): CLI tests run the tessera program.
tessera_add_test_area(tools tessera_llm nlohmann_json::nlohmann_json)
if(TARGET test_tools AND TARGET tessera)
  add_dependencies(test_tools tessera)
  # test_install_cli: installs the build with cmake, compiles the installed headers
  # and builds a program against the installed package (tests/tools/consumer)
  # with this build's compilers, generator and sanitizer
  set(_san "")
  if(TESSERA_SANITIZE STREQUAL "address")
    set(_san "-fsanitize=address,undefined")
  elseif(TESSERA_SANITIZE STREQUAL "thread")
    set(_san "-fsanitize=thread")
  endif()
  target_compile_definitions(test_tools PRIVATE TESSERA_CMAKE_COMMAND="${CMAKE_COMMAND}"
                                                TESSERA_C_COMPILER="${CMAKE_C_COMPILER}"
                                                TESSERA_CXX_COMPILER="${CMAKE_CXX_COMPILER}"
                                                TESSERA_CMAKE_GENERATOR="${CMAKE_GENERATOR}"
                                                TESSERA_MAKE_PROGRAM="${CMAKE_MAKE_PROGRAM}"
                                                TESSERA_SANITIZE_FLAGS="${_san}"
                                                TESSERA_CONSUMER_DIR="${CMAKE_CURRENT_SOURCE_DIR}/tools/consumer")
  # test_compare_reference runs scripts/compare_reference.py with python3
  # (installed by scripts/install-deps.sh)
  find_program(TESSERA_PYTHON3 python3)
  if(NOT TESSERA_PYTHON3)
    set(TESSERA_PYTHON3 "")
  endif()
  target_compile_definitions(test_tools PRIVATE TESSERA_PYTHON3="${TESSERA_PYTHON3}"
                                                TESSERA_SCRIPTS_DIR="${PROJECT_SOURCE_DIR}/scripts")
endif()

# --- CPU kernels compiled per instruction-set variant (issue 6): the op
# tests once more against the haswell and zen4 builds of the kernels.
# Off in the sanitizer presets to keep CI within its time budget (the same
# kernels are exercised there through the variant plugins).
option(TESSERA_ISA_TESTS "Build the op tests against per-ISA copies of the kernels" ON)
if(TESSERA_ISA_TESTS)
  include(${CMAKE_CURRENT_SOURCE_DIR}/backends/cpu_isa/cpu_isa.cmake)
endif()

# --- the per-processor kernel choices (backends/cpu/ops/tuning.hpp) both
# ways, whichever this machine's defaults: the repack tests once more on the
# vector builds (AVX2; AVX-512 VNNI) with TESSERA_CPU_STREAM_PREFETCH (the
# mat-vec kernels' software prefetch), TESSERA_CPU_STREAM_PREFETCH_L2 (into
# L2, not L1), TESSERA_CPU_GEMM_FLOAT_IN_PLACE (the AVX-512 GEMM reading
# repacked F16/BF16 groups in place) and TESSERA_CPU_GEMM_F32_ROWS (the
# AVX-512 GEMM of F32 rows with the weights broadcast, and with it the
# float GEMM edge tests) set: tuning_a = no prefetch, in place, F32 panels;
# tuning_b = prefetch into L1, packed, F32 rows; tuning_c = prefetch into
# L2, packed, F32 rows.
# The AMX build's repack tests once more with the tiles off
# (TESSERA_CPU_AMX=0): the AVX-512 kernels of the same copy.
if(TARGET test_backends_cpu_sapphirerapids AND TESSERA_BUILD_MACHINE_RUNS_sapphirerapids)
  add_test(NAME test_backends_cpu_sapphirerapids.amx_off
           COMMAND test_backends_cpu_sapphirerapids "--gtest_filter=CpuTuning.*:*RepackMulMat.*:*MulMatK*")
  set_tests_properties(test_backends_cpu_sapphirerapids.amx_off PROPERTIES TIMEOUT 600 ENVIRONMENT "TESSERA_CPU_AMX=0")
endif()
foreach(_isa haswell zen4)
  set(_t test_backends_cpu_${_isa})
  if(NOT TARGET ${_t} OR NOT TESSERA_BUILD_MACHINE_RUNS_${_isa})
    continue()
  endif()
  foreach(_case "a;0;0;1;0" "b;4096;0;0;1" "c;4096;1;0;1")
    list(GET _case 0 _name)
    list(GET _case 1 _pf)
    list(GET _case 2 _l2)
    list(GET _case 3 _in_place)
    list(GET _case 4 _f32_rows)
    add_test(NAME ${_t}.tuning_${_name}
             COMMAND ${_t} "--gtest_filter=CpuTuning.*:*RepackMulMat.*:*RepackMulMatK*K256*:*RepackMulMatK*K512*:*MulMatGemm*:GraphCompute.FloatProducts*")
    set_tests_properties(${_t}.tuning_${_name} PROPERTIES TIMEOUT 600 ENVIRONMENT
                         "TESSERA_CPU_STREAM_PREFETCH=${_pf};TESSERA_CPU_STREAM_PREFETCH_L2=${_l2};TESSERA_CPU_GEMM_FLOAT_IN_PLACE=${_in_place};TESSERA_CPU_GEMM_F32_ROWS=${_f32_rows}")
  endforeach()
endforeach()

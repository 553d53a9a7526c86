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
endif()

# --- CPU kernels compiled per instruction-set variant (issue 6): the op
# tests once more against the haswell and zen4 builds of the kernels.
# Off in the sanitizer presets to keep CI within its time budget (the same
# kernels are exercised there through the variant plugins).
option(TESSERA_ISA_TESTS "Build the op tests against per-ISA copies of the kernels" ON)
if(TESSERA_ISA_TESTS)
  include(${CMAKE_CURRENT_SOURCE_DIR}/backends/cpu_isa/cpu_isa.cmake)
endif()

# --- the repacked mat-vec kernels (their vector paths: the AVX2 and the
# AVX-512 VNNI builds) with and without software prefetch of their weight
# stream (backends/cpu/ops/tuning.hpp), whichever this machine's default:
# the repack tests once more, TESSERA_CPU_STREAM_PREFETCH set.
foreach(_isa haswell zen4)
  set(_t test_backends_cpu_${_isa})
  if(NOT TARGET ${_t} OR NOT TESSERA_BUILD_MACHINE_RUNS_${_isa})
    continue()
  endif()
  foreach(_pf 0 4096)
    add_test(NAME ${_t}.stream_prefetch_${_pf}
             COMMAND ${_t} "--gtest_filter=CpuTuning.*:*RepackMulMat.*:*RepackMulMatK*K256*:*RepackMulMatK*K512*")
    set_tests_properties(${_t}.stream_prefetch_${_pf} PROPERTIES ENVIRONMENT "TESSERA_CPU_STREAM_PREFETCH=${_pf}" TIMEOUT 600)
  endforeach()
endforeach()

# libFuzzer targets (TESSERA_FUZZ=ON; needs clang). Included from the top-level
# CMakeLists.txt. Combine with TESSERA_SANITIZE=address for ASan + UBSan.
# scripts/fuzz.sh builds and runs them.
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "TESSERA_FUZZ needs clang (libFuzzer); configure with -DCMAKE_CXX_COMPILER=clang++")
endif()

# Coverage instrumentation for the code under test.
foreach(_lib tessera_core tessera_gguf)
  target_compile_options(${_lib} PRIVATE -fsanitize=fuzzer-no-link)
endforeach()

add_executable(fuzz_gguf_reader ${CMAKE_CURRENT_LIST_DIR}/fuzz_gguf_reader.cpp)
target_compile_options(fuzz_gguf_reader PRIVATE ${TESSERA_WARNINGS} -fsanitize=fuzzer)
target_link_options(fuzz_gguf_reader PRIVATE -fsanitize=fuzzer)
target_link_libraries(fuzz_gguf_reader PRIVATE tessera_gguf)

# libFuzzer targets (TESSERA_FUZZ=ON; needs clang). Included from the top-level
# CMakeLists.txt. Combine with TESSERA_SANITIZE=address for ASan + UBSan.
# scripts/fuzz.sh builds and runs them.
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "TESSERA_FUZZ needs clang (libFuzzer); configure with -DCMAKE_CXX_COMPILER=clang++")
endif()

# Coverage instrumentation for the code under test.
foreach(_lib tessera_core tessera_gguf tessera_llm)
  target_compile_options(${_lib} PRIVATE -fsanitize=fuzzer-no-link)
endforeach()

# tessera_add_fuzzer(NAME LIBS...): the program NAME from fuzz/NAME.cpp, linked
# with LIBS (internal headers of src/ reachable as "llm/...", like the tests).
set(TESSERA_FUZZ_DIR ${CMAKE_CURRENT_LIST_DIR})
function(tessera_add_fuzzer name)
  add_executable(${name} ${TESSERA_FUZZ_DIR}/${name}.cpp)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(${name} PRIVATE ${TESSERA_WARNINGS} -fsanitize=fuzzer)
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  target_link_libraries(${name} PRIVATE ${ARGN})
endfunction()

# The tokenizer's sources of the llm library on their own: they need neither
# the backend nor the CPU plugins tessera_llm brings (hundreds of objects), so
# fuzz_tokenizer builds in about a minute.
file(GLOB _tokenizer_src CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/llm/tokenizer*.cpp)
add_library(tessera_fuzz_tokenizer_lib STATIC ${_tokenizer_src} ${PROJECT_SOURCE_DIR}/src/llm/pretokenizer.cpp
            ${PROJECT_SOURCE_DIR}/src/llm/special_tokens.cpp ${PROJECT_SOURCE_DIR}/src/llm/unicode_text.cpp)
target_include_directories(tessera_fuzz_tokenizer_lib PUBLIC ${PROJECT_SOURCE_DIR}/include PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_options(tessera_fuzz_tokenizer_lib PRIVATE ${TESSERA_WARNINGS} -fsanitize=fuzzer-no-link)
target_link_libraries(tessera_fuzz_tokenizer_lib PUBLIC tessera_gguf tessera_core fmt::fmt PRIVATE ICU::uc)

# The targets (scripts/fuzz.sh runs each, with its seeds).
tessera_add_fuzzer(fuzz_gguf_reader tessera_gguf)
tessera_add_fuzzer(fuzz_tokenizer tessera_fuzz_tokenizer_lib)

# fuzz_model: llm::model::load on a whole GGUF file, then a first forward step
# on the CPU backend. Needs the CPU backend compiled in (-DTESSERA_CPU_STATIC=ON,
# as scripts/fuzz.sh configures): one program, no plugin to load.
if(TESSERA_CPU_STATIC AND TARGET tessera_llm AND TARGET tessera_cpu_backend)
  foreach(_lib tessera_backend tessera_cpu_static tessera_cpu_backend tessera_cpu_adapter)
    target_compile_options(${_lib} PRIVATE -fsanitize=fuzzer-no-link)
  endforeach()
  tessera_add_fuzzer(fuzz_model tessera_llm)
  # Its small seed models (llm::synth_model with shapes below the presets).
  add_executable(fuzz_model_seeds ${TESSERA_FUZZ_DIR}/fuzz_model_seeds.cpp)
  target_compile_options(fuzz_model_seeds PRIVATE ${TESSERA_WARNINGS})
  target_link_libraries(fuzz_model_seeds PRIVATE tessera_llm)
else()
  message(STATUS "fuzz_model not built: it needs -DTESSERA_CPU_STATIC=ON")
endif()

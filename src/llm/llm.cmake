# llm: tokenizer, sampler, model loading, graph builders, KV cache, decode loop.
file(GLOB TESSERA_LLM_SRC CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.cpp)
add_library(tessera_llm STATIC ${TESSERA_LLM_SRC})
target_include_directories(tessera_llm PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}> PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_options(tessera_llm PRIVATE ${TESSERA_WARNINGS})
target_link_libraries(tessera_llm PUBLIC tessera_gguf tessera_core $<BUILD_INTERFACE:fmt::fmt>)
if(TARGET tessera_backend)
  target_link_libraries(tessera_llm PUBLIC tessera_backend)
endif()
# ICU's character properties (general category, White_Space) for the
# byte-level BPE pre-tokenizers (src/llm/unicode_text.cpp).
find_package(ICU REQUIRED COMPONENTS uc)
target_link_libraries(tessera_llm PRIVATE ICU::uc)

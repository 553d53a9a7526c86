# CPU backend. tessera_cpu_static: the kernels + thread pool + graph compute,
# compiled for the build machine's baseline (tests and benchmarks link it).
file(GLOB TESSERA_CPU_SRC CONFIGURE_DEPENDS
     ${CMAKE_CURRENT_LIST_DIR}/*.cpp ${CMAKE_CURRENT_LIST_DIR}/ops/*.cpp)
add_library(tessera_cpu_static STATIC ${TESSERA_CPU_SRC})
target_include_directories(tessera_cpu_static PUBLIC ${PROJECT_SOURCE_DIR}/include PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_options(tessera_cpu_static PRIVATE ${TESSERA_WARNINGS})
target_link_libraries(tessera_cpu_static PUBLIC tessera_core Threads::Threads)

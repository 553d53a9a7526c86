# Static copies of the CPU kernels (TESSERA_CPU_SRC) compiled for one
# instruction-set variant, for the per-ISA op tests and benchmarks:
#   tessera_cpu_isa_lib(<name> <flags...>) -> target tessera_cpu_static_<name>
# (The loadable plugins are built by cpu.cmake; these only link into test
# and benchmark programs.)
# (Included from several directories: the flag variables are set in each
# including scope; targets are global and made once.)
function(tessera_cpu_isa_lib name)
  if(TARGET tessera_cpu_static_${name})
    return()
  endif()
  add_library(tessera_cpu_static_${name} STATIC EXCLUDE_FROM_ALL ${TESSERA_CPU_SRC})
  target_include_directories(tessera_cpu_static_${name} PUBLIC ${PROJECT_SOURCE_DIR}/include
                             PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(tessera_cpu_static_${name} PRIVATE ${TESSERA_WARNINGS} ${ARGN})
  target_link_libraries(tessera_cpu_static_${name} PUBLIC tessera_core Threads::Threads)
endfunction()

# The flags of the variants tested and benchmarked here (as in cpu.cmake).
set(TESSERA_ISA_FLAGS_haswell -mavx2 -mfma -mf16c -mbmi2)
set(TESSERA_ISA_FLAGS_alderlake -mavx2 -mfma -mf16c -mbmi2 -mavxvnni)
set(TESSERA_ISA_FLAGS_skylakex -mavx2 -mfma -mf16c -mbmi2 -mavx512f -mavx512bw -mavx512dq -mavx512vl)
set(TESSERA_ISA_FLAGS_zen4 -mavx2 -mfma -mf16c -mbmi2 -mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx512vnni
    -mavx512vbmi -mavx512bf16)
set(TESSERA_ISA_FLAGS_sapphirerapids ${TESSERA_ISA_FLAGS_zen4} -mamx-tile -mamx-int8 -mamx-bf16)
set(TESSERA_ISA_FLAGS_native -march=native)

// backends/cpu/ops/isa.hpp — which vector instruction sets this copy of
// the kernels is compiled for, as macros only (no code, so baseline files
// that share a header with the kernels, such as repack.hpp, may include it).
//
// The CPU kernels are compiled once per variant plugin with that variant's
// -m flags (cpu.cmake), so the choice is made at compile time from the
// compiler's predefined macros:
//   TSR_CPU_AVX2       AVX2 + FMA + F16C (variant haswell and above): the
//                      256-bit kernels
//   TSR_CPU_AVX512     AVX-512 F/BW/DQ/VL on top (skylakex and above): the
//                      512-bit GEMM micro-kernels
//   TSR_CPU_VNNI256    vpdpbusd on 256-bit vectors: AVX-VNNI (alderlake) or
//                      AVX512-VNNI + VL (icelake, zen4, sapphirerapids)
//   TSR_CPU_VNNI512    vpdpbusd on 512-bit vectors (AVX512-VNNI)
// Without TSR_CPU_AVX2 the portable kernels are used.
#pragma once

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define TSR_CPU_AVX2 1
#endif

#if defined(TSR_CPU_AVX2) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && \
    defined(__AVX512VL__)
#define TSR_CPU_AVX512 1
#endif

#if defined(TSR_CPU_AVX512) && defined(__AVX512VNNI__)
#define TSR_CPU_VNNI512 1
#define TSR_CPU_VNNI256 1
#elif defined(TSR_CPU_AVX2) && defined(__AVXVNNI__)
#define TSR_CPU_VNNI256 1
#endif

// backends/cpu/variant_isa.cpp — what this build of the CPU backend was
// compiled for. Compiled with the same instruction-set flags as the kernels
// (it reads the compiler's predefined macros); called only after the
// variant was chosen. TESSERA_CPU_VARIANT names the variant ("haswell";
// "native" or "x64" for a compiled-in backend).
#include "backends/cpu/cpu_adapter.hpp"
#include "backends/cpu/features.hpp"

#ifndef TESSERA_CPU_VARIANT
#define TESSERA_CPU_VARIANT "x64"
#endif

namespace tessera::cpu {

const char * build_variant_name() { return TESSERA_CPU_VARIANT; }

uint32_t build_isa_features() {
    uint32_t f = 0;
#ifdef __SSE3__
    f |= FEAT_SSE3;
#endif
#ifdef __SSSE3__
    f |= FEAT_SSSE3;
#endif
#ifdef __SSE4_1__
    f |= FEAT_SSE41;
#endif
#ifdef __SSE4_2__
    f |= FEAT_SSE42;
#endif
#ifdef __POPCNT__
    f |= FEAT_POPCNT;
#endif
#ifdef __AVX__
    f |= FEAT_AVX;
#endif
#ifdef __AVX2__
    f |= FEAT_AVX2;
#endif
#ifdef __FMA__
    f |= FEAT_FMA;
#endif
#ifdef __F16C__
    f |= FEAT_F16C;
#endif
#ifdef __BMI2__
    f |= FEAT_BMI2;
#endif
#ifdef __AVXVNNI__
    f |= FEAT_AVX_VNNI;
#endif
#ifdef __AVX512F__
    f |= FEAT_AVX512F;
#endif
#ifdef __AVX512BW__
    f |= FEAT_AVX512BW;
#endif
#ifdef __AVX512DQ__
    f |= FEAT_AVX512DQ;
#endif
#ifdef __AVX512VL__
    f |= FEAT_AVX512VL;
#endif
#ifdef __AVX512VBMI__
    f |= FEAT_AVX512_VBMI;
#endif
#ifdef __AVX512VNNI__
    f |= FEAT_AVX512_VNNI;
#endif
#ifdef __AVX512BF16__
    f |= FEAT_AVX512_BF16;
#endif
#ifdef __AMX_TILE__
    f |= FEAT_AMX_TILE;
#endif
#ifdef __AMX_INT8__
    f |= FEAT_AMX_INT8;
#endif
#ifdef __AMX_BF16__
    f |= FEAT_AMX_BF16;
#endif
#ifdef __ARM_NEON
    f |= FEAT_NEON;
#endif
#ifdef __ARM_FEATURE_FMA
    f |= FEAT_ARM_FMA;
#endif
#ifdef __ARM_FEATURE_FP16_VECTOR_ARITHMETIC
    f |= FEAT_FP16_VA;
#endif
#ifdef __ARM_FEATURE_DOTPROD
    f |= FEAT_DOTPROD;
#endif
#ifdef __ARM_FEATURE_MATMUL_INT8
    f |= FEAT_MATMUL_INT8;
#endif
#ifdef __ARM_FEATURE_SVE
    f |= FEAT_SVE;
#endif
#ifdef __ARM_FEATURE_SME
    f |= FEAT_SME;
#endif
    return f;
}

} // namespace tessera::cpu

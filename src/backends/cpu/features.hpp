// backends/cpu/features.hpp — which instruction-set features this processor
// has and the operating system has enabled, and which CPU variant fits.
//
// Everything declared here runs before a variant is chosen, so it is
// compiled for the baseline ISA and uses no inline or template code shared
// with the kernels (a variant's copy of such code could be picked by the
// linker and execute instructions this processor lacks).
#pragma once

#include <cstdint>

namespace tessera::cpu {

// Feature bits (x86 and Arm share one numbering; a bit is set when the
// processor has the feature AND the OS enabled its register state).
enum cpu_feature : uint32_t {
    FEAT_SSE3 = 1u << 0,
    FEAT_SSSE3 = 1u << 1,
    FEAT_SSE41 = 1u << 2,
    FEAT_SSE42 = 1u << 3,
    FEAT_POPCNT = 1u << 4,
    FEAT_AVX = 1u << 5,
    FEAT_AVX2 = 1u << 6,
    FEAT_FMA = 1u << 7,
    FEAT_F16C = 1u << 8,
    FEAT_BMI2 = 1u << 9,
    FEAT_AVX_VNNI = 1u << 10,
    FEAT_AVX512F = 1u << 11,
    FEAT_AVX512BW = 1u << 12,
    FEAT_AVX512DQ = 1u << 13,
    FEAT_AVX512VL = 1u << 14,
    FEAT_AVX512_VBMI = 1u << 15,
    FEAT_AVX512_VNNI = 1u << 16,
    FEAT_AVX512_BF16 = 1u << 17,
    FEAT_AMX_TILE = 1u << 18,
    FEAT_AMX_INT8 = 1u << 19,
    // Arm
    FEAT_NEON = 1u << 20,
    FEAT_ARM_FMA = 1u << 21,
    FEAT_FP16_VA = 1u << 22,
    FEAT_DOTPROD = 1u << 23,
    FEAT_MATMUL_INT8 = 1u << 24,
    FEAT_SVE = 1u << 25,
    FEAT_SME = 1u << 26,
    // x86, after the Arm bits (added later)
    FEAT_AMX_BF16 = 1u << 27,
};

// The raw x86 values feature decoding reads (Intel SDM vol. 2A, CPUID;
// vol. 1 ch. 13, XCR0). Filled from the processor by read_x86_cpuid, or by
// hand in tests.
struct x86_cpuid {
    uint32_t max_leaf = 0;    // CPUID.0:EAX, highest basic leaf
    uint32_t leaf1_ecx = 0;   // CPUID.1:ECX
    uint32_t leaf1_edx = 0;   // CPUID.1:EDX
    uint32_t leaf7_eax = 0;   // CPUID.(7,0):EAX, highest subleaf of leaf 7
    uint32_t leaf7_ebx = 0;   // CPUID.(7,0):EBX
    uint32_t leaf7_ecx = 0;   // CPUID.(7,0):ECX
    uint32_t leaf7_edx = 0;   // CPUID.(7,0):EDX
    uint32_t leaf7_1_eax = 0; // CPUID.(7,1):EAX
    uint64_t xcr0 = 0;        // XGETBV(0); read only when CPUID.1:ECX.OSXSAVE is set
    bool amx_permitted = false; // Linux granted this process AMX tile data (arch_prctl)
};

// Reads CPUID and XCR0 of this processor; asks Linux for AMX tile-data
// permission (ARCH_REQ_XCOMP_PERM) when the processor and XCR0 support AMX.
// All zero on non-x86 builds.
x86_cpuid read_x86_cpuid();

// FEAT_* bits a program may use given these values: the CPUID bit, and for
// AVX-class features the XCR0 state (SSE+AVX: bits 1-2; AVX-512: bits 5-7;
// AMX: bits 17-18 plus amx_permitted). Leaf 7 is read only when max_leaf
// >= 7, subleaf 1 only when leaf7_eax >= 1.
uint32_t decode_x86(const x86_cpuid & id);

// FEAT_* bits of this machine (x86: decode_x86(read_x86_cpuid()); Arm:
// from the auxiliary vector). Computed on every call.
uint32_t detect_features();

// Arm SVE vector length in bytes, 0 when there is no SVE.
int sve_vector_bytes();

// Name of a single feature bit ("AVX2"), or "" for an unknown bit.
const char * feature_name(uint32_t bit);

// --- variants ---------------------------------------------------------------
// The CPU plugin variants and the features each is compiled for (their -m
// flags in cpu.cmake): x64 (none), sse42, sandybridge, haswell, alderlake,
// skylakex, icelake, zen4, sapphirerapids.

// Number of variants, and variant i's name (null when out of range), in
// rank order.
int variant_count();
const char * variant_at(int i);

// Features variant `name` is compiled for; false when the name is unknown.
bool variant_requirements(const char * name, uint32_t * features);

// 0 when `features` lacks one the variant needs (or the name is unknown),
// else its rank: richer variants score higher (x64 1 ... sapphirerapids 9).
int variant_score(const char * name, uint32_t features);

} // namespace tessera::cpu

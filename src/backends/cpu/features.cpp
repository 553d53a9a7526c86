// backends/cpu/features.cpp — CPUID/XCR0 (x86) and auxiliary-vector (Arm)
// feature detection. Compiled for the baseline ISA; plain C-style code only
// (see features.hpp).
#include "backends/cpu/features.hpp"
#include "backends/cpu/cpuid.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#endif

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#include <sys/prctl.h>
#endif

namespace tessera::cpu {

namespace {

bool bit(uint32_t v, int b) { return ((v >> b) & 1u) != 0; }

#if defined(__x86_64__) || defined(__i386__)
// XGETBV with ECX = 0, as raw bytes so no -mxsave is needed.
uint64_t read_xcr0() {
    uint32_t eax = 0, edx = 0;
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(eax), "=d"(edx) : "c"(0));
    return (uint64_t(edx) << 32) | eax;
}

#if defined(__linux__)
// Linux uapi asm/prctl.h: ARCH_GET_XCOMP_PERM 0x1022, ARCH_REQ_XCOMP_PERM
// 0x1023; XFEATURE_XTILEDATA = 18 (the XCR0 bit of AMX tile data).
constexpr int arch_get_xcomp_perm = 0x1022;
constexpr int arch_req_xcomp_perm = 0x1023;
constexpr int xfeature_xtiledata = 18;

bool request_amx_permission() {
    if (syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) != 0) return false;
    unsigned long mask = 0;
    if (syscall(SYS_arch_prctl, arch_get_xcomp_perm, &mask) != 0) return false;
    return ((mask >> xfeature_xtiledata) & 1ul) != 0;
}
#endif
#endif

struct name_row {
    uint32_t bit;
    const char * name;
};

constexpr name_row names[] = {
    {FEAT_SSE3, "SSE3"},
    {FEAT_SSSE3, "SSSE3"},
    {FEAT_SSE41, "SSE4_1"},
    {FEAT_SSE42, "SSE4_2"},
    {FEAT_POPCNT, "POPCNT"},
    {FEAT_AVX, "AVX"},
    {FEAT_AVX_VNNI, "AVX_VNNI"},
    {FEAT_AVX2, "AVX2"},
    {FEAT_F16C, "F16C"},
    {FEAT_FMA, "FMA"},
    {FEAT_BMI2, "BMI2"},
    {FEAT_AVX512F, "AVX512"},
    {FEAT_AVX512BW, "AVX512BW"},
    {FEAT_AVX512DQ, "AVX512DQ"},
    {FEAT_AVX512VL, "AVX512VL"},
    {FEAT_AVX512_VBMI, "AVX512_VBMI"},
    {FEAT_AVX512_VNNI, "AVX512_VNNI"},
    {FEAT_AVX512_BF16, "AVX512_BF16"},
    {FEAT_AMX_TILE, "AMX_TILE"},
    {FEAT_AMX_INT8, "AMX_INT8"},
    {FEAT_AMX_BF16, "AMX_BF16"},
    {FEAT_NEON, "NEON"},
    {FEAT_ARM_FMA, "ARM_FMA"},
    {FEAT_FP16_VA, "FP16_VA"},
    {FEAT_DOTPROD, "DOTPROD"},
    {FEAT_MATMUL_INT8, "MATMUL_INT8"},
    {FEAT_SVE, "SVE"},
    {FEAT_SME, "SME"},
};

} // namespace

x86_cpuid read_x86_cpuid() {
    x86_cpuid id;
#if defined(__x86_64__) || defined(__i386__)
    const x86_basic_leaves basic = read_x86_basic_leaves();
    if (basic.max_leaf == 0) return id;
    id.max_leaf = basic.max_leaf;
    id.leaf1_ecx = basic.leaf1_ecx;
    id.leaf1_edx = basic.leaf1_edx;
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (id.max_leaf >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        id.leaf7_eax = a;
        id.leaf7_ebx = b;
        id.leaf7_ecx = c;
        id.leaf7_edx = d;
        if (id.leaf7_eax >= 1) {
            __cpuid_count(7, 1, a, b, c, d);
            id.leaf7_1_eax = a;
        }
    }
    if (bit(id.leaf1_ecx, 27)) id.xcr0 = read_xcr0(); // OSXSAVE
#if defined(__linux__)
    const bool amx_cpu = bit(id.leaf7_edx, 24);          // AMX-TILE
    const bool amx_os = ((id.xcr0 >> 17) & 3u) == 3u;    // XTILECFG, XTILEDATA
    if (amx_cpu && amx_os) id.amx_permitted = request_amx_permission();
#endif
#endif
    return id;
}

uint32_t decode_x86(const x86_cpuid & id) {
    uint32_t f = 0;
    const uint32_t c1 = id.leaf1_ecx;
    // CPUID.1:ECX bits: 0 SSE3, 9 SSSE3, 12 FMA, 19 SSE4.1, 20 SSE4.2,
    // 23 POPCNT, 27 OSXSAVE, 28 AVX, 29 F16C.
    if (bit(c1, 0)) f |= FEAT_SSE3;
    if (bit(c1, 9)) f |= FEAT_SSSE3;
    if (bit(c1, 19)) f |= FEAT_SSE41;
    if (bit(c1, 20)) f |= FEAT_SSE42;
    if (bit(c1, 23)) f |= FEAT_POPCNT;

    // XCR0: bit 1 SSE (XMM), bit 2 AVX (upper YMM), bits 5-7 AVX-512
    // (opmask, upper ZMM0-15, ZMM16-31), bits 17-18 AMX (TILECFG, TILEDATA).
    const bool osxsave = bit(c1, 27);
    const bool os_avx = osxsave && (id.xcr0 & 0x6u) == 0x6u;
    const bool os_avx512 = os_avx && (id.xcr0 & 0xe0u) == 0xe0u;
    const bool os_amx = osxsave && ((id.xcr0 >> 17) & 3u) == 3u && id.amx_permitted;

    if (os_avx) {
        if (bit(c1, 28)) f |= FEAT_AVX;
        if (bit(c1, 12)) f |= FEAT_FMA;
        if (bit(c1, 29)) f |= FEAT_F16C;
    }
    if (id.max_leaf >= 7) {
        const uint32_t b7 = id.leaf7_ebx, c7 = id.leaf7_ecx, d7 = id.leaf7_edx;
        // CPUID.(7,0):EBX bits: 5 AVX2, 8 BMI2, 16 AVX512F, 17 AVX512DQ,
        // 30 AVX512BW, 31 AVX512VL. ECX: 1 AVX512_VBMI, 11 AVX512_VNNI.
        // EDX: 22 AMX-BF16, 24 AMX-TILE, 25 AMX-INT8.
        if (bit(b7, 8)) f |= FEAT_BMI2; // a GPR instruction: no OS state needed
        if (os_avx && bit(b7, 5)) f |= FEAT_AVX2;
        if (os_avx512) {
            if (bit(b7, 16)) f |= FEAT_AVX512F;
            if (bit(b7, 17)) f |= FEAT_AVX512DQ;
            if (bit(b7, 30)) f |= FEAT_AVX512BW;
            if (bit(b7, 31)) f |= FEAT_AVX512VL;
            if (bit(c7, 1)) f |= FEAT_AVX512_VBMI;
            if (bit(c7, 11)) f |= FEAT_AVX512_VNNI;
        }
        if (os_amx) {
            if (bit(d7, 24)) f |= FEAT_AMX_TILE;
            if (bit(d7, 25)) f |= FEAT_AMX_INT8;
            if (bit(d7, 22)) f |= FEAT_AMX_BF16;
        }
        if (id.leaf7_eax >= 1) {
            // CPUID.(7,1):EAX bits: 4 AVX-VNNI, 5 AVX512_BF16.
            if (os_avx && bit(id.leaf7_1_eax, 4)) f |= FEAT_AVX_VNNI;
            if (os_avx512 && bit(id.leaf7_1_eax, 5)) f |= FEAT_AVX512_BF16;
        }
    }
    return f;
}

uint32_t detect_features() {
#if defined(__x86_64__) || defined(__i386__)
    return decode_x86(read_x86_cpuid());
#elif defined(__aarch64__) && defined(__linux__)
    // Linux uapi asm/hwcap.h (arm64): HWCAP_FP 0, HWCAP_ASIMD 1,
    // HWCAP_ASIMDHP 10, HWCAP_ASIMDDP 20, HWCAP_SVE 22; HWCAP2_I8MM 13,
    // HWCAP2_SME 23.
    const unsigned long hw = getauxval(AT_HWCAP);
    const unsigned long hw2 = getauxval(AT_HWCAP2);
    uint32_t f = 0;
    if ((hw >> 1) & 1ul) f |= FEAT_NEON | FEAT_ARM_FMA; // AArch64 SIMD always has fused FMA
    if ((hw >> 10) & 1ul) f |= FEAT_FP16_VA;
    if ((hw >> 20) & 1ul) f |= FEAT_DOTPROD;
    if ((hw >> 22) & 1ul) f |= FEAT_SVE;
    if ((hw2 >> 13) & 1ul) f |= FEAT_MATMUL_INT8;
    if ((hw2 >> 23) & 1ul) f |= FEAT_SME;
    return f;
#else
    return 0;
#endif
}

int sve_vector_bytes() {
#if defined(__aarch64__) && defined(__linux__) && defined(PR_SVE_GET_VL)
    if (!(detect_features() & FEAT_SVE)) return 0;
    const int r = prctl(PR_SVE_GET_VL);
    return r < 0 ? 0 : (r & PR_SVE_VL_LEN_MASK);
#else
    return 0;
#endif
}

const char * feature_name(uint32_t b) {
    for (const name_row & r : names) {
        if (r.bit == b) return r.name;
    }
    return "";
}

} // namespace tessera::cpu

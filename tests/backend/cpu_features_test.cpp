// CPU feature decoding and variant scores from injected CPUID/XCR0 values
// (bit positions from the Intel SDM vol. 2A, CPUID; vol. 1 ch. 13, XCR0),
// and the real machine's features against /proc/cpuinfo.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "backends/cpu/features.hpp"

namespace tessera::cpu {
namespace {

constexpr uint32_t b(int n) { return 1u << n; }

// CPUID.1:ECX of an AVX2-class processor with OSXSAVE set.
constexpr uint32_t leaf1_ecx_avx = b(0) | b(9) | b(12) | b(19) | b(20) | b(23) | b(27) | b(28) | b(29);
constexpr uint64_t xcr0_sse_avx = 0x7;           // x87, SSE, AVX
constexpr uint64_t xcr0_avx512 = 0xe7;           // + opmask, ZMM_Hi256, Hi16_ZMM
constexpr uint64_t xcr0_amx = 0xe7 | (3ull << 17); // + XTILECFG, XTILEDATA

x86_cpuid haswell() {
    x86_cpuid id;
    id.max_leaf = 0xd;
    id.leaf1_ecx = leaf1_ecx_avx;
    id.leaf7_ebx = b(5) | b(8); // AVX2, BMI2
    id.xcr0 = xcr0_sse_avx;
    return id;
}

x86_cpuid skylakex() {
    x86_cpuid id = haswell();
    id.leaf7_ebx |= b(16) | b(17) | b(30) | b(31); // AVX512 F, DQ, BW, VL
    id.xcr0 = xcr0_avx512;
    return id;
}

x86_cpuid sapphirerapids() {
    x86_cpuid id = skylakex();
    id.leaf7_ecx = b(1) | b(11);   // AVX512_VBMI, AVX512_VNNI
    id.leaf7_edx = b(22) | b(24) | b(25); // AMX-BF16, AMX-TILE, AMX-INT8
    id.leaf7_eax = 1;
    id.leaf7_1_eax = b(4) | b(5);  // AVX-VNNI, AVX512_BF16
    id.xcr0 = xcr0_amx;
    id.amx_permitted = true;
    return id;
}

// The best variant for these features, by score.
std::string best(uint32_t f) {
    std::string name = "none";
    int top = 0;
    for (int i = 0; i < variant_count(); ++i) {
        const int s = variant_score(variant_at(i), f);
        if (s > top) {
            top = s;
            name = variant_at(i);
        }
    }
    return name;
}

TEST(CpuFeatures, NothingReportedGivesTheBaselineOnly) {
    EXPECT_EQ(decode_x86(x86_cpuid{}), 0u);
    EXPECT_EQ(variant_score("x64", 0), 1);
    EXPECT_EQ(variant_score("sse42", 0), 0);
    EXPECT_EQ(best(0), "x64");
}

TEST(CpuFeatures, HaswellClass) {
    const uint32_t f = decode_x86(haswell());
    for (uint32_t bit : {FEAT_SSE3, FEAT_SSSE3, FEAT_SSE41, FEAT_SSE42, FEAT_POPCNT, FEAT_AVX,
                         FEAT_AVX2, FEAT_FMA, FEAT_F16C, FEAT_BMI2}) {
        EXPECT_TRUE(f & bit) << feature_name(bit);
    }
    EXPECT_FALSE(f & FEAT_AVX512F);
    EXPECT_EQ(variant_score("haswell", f), 4);
    EXPECT_EQ(variant_score("alderlake", f), 0);
    EXPECT_EQ(variant_score("skylakex", f), 0);
    EXPECT_EQ(best(f), "haswell");
}

TEST(CpuFeatures, Avx2BitWithoutOsAvxStateScoresZero) {
    x86_cpuid id = haswell();
    id.xcr0 = 0x3; // the OS did not enable the upper YMM state
    const uint32_t f = decode_x86(id);
    EXPECT_FALSE(f & FEAT_AVX);
    EXPECT_FALSE(f & FEAT_AVX2);
    EXPECT_FALSE(f & FEAT_FMA);
    EXPECT_FALSE(f & FEAT_F16C);
    EXPECT_TRUE(f & FEAT_BMI2); // general-purpose registers only
    EXPECT_EQ(variant_score("haswell", f), 0);
    EXPECT_EQ(variant_score("sandybridge", f), 0);
    EXPECT_EQ(variant_score("sse42", f), 2);
    EXPECT_EQ(best(f), "sse42");
}

TEST(CpuFeatures, XcrZeroIsIgnoredWithoutOsxsave) {
    x86_cpuid id = haswell();
    id.leaf1_ecx &= ~b(27); // OSXSAVE clear: XCR0 cannot be trusted (or read)
    id.xcr0 = ~0ull;
    EXPECT_EQ(best(decode_x86(id)), "sse42");
}

TEST(CpuFeatures, Avx512NeedsZmmState) {
    x86_cpuid id = skylakex();
    EXPECT_EQ(variant_score("skylakex", decode_x86(id)), 6);
    EXPECT_EQ(best(decode_x86(id)), "skylakex");
    id.xcr0 = xcr0_sse_avx; // AVX on, AVX-512 state off
    const uint32_t f = decode_x86(id);
    EXPECT_FALSE(f & FEAT_AVX512F);
    EXPECT_EQ(variant_score("skylakex", f), 0);
    EXPECT_EQ(best(f), "haswell");
    id.xcr0 = 0x67; // ZMM16-31 state (bit 7) missing
    EXPECT_EQ(best(decode_x86(id)), "haswell");
}

TEST(CpuFeatures, Leaf7IsReadOnlyWhenReported) {
    x86_cpuid id = skylakex();
    id.max_leaf = 6;
    EXPECT_EQ(best(decode_x86(id)), "sandybridge");
    id = sapphirerapids();
    id.leaf7_eax = 0; // subleaf 1 not reported: no AVX512_BF16, no AVX-VNNI
    const uint32_t f = decode_x86(id);
    EXPECT_FALSE(f & FEAT_AVX512_BF16);
    EXPECT_FALSE(f & FEAT_AVX_VNNI);
    EXPECT_EQ(best(f), "icelake");
}

TEST(CpuFeatures, AlderlakeIsAvxVnniWithoutAvx512) {
    x86_cpuid id = haswell();
    id.leaf7_eax = 1;
    id.leaf7_1_eax = b(4);
    EXPECT_EQ(best(decode_x86(id)), "alderlake");
}

TEST(CpuFeatures, Zen4AndSapphireRapids) {
    x86_cpuid id = sapphirerapids();
    EXPECT_EQ(variant_score("sapphirerapids", decode_x86(id)), 9);
    EXPECT_EQ(best(decode_x86(id)), "sapphirerapids");
    EXPECT_TRUE(decode_x86(id) & FEAT_AMX_BF16);
    id.leaf7_edx &= ~b(22); // AMX-INT8 without AMX-BF16 (the variant's F16 GEMM needs both)
    EXPECT_EQ(best(decode_x86(id)), "zen4");
    id.leaf7_edx |= b(22);
    id.amx_permitted = false; // Linux refused the tile-data permission
    EXPECT_FALSE(decode_x86(id) & FEAT_AMX_INT8);
    EXPECT_EQ(best(decode_x86(id)), "zen4");
    id.amx_permitted = true;
    id.xcr0 = xcr0_avx512; // tile state not enabled by the OS
    EXPECT_EQ(best(decode_x86(id)), "zen4");
}

TEST(CpuFeatures, RanksIncreaseWithRichness) {
    ASSERT_EQ(variant_count(), 9);
    for (int i = 0; i < variant_count(); ++i) {
        uint32_t req = 0;
        ASSERT_TRUE(variant_requirements(variant_at(i), &req));
        EXPECT_EQ(variant_score(variant_at(i), req), i + 1) << variant_at(i);
        EXPECT_EQ(variant_score(variant_at(i), req & (req - 1)), i == 0 ? 1 : 0)
            << variant_at(i) << " with one required feature missing";
    }
    EXPECT_EQ(variant_score("pentium", ~0u), 0);
    uint32_t dummy = 0;
    EXPECT_FALSE(variant_requirements("pentium", &dummy));
    EXPECT_EQ(variant_at(9), nullptr);
}

TEST(CpuFeatures, ThisMachineAgreesWithProcCpuinfo) {
#if defined(__x86_64__)
    std::ifstream in("/proc/cpuinfo");
    std::string line, flags_line;
    while (std::getline(in, line)) {
        if (line.rfind("flags", 0) == 0) {
            flags_line = line;
            break;
        }
    }
    if (flags_line.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags";
    std::istringstream ss(flags_line.substr(flags_line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string w; ss >> w;) flags.insert(w);
    const uint32_t f = detect_features();
    // Linux lists AVX-class flags only when it enabled their state.
    const std::pair<uint32_t, const char *> pairs[] = {
        {FEAT_SSE3, "pni"},       {FEAT_SSSE3, "ssse3"},       {FEAT_SSE42, "sse4_2"},
        {FEAT_AVX, "avx"},        {FEAT_AVX2, "avx2"},         {FEAT_FMA, "fma"},
        {FEAT_F16C, "f16c"},      {FEAT_BMI2, "bmi2"},         {FEAT_AVX512F, "avx512f"},
        {FEAT_AVX512BW, "avx512bw"}, {FEAT_AVX512_VNNI, "avx512_vnni"},
        {FEAT_AVX512_BF16, "avx512_bf16"}, {FEAT_AVX_VNNI, "avx_vnni"}};
    for (const auto & [bit, name] : pairs) {
        EXPECT_EQ((f & bit) != 0, flags.count(name) == 1) << name;
    }
#else
    GTEST_SKIP() << "x86-64 only";
#endif
}

} // namespace
} // namespace tessera::cpu

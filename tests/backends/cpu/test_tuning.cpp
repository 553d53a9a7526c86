// Per-processor kernel tuning (backends/cpu/ops/tuning.hpp): the defaults
// per vendor and family, the environment override and its refusal of bad
// values.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "backends/cpu/ops/tuning.hpp"

namespace tessera::cpu {
namespace {

constexpr cpu_model k_intel{cpu_vendor::intel, 6, 0xCF};
constexpr cpu_model k_zen4{cpu_vendor::amd, 0x19, 0x11};
constexpr cpu_model k_zen5{cpu_vendor::amd, 0x1A, 0x02};
constexpr cpu_model k_other{};

// CPUID leaf 1 EAX values (stepping in bits 3:0, model 7:4, family 11:8,
// extended model 19:16, extended family 27:20): four real processors, then
// two made-up values whose extended fields are set where they must be
// ignored.
TEST(CpuTuning, DisplayFamilyAndModelFromLeaf1) {
    const cpu_model zen5 = cpu_model_from_leaf1(cpu_vendor::amd, 0x00B00F21); // EPYC 9005 (Turin)
    EXPECT_EQ(zen5.vendor, cpu_vendor::amd);
    EXPECT_EQ(zen5.family, 0x1Au);
    EXPECT_EQ(zen5.model, 0x02u);
    const cpu_model zen4 = cpu_model_from_leaf1(cpu_vendor::amd, 0x00A10F11); // EPYC 9004 (Genoa)
    EXPECT_EQ(zen4.family, 0x19u);
    EXPECT_EQ(zen4.model, 0x11u);
    const cpu_model emr = cpu_model_from_leaf1(cpu_vendor::intel, 0x000C06F2); // Xeon 5th gen (Emerald Rapids)
    EXPECT_EQ(emr.family, 6u);
    EXPECT_EQ(emr.model, 0xCFu);
    // The extended fields count only with base family 0xF (model also 0x6).
    const cpu_model p4 = cpu_model_from_leaf1(cpu_vendor::intel, 0x00000F29); // Pentium 4 (family 0xF, ext 0)
    EXPECT_EQ(p4.family, 0xFu);
    EXPECT_EQ(p4.model, 0x2u);
    const cpu_model fam6 = cpu_model_from_leaf1(cpu_vendor::amd, 0x0FF30642); // base family 6: ext family ignored
    EXPECT_EQ(fam6.family, 6u);
    EXPECT_EQ(fam6.model, 0x34u);
    const cpu_model fam5 = cpu_model_from_leaf1(cpu_vendor::other, 0x0FF30543); // base family 5: ext model ignored too
    EXPECT_EQ(fam5.family, 5u);
    EXPECT_EQ(fam5.model, 0x4u);
}

#if defined(__x86_64__) || defined(__i386__)
// The kernel's reading of the same CPUID values (/proc/cpuinfo "cpu family"
// and "model", decimal) is an independent account of this processor.
TEST(CpuTuning, ThisProcessorMatchesProcCpuinfo) {
    const cpu_model m = detect_cpu_model();
    EXPECT_GE(m.family, 6u); // every x86-64 processor reports family 6 or more (0xF, 0x1x)
    std::ifstream in("/proc/cpuinfo");
    if (!in) GTEST_SKIP() << "no /proc/cpuinfo";
    long family = -1, model = -1;
    for (std::string line; std::getline(in, line) && !line.empty();) { // the first processor
        const size_t colon = line.find(':');
        if (colon == std::string::npos) continue;
        std::string key = line.substr(0, colon);
        key.erase(key.find_last_not_of(" \t") + 1);
        if (key == "cpu family") family = std::stol(line.substr(colon + 1));
        if (key == "model") model = std::stol(line.substr(colon + 1));
    }
    if (family < 0 || model < 0) GTEST_SKIP() << "/proc/cpuinfo names no family and model";
    EXPECT_EQ(static_cast<long>(m.family), family);
    EXPECT_EQ(static_cast<long>(m.model), model);
}
#endif

TEST(CpuTuning, DefaultsPerVendorAndFamily) {
    std::string warning = "stale";
    EXPECT_EQ(tuning_for(k_intel, {}, warning).stream_prefetch, 4096u);
    EXPECT_TRUE(warning.empty());
    EXPECT_EQ(tuning_for(k_zen4, {}, warning).stream_prefetch, 0u);
    EXPECT_EQ(tuning_for(k_other, {}, warning).stream_prefetch, 0u);
    EXPECT_FALSE(tuning_for(k_intel, {}, warning).gemm_float_in_place);
    EXPECT_TRUE(tuning_for(k_zen4, {}, warning).gemm_float_in_place);
    EXPECT_FALSE(tuning_for(k_other, {}, warning).gemm_float_in_place);
    EXPECT_EQ(tuning_for(k_zen5, {}, warning).stream_prefetch, 4096u);
    EXPECT_EQ(tuning_for({cpu_vendor::amd, 0x1B, 0}, {}, warning).stream_prefetch, 4096u);
    EXPECT_EQ(tuning_for({cpu_vendor::amd, 0x17, 0x31}, {}, warning).stream_prefetch, 0u); // Zen 2
    EXPECT_TRUE(tuning_for(k_zen5, {}, warning).gemm_float_in_place);
    // F32 rows broadcast (gemm_f32_rows.cpp): measured on Intel only.
    EXPECT_TRUE(tuning_for(k_intel, {}, warning).gemm_f32_rows);
    for (const cpu_model & m : {k_zen4, k_zen5, k_other}) EXPECT_FALSE(tuning_for(m, {}, warning).gemm_f32_rows);
    for (const cpu_model & m : {k_intel, k_zen4, k_zen5, k_other}) {
        EXPECT_TRUE(tuning_for(m, {}, warning).huge_pages);
        EXPECT_TRUE(tuning_for(m, {}, warning).amx);
    }
    // Family 0x1A of another vendor (none exists) is not Zen 5.
    EXPECT_EQ(tuning_for({cpu_vendor::other, 0x1A, 0}, {}, warning).stream_prefetch, 0u);
    // The stream prefetch goes into L2 on Intel only, and there only for
    // weights larger than the L3 (whatever their size where it is unknown).
    EXPECT_TRUE(tuning_for(k_intel, {}, warning).stream_prefetch_l2);
    for (const cpu_model & m : {k_zen4, k_zen5, k_other}) EXPECT_FALSE(tuning_for(m, {}, warning).stream_prefetch_l2);
    cpu_model intel_l3 = k_intel, zen4_l3 = k_zen4;
    intel_l3.l3_bytes = zen4_l3.l3_bytes = size_t{300} << 20;
    EXPECT_EQ(tuning_for(intel_l3, {}, warning).stream_prefetch_l2_above, size_t{300} << 20);
    EXPECT_EQ(tuning_for(k_intel, {}, warning).stream_prefetch_l2_above, 0u);
    EXPECT_EQ(tuning_for(zen4_l3, {}, warning).stream_prefetch_l2_above, 0u);
    EXPECT_TRUE(warning.empty());
}

TEST(CpuTuning, TheStreamPrefetchKindFollowsDistanceAndLevel) {
    cpu_tuning t;
    t.stream_prefetch = 0;
    t.stream_prefetch_l2 = true;
    EXPECT_EQ(stream_pf_of(t), stream_pf::none); // no distance: no prefetch at all
    t.stream_prefetch = 4096;
    EXPECT_EQ(stream_pf_of(t), stream_pf::l2);
    t.stream_prefetch_l2 = false;
    EXPECT_EQ(stream_pf_of(t), stream_pf::l1);
    // Above a size: L2 only for more weights than that (135M Q4_0, 77 MiB,
    // and 1B Q4_0, 590 MiB, against a 300 MiB L3).
    t.stream_prefetch_l2 = true;
    t.stream_prefetch_l2_above = size_t{300} << 20;
    EXPECT_EQ(stream_pf_of(t, size_t{77} << 20), stream_pf::l1);
    EXPECT_EQ(stream_pf_of(t, size_t{300} << 20), stream_pf::l1);
    EXPECT_EQ(stream_pf_of(t, (size_t{300} << 20) + 1), stream_pf::l2);
    EXPECT_EQ(stream_pf_of(t, size_t{590} << 20), stream_pf::l2);
    t.stream_prefetch = 0;
    EXPECT_EQ(stream_pf_of(t, size_t{590} << 20), stream_pf::none);
    // with_stream_pf hands the kernel the kind as a constant.
    for (const stream_pf k : {stream_pf::none, stream_pf::l1, stream_pf::l2}) {
        EXPECT_EQ(with_stream_pf(k, [](auto c) { return decltype(c)::value; }), k);
    }
}

TEST(CpuTuning, TheEnvironmentOverridesTheDefault) {
    std::string warning;
    EXPECT_EQ(tuning_for(k_intel, {"0"}, warning).stream_prefetch, 0u);
    EXPECT_EQ(tuning_for(k_zen4, {"8192"}, warning).stream_prefetch, 8192u);
    EXPECT_EQ(tuning_for(k_other, {"65536"}, warning).stream_prefetch, 65536u);
    EXPECT_EQ(tuning_for(k_zen4, {"64"}, warning).stream_prefetch, 64u);
    EXPECT_TRUE(tuning_for(k_intel, {nullptr, "1"}, warning).gemm_float_in_place);
    EXPECT_FALSE(tuning_for(k_zen4, {nullptr, "0"}, warning).gemm_float_in_place);
    EXPECT_FALSE(tuning_for(k_intel, {nullptr, nullptr, "0"}, warning).huge_pages);
    EXPECT_TRUE(tuning_for(k_zen4, {nullptr, nullptr, "1"}, warning).huge_pages);
    EXPECT_FALSE(tuning_for(k_intel, {nullptr, nullptr, nullptr, "0"}, warning).amx);
    EXPECT_TRUE(tuning_for(k_intel, {nullptr, nullptr, nullptr, "1"}, warning).amx);
    EXPECT_FALSE(tuning_for(k_intel, {nullptr, nullptr, nullptr, nullptr, "0"}, warning).stream_prefetch_l2);
    EXPECT_TRUE(tuning_for(k_zen4, {nullptr, nullptr, nullptr, nullptr, "1"}, warning).stream_prefetch_l2);
    EXPECT_FALSE(tuning_for(k_intel, {nullptr, nullptr, nullptr, nullptr, nullptr, "0"}, warning).gemm_f32_rows);
    EXPECT_TRUE(tuning_for(k_zen4, {nullptr, nullptr, nullptr, nullptr, nullptr, "1"}, warning).gemm_f32_rows);
    {
        // Set explicitly, it holds for models of any size.
        cpu_model intel_l3 = k_intel;
        intel_l3.l3_bytes = size_t{300} << 20;
        const cpu_tuning forced = tuning_for(intel_l3, {nullptr, nullptr, nullptr, nullptr, "1"}, warning);
        EXPECT_TRUE(forced.stream_prefetch_l2);
        EXPECT_EQ(forced.stream_prefetch_l2_above, 0u);
        EXPECT_EQ(tuning_for(intel_l3, {nullptr, nullptr, nullptr, nullptr, "0"}, warning).stream_prefetch_l2_above, 0u);
        // A bad value keeps the default, size rule included.
        std::string w;
        EXPECT_EQ(tuning_for(intel_l3, {nullptr, nullptr, nullptr, nullptr, "yes"}, w).stream_prefetch_l2_above, size_t{300} << 20);
        EXPECT_FALSE(w.empty());
    }
    const cpu_tuning all = tuning_for(k_zen4, {"128", "0", "0", "0"}, warning);
    EXPECT_EQ(all.stream_prefetch, 128u);
    EXPECT_FALSE(all.gemm_float_in_place);
    EXPECT_FALSE(all.huge_pages);
    EXPECT_FALSE(all.amx);
    EXPECT_TRUE(warning.empty()) << warning;
}

TEST(CpuTuning, BadValuesKeepTheDefaultAndSayWhy) {
    for (const char * bad : {"", "abc", "-64", " 64", "64 ", "64k", "100", "65600", "99999999999999999999999", "0x40"}) {
        std::string warning;
        EXPECT_EQ(tuning_for(k_intel, {bad}, warning).stream_prefetch, 4096u) << "'" << bad << "'";
        EXPECT_EQ(tuning_for(k_zen4, {bad}, warning).stream_prefetch, 0u) << "'" << bad << "'";
        EXPECT_NE(warning.find(k_stream_prefetch_env), std::string::npos) << warning;
        EXPECT_NE(warning.find(std::string("'") + bad + "'"), std::string::npos) << warning;
        EXPECT_NE(warning.find("using 0"), std::string::npos) << warning;
    }
    for (const char * bad : {"", "2", "yes", "true", "01", " 1"}) {
        std::string warning;
        EXPECT_TRUE(tuning_for(k_zen4, {nullptr, bad}, warning).gemm_float_in_place) << "'" << bad << "'";
        EXPECT_NE(warning.find(k_gemm_float_in_place_env), std::string::npos) << warning;
        EXPECT_NE(warning.find(std::string("'") + bad + "' is not 0 or 1; using 1"), std::string::npos) << warning;
        EXPECT_TRUE(tuning_for(k_intel, {nullptr, nullptr, bad}, warning).huge_pages) << "'" << bad << "'";
        EXPECT_EQ(warning, std::string(k_huge_pages_env) + "='" + bad + "' is not 0 or 1; using 1");
        EXPECT_TRUE(tuning_for(k_intel, {nullptr, nullptr, nullptr, bad}, warning).amx) << "'" << bad << "'";
        EXPECT_EQ(warning, std::string(k_amx_env) + "='" + bad + "' is not 0 or 1; using 1");
        EXPECT_FALSE(tuning_for(k_zen4, {nullptr, nullptr, nullptr, nullptr, bad}, warning).stream_prefetch_l2) << "'" << bad << "'";
        EXPECT_EQ(warning, std::string(k_stream_prefetch_l2_env) + "='" + bad + "' is not 0 or 1; using 0");
        EXPECT_TRUE(tuning_for(k_intel, {nullptr, nullptr, nullptr, nullptr, nullptr, bad}, warning).gemm_f32_rows) << "'" << bad << "'";
        EXPECT_EQ(warning, std::string(k_gemm_f32_rows_env) + "='" + bad + "' is not 0 or 1; using 1");
    }
    // A value with control bytes is shown escaped (it reaches the terminal).
    {
        std::string warning;
        (void)tuning_for(k_intel, {nullptr, nullptr, nullptr, "\x1b[2J"}, warning);
        EXPECT_EQ(warning, std::string(k_amx_env) + "='\\x1b[2J' is not 0 or 1; using 1");
    }
    // All bad: one line each, every default kept.
    std::string warning;
    const cpu_tuning t = tuning_for(k_intel, {"x", "y", "z", "w", "v", "u"}, warning);
    EXPECT_EQ(t.stream_prefetch, 4096u);
    EXPECT_FALSE(t.gemm_float_in_place);
    EXPECT_TRUE(t.huge_pages);
    EXPECT_TRUE(t.amx);
    EXPECT_TRUE(t.stream_prefetch_l2);
    EXPECT_TRUE(t.gemm_f32_rows);
    EXPECT_EQ(warning, std::string(k_stream_prefetch_env) +
                           "='x' is not a byte count that is a multiple of 64 in [0, 65536]; using 4096\n" +
                           k_gemm_float_in_place_env + "='y' is not 0 or 1; using 0\n" + k_huge_pages_env +
                           "='z' is not 0 or 1; using 1\n" + k_amx_env + "='w' is not 0 or 1; using 1\n" +
                           k_stream_prefetch_l2_env + "='v' is not 0 or 1; using 1\n" + k_gemm_f32_rows_env +
                           "='u' is not 0 or 1; using 1");
}

// The process's tuning is the vendor default, or the variable's value when
// it is set (ctest runs the kernel tests once with each setting).
TEST(CpuTuning, TheProcessTuningFollowsTheEnvironment) {
    std::string warning;
    const cpu_tuning expect = tuning_for(detect_cpu_model(), process_tuning_env(), warning);
    EXPECT_EQ(tuning().stream_prefetch, expect.stream_prefetch);
    EXPECT_EQ(tuning().gemm_float_in_place, expect.gemm_float_in_place);
    EXPECT_EQ(tuning().huge_pages, expect.huge_pages);
    EXPECT_EQ(tuning().amx, expect.amx);
    EXPECT_EQ(tuning().stream_prefetch_l2, expect.stream_prefetch_l2);
    EXPECT_EQ(tuning().gemm_f32_rows, expect.gemm_f32_rows);
    if (const char * env = std::getenv(k_stream_prefetch_env); env != nullptr && warning.empty()) {
        EXPECT_EQ(tuning().stream_prefetch, std::strtoul(env, nullptr, 10));
    }
    if (const char * env = std::getenv(k_stream_prefetch_l2_env); env != nullptr && warning.empty()) {
        EXPECT_EQ(tuning().stream_prefetch_l2, std::strcmp(env, "1") == 0);
    }
    if (const char * env = std::getenv(k_gemm_f32_rows_env); env != nullptr && warning.empty()) {
        EXPECT_EQ(tuning().gemm_f32_rows, std::strcmp(env, "1") == 0);
    }
}

} // namespace
} // namespace tessera::cpu

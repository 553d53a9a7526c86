// Per-processor kernel tuning (backends/cpu/ops/tuning.hpp): the defaults
// per vendor, the environment override and its refusal of bad values.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "backends/cpu/ops/tuning.hpp"

namespace tessera::cpu {
namespace {

TEST(CpuTuning, DefaultsPerVendor) {
    std::string warning = "stale";
    EXPECT_EQ(tuning_for(cpu_vendor::intel, {}, warning).stream_prefetch, 4096u);
    EXPECT_TRUE(warning.empty());
    EXPECT_EQ(tuning_for(cpu_vendor::amd, {}, warning).stream_prefetch, 0u);
    EXPECT_EQ(tuning_for(cpu_vendor::other, {}, warning).stream_prefetch, 0u);
    EXPECT_FALSE(tuning_for(cpu_vendor::intel, {}, warning).gemm_float_in_place);
    EXPECT_TRUE(tuning_for(cpu_vendor::amd, {}, warning).gemm_float_in_place);
    EXPECT_FALSE(tuning_for(cpu_vendor::other, {}, warning).gemm_float_in_place);
    EXPECT_TRUE(warning.empty());
}

TEST(CpuTuning, TheEnvironmentOverridesTheDefault) {
    std::string warning;
    EXPECT_EQ(tuning_for(cpu_vendor::intel, {"0"}, warning).stream_prefetch, 0u);
    EXPECT_EQ(tuning_for(cpu_vendor::amd, {"8192"}, warning).stream_prefetch, 8192u);
    EXPECT_EQ(tuning_for(cpu_vendor::other, {"65536"}, warning).stream_prefetch, 65536u);
    EXPECT_EQ(tuning_for(cpu_vendor::amd, {"64"}, warning).stream_prefetch, 64u);
    EXPECT_TRUE(tuning_for(cpu_vendor::intel, {nullptr, "1"}, warning).gemm_float_in_place);
    EXPECT_FALSE(tuning_for(cpu_vendor::amd, {nullptr, "0"}, warning).gemm_float_in_place);
    const cpu_tuning both = tuning_for(cpu_vendor::amd, {"128", "0"}, warning);
    EXPECT_EQ(both.stream_prefetch, 128u);
    EXPECT_FALSE(both.gemm_float_in_place);
    EXPECT_TRUE(warning.empty()) << warning;
}

TEST(CpuTuning, BadValuesKeepTheDefaultAndSayWhy) {
    for (const char * bad : {"", "abc", "-64", " 64", "64 ", "64k", "100", "65600", "99999999999999999999999", "0x40"}) {
        std::string warning;
        EXPECT_EQ(tuning_for(cpu_vendor::intel, {bad}, warning).stream_prefetch, 4096u) << "'" << bad << "'";
        EXPECT_EQ(tuning_for(cpu_vendor::amd, {bad}, warning).stream_prefetch, 0u) << "'" << bad << "'";
        EXPECT_NE(warning.find(k_stream_prefetch_env), std::string::npos) << warning;
        EXPECT_NE(warning.find(std::string("'") + bad + "'"), std::string::npos) << warning;
        EXPECT_NE(warning.find("using 0"), std::string::npos) << warning;
    }
    for (const char * bad : {"", "2", "yes", "true", "01", " 1"}) {
        std::string warning;
        EXPECT_TRUE(tuning_for(cpu_vendor::amd, {nullptr, bad}, warning).gemm_float_in_place) << "'" << bad << "'";
        EXPECT_NE(warning.find(k_gemm_float_in_place_env), std::string::npos) << warning;
        EXPECT_NE(warning.find(std::string("'") + bad + "' is not 0 or 1; using 1"), std::string::npos) << warning;
    }
    // Both bad: one line each, both defaults kept.
    std::string warning;
    const cpu_tuning t = tuning_for(cpu_vendor::intel, {"x", "y"}, warning);
    EXPECT_EQ(t.stream_prefetch, 4096u);
    EXPECT_FALSE(t.gemm_float_in_place);
    EXPECT_EQ(warning, std::string(k_stream_prefetch_env) +
                           "='x' is not a byte count that is a multiple of 64 in [0, 65536]; using 4096\n" +
                           k_gemm_float_in_place_env + "='y' is not 0 or 1; using 0");
}

// The process's tuning is the vendor default, or the variable's value when
// it is set (ctest runs the kernel tests once with each setting).
TEST(CpuTuning, TheProcessTuningFollowsTheEnvironment) {
    std::string warning;
    const cpu_tuning expect = tuning_for(detect_vendor(), process_tuning_env(), warning);
    EXPECT_EQ(tuning().stream_prefetch, expect.stream_prefetch);
    EXPECT_EQ(tuning().gemm_float_in_place, expect.gemm_float_in_place);
    if (const char * env = std::getenv(k_stream_prefetch_env); env != nullptr && warning.empty()) {
        EXPECT_EQ(tuning().stream_prefetch, std::strtoul(env, nullptr, 10));
    }
}

} // namespace
} // namespace tessera::cpu

// Per-processor kernel tuning (backends/cpu/ops/tuning.hpp): the defaults
// per vendor, the environment override and its refusal of bad values.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "backends/cpu/ops/tuning.hpp"

namespace tessera::cpu {
namespace {

TEST(CpuTuning, StreamPrefetchDefaultsPerVendor) {
    std::string warning = "stale";
    EXPECT_EQ(tuning_for(cpu_vendor::intel, nullptr, warning).stream_prefetch, 4096u);
    EXPECT_TRUE(warning.empty());
    EXPECT_EQ(tuning_for(cpu_vendor::amd, nullptr, warning).stream_prefetch, 0u);
    EXPECT_EQ(tuning_for(cpu_vendor::other, nullptr, warning).stream_prefetch, 0u);
    EXPECT_TRUE(warning.empty());
}

TEST(CpuTuning, TheEnvironmentOverridesTheDefault) {
    std::string warning;
    EXPECT_EQ(tuning_for(cpu_vendor::intel, "0", warning).stream_prefetch, 0u);
    EXPECT_EQ(tuning_for(cpu_vendor::amd, "8192", warning).stream_prefetch, 8192u);
    EXPECT_EQ(tuning_for(cpu_vendor::other, "65536", warning).stream_prefetch, 65536u);
    EXPECT_EQ(tuning_for(cpu_vendor::amd, "64", warning).stream_prefetch, 64u);
    EXPECT_TRUE(warning.empty()) << warning;
}

TEST(CpuTuning, BadValuesKeepTheDefaultAndSayWhy) {
    for (const char * bad : {"", "abc", "-64", " 64", "64 ", "64k", "100", "65600", "99999999999999999999999", "0x40"}) {
        std::string warning;
        EXPECT_EQ(tuning_for(cpu_vendor::intel, bad, warning).stream_prefetch, 4096u) << "'" << bad << "'";
        EXPECT_EQ(tuning_for(cpu_vendor::amd, bad, warning).stream_prefetch, 0u) << "'" << bad << "'";
        EXPECT_NE(warning.find(k_stream_prefetch_env), std::string::npos) << warning;
        EXPECT_NE(warning.find(std::string("'") + bad + "'"), std::string::npos) << warning;
        EXPECT_NE(warning.find("using 0"), std::string::npos) << warning;
    }
}

// The process's tuning is the vendor default, or the variable's value when
// it is set (ctest runs the kernel tests once with each setting).
TEST(CpuTuning, TheProcessTuningFollowsTheEnvironment) {
    std::string warning;
    const cpu_tuning expect = tuning_for(detect_vendor(), std::getenv(k_stream_prefetch_env), warning);
    EXPECT_EQ(tuning().stream_prefetch, expect.stream_prefetch);
    if (const char * env = std::getenv(k_stream_prefetch_env); env != nullptr && warning.empty()) {
        EXPECT_EQ(tuning().stream_prefetch, std::strtoul(env, nullptr, 10));
    }
}

} // namespace
} // namespace tessera::cpu

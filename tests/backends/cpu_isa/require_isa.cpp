// tests/backends/cpu_isa/require_isa.cpp — linked into the CPU op tests
// that run against the kernels compiled for one instruction-set variant
// (cpu_isa.cmake). Every test is skipped when this processor lacks one of
// the features listed in TESSERA_REQUIRE_ISA (comma-separated
// __builtin_cpu_supports names): the kernels would fault, not fail.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#ifndef TESSERA_REQUIRE_ISA
#error "TESSERA_REQUIRE_ISA must name the features the kernels were compiled for"
#endif

namespace {

// __builtin_cpu_supports needs a string literal, hence the table.
bool cpu_has(const std::string & f) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (f == "avx2") return __builtin_cpu_supports("avx2");
    if (f == "fma") return __builtin_cpu_supports("fma");
    if (f == "f16c") return __builtin_cpu_supports("f16c");
    if (f == "bmi2") return __builtin_cpu_supports("bmi2");
    if (f == "avx512f") return __builtin_cpu_supports("avx512f");
    if (f == "avx512bw") return __builtin_cpu_supports("avx512bw");
    if (f == "avx512dq") return __builtin_cpu_supports("avx512dq");
    if (f == "avx512vl") return __builtin_cpu_supports("avx512vl");
    if (f == "avx512vnni") return __builtin_cpu_supports("avx512vnni");
    if (f == "avx512bf16") return __builtin_cpu_supports("avx512bf16");
    if (f == "avx512vbmi") return __builtin_cpu_supports("avx512vbmi");
    if (f == "avxvnni") return __builtin_cpu_supports("avxvnni");
    if (f == "amx-tile") return __builtin_cpu_supports("amx-tile");
    if (f == "amx-int8") return __builtin_cpu_supports("amx-int8");
    if (f == "amx-bf16") return __builtin_cpu_supports("amx-bf16");
#endif
    return false;
}

class require_isa : public ::testing::Environment {
public:
    void SetUp() override {
        std::stringstream list(TESSERA_REQUIRE_ISA);
        std::string f;
        while (std::getline(list, f, ',')) {
            if (!cpu_has(f)) GTEST_SKIP() << "this processor lacks " << f << " (kernels built for " << TESSERA_REQUIRE_ISA << ")";
        }
    }
};

const auto * const env = ::testing::AddGlobalTestEnvironment(new require_isa);

} // namespace

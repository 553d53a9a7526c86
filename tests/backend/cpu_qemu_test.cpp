// Variant selection on other processors: the probe program runs under
// `qemu-x86_64 -cpu <model>` (Debian package qemu-user) and must pick the
// variant that model supports and compute correctly — no illegal
// instruction from scoring, static initializers or kernels.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "backend/test_support.hpp"

namespace tessera::test {
namespace {

struct run_result {
    int status = -1;
    std::string out;
};

run_result run(const std::string & cmd) {
    run_result r;
    FILE * p = popen(cmd.c_str(), "r");
    if (p == nullptr) return r;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    r.status = pclose(p);
    return r;
}

std::string quote(const std::string & s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

// Why qemu tests cannot run in this build, or "".
std::string skip_reason() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    return "sanitizer runtimes do not run under qemu-user";
#endif
#if !defined(__x86_64__)
    return "x86-64 only";
#endif
    if (!fs::exists("/usr/bin/qemu-x86_64")) return "qemu-x86_64 not installed (Debian package qemu-user)";
    if (!fs::exists(fs::path(TESSERA_BINARY_DIR) / "libtessera-cpu-x64.so")) {
        return "no CPU variant plugins (TESSERA_CPU_STATIC build)";
    }
    return "";
}

// Runs `program` (args appended) under qemu with `cpu_model`; checks it
// exits 0 without an illegal instruction and returns its output.
std::string run_under_qemu(const std::string & cpu_model, const std::string & program,
                           const std::string & env = "") {
    const std::string cmd = env + " /usr/bin/qemu-x86_64 -cpu " + cpu_model + " " + program + " 2>&1";
    const run_result r = run(cmd);
    EXPECT_TRUE(WIFEXITED(r.status)) << cmd << "\n" << r.out;
    EXPECT_EQ(WEXITSTATUS(r.status), 0) << cmd << "\n" << r.out;
    EXPECT_EQ(r.out.find("Illegal instruction"), std::string::npos) << r.out;
    return r.out;
}

void expect_variant(const std::string & cpu_model, const std::string & variant) {
    if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
    const std::string out =
        run_under_qemu(cpu_model, quote(TESSERA_PROBE_PATH) + " --gtest_brief=1",
                       "TESSERA_PROBE_PLUGIN_DIR=" + quote(TESSERA_BINARY_DIR));
    EXPECT_NE(out.find("VARIANT=" + variant + "\n"), std::string::npos) << out;
}

// Nehalem: SSE4.2 and POPCNT, no AVX.
TEST(CpuQemu, NehalemGetsSse42) { expect_variant("Nehalem", "sse42"); }

// Haswell: AVX2, FMA, F16C, BMI2 (TSX dropped: TCG does not emulate it).
TEST(CpuQemu, HaswellGetsHaswell) { expect_variant("Haswell-noTSX", "haswell"); }

// A processor with only the x86-64 baseline.
TEST(CpuQemu, BaselineGetsX64) { expect_variant("qemu64", "x64"); }

// The whole CPU op suite, through the registry, on a processor without AVX.
TEST(CpuQemu, OpSuiteOnNehalemRunsTheSse42Variant) {
#ifndef TESSERA_OPS_VIA_REGISTRY_PATH
    GTEST_SKIP() << "op suite through the registry not built";
#else
    if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
    const std::string out = run_under_qemu("Nehalem", quote(TESSERA_OPS_VIA_REGISTRY_PATH) + " --gtest_brief=1");
    EXPECT_NE(out.find("CPU ops run on variant sse42"), std::string::npos) << out;
    EXPECT_NE(out.find("[  PASSED  ]"), std::string::npos) << out;
#endif
}

} // namespace
} // namespace tessera::test

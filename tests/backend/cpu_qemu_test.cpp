// Variant selection on other processors: the probe program runs under
// `qemu-x86_64 -cpu <model>` (Debian package qemu-user) and must pick the
// variant that model supports and compute correctly — no illegal
// instruction from scoring, static initializers or kernels.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/test_support.hpp"
#include "support/run_process.hpp"

namespace tessera::test {
namespace {

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

// Runs `program --gtest_brief=1` under qemu with `cpu_model` (extra
// environment entries `env`); checks it exits 0 without an illegal
// instruction and returns its output (stdout and stderr as written).
std::string run_under_qemu(const std::string & cpu_model, const std::string & program,
                           const std::vector<std::string> & env = {}) {
    process_options opt;
    opt.env = env;
    opt.merge_stderr = true;
    const process_result r = run_process("/usr/bin/qemu-x86_64", {"-cpu", cpu_model, program, "--gtest_brief=1"}, opt);
    const std::string what = "qemu-x86_64 -cpu " + cpu_model + " " + program;
    EXPECT_EQ(r.term_signal, 0) << what << "\n" << r.out;
    EXPECT_EQ(r.exit_code, 0) << what << "\n" << r.out;
    EXPECT_EQ(r.out.find("Illegal instruction"), std::string::npos) << r.out;
    return r.out;
}

void expect_variant(const std::string & cpu_model, const std::string & variant) {
    if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
    const std::string out =
        run_under_qemu(cpu_model, TESSERA_PROBE_PATH, {std::string("TESSERA_PROBE_PLUGIN_DIR=") + TESSERA_BINARY_DIR});
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
    const std::string out = run_under_qemu("Nehalem", TESSERA_OPS_VIA_REGISTRY_PATH);
    EXPECT_NE(out.find("CPU ops run on variant sse42"), std::string::npos) << out;
    EXPECT_NE(out.find("[  PASSED  ]"), std::string::npos) << out;
#endif
}

} // namespace
} // namespace tessera::test

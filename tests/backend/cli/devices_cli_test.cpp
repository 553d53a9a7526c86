// `tessera devices` and `--list-devices` on other subcommands: exit status
// and the listing's content (runs the built tessera program).
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "support/run_process.hpp"

namespace {

using tessera::test::process_result;

// Runs the tessera program with `args` (split at spaces; no shell); out
// holds stdout and stderr as written.
process_result run(const std::string & args) {
    tessera::test::process_options opt;
    opt.merge_stderr = true;
    return tessera::test::run_process(TESSERA_EXE_PATH, tessera::test::split_args(args), opt);
}

std::string model_name() {
    std::ifstream f("/proc/cpuinfo");
    for (std::string line; std::getline(f, line);) {
        if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
    }
    return "";
}

TEST(DevicesCli, ListsTheCpuBackendAndDevice) {
    const process_result r = run("devices");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("backends (1):\n  cpu  API 1.0"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("devices (1):\n  CPU: " + model_name() + "\n    type: CPU\n"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("capabilities: buffer from host pointer"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(" VARIANT="), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(" AVX2="), std::string::npos) << r.out;
}

// The listing up to the memory line, which changes from run to run.
std::string stable_part(const std::string & s) { return s.substr(0, s.find("    memory:")); }

TEST(DevicesCli, ListDevicesFlagOnAnotherCommandExitsZero) {
    const process_result devices = run("devices");
    int checked = 0;
    for (const char * sub : {"run", "gguf"}) {
        const process_result help = run(std::string(sub) + " --help");
        if (help.out.find("--list-devices") == std::string::npos) continue; // not built
        ++checked;
        const process_result r = run(std::string(sub) + " --list-devices"); // run's -m is not required then
        EXPECT_EQ(r.exit_code, 0) << sub << "\n" << r.out;
        EXPECT_EQ(stable_part(r.out), stable_part(devices.out)) << sub;
        EXPECT_NE(r.out.find("    memory:"), std::string::npos) << r.out;
    }
    EXPECT_GE(checked, 1);
}

TEST(DevicesCli, BadFlagExitsOne) {
    const process_result r = run("devices --no-such-flag");
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_NE(r.out.find("--no-such-flag"), std::string::npos) << r.out;
}

// --runs only counts --bench's runs: without --bench it is an error naming
// both; with it, the timing line says how many runs.
TEST(DevicesCli, RunsNeedsBench) {
    process_result r = run("devices --runs 5");
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_NE(r.out.find("error: --runs needs --bench (got --runs 5 without it)"), std::string::npos) << r.out;
    r = run("devices --bench --runs 3");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("over 3 runs"), std::string::npos) << r.out;
}

} // namespace

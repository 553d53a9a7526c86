// `tessera devices` and `--list-devices` on other subcommands: exit status
// and the listing's content (runs the built tessera program).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace {

struct result {
    int exit_code = -1;
    std::string out;
};

result run(const std::string & args) {
    result r;
    const std::string cmd = std::string("'") + TESSERA_EXE_PATH + "' " + args + " 2>&1";
    FILE * p = popen(cmd.c_str(), "r");
    if (p == nullptr) return r;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    const int st = pclose(p);
    r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
}

std::string model_name() {
    std::ifstream f("/proc/cpuinfo");
    for (std::string line; std::getline(f, line);) {
        if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
    }
    return "";
}

TEST(DevicesCli, ListsTheCpuBackendAndDevice) {
    const result r = run("devices");
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
    const result devices = run("devices");
    int checked = 0;
    for (const char * sub : {"run", "gguf"}) {
        const result help = run(std::string(sub) + " --help");
        if (help.out.find("--list-devices") == std::string::npos) continue; // not built
        ++checked;
        const result r = run(std::string(sub) + " --list-devices"); // run's -m is not required then
        EXPECT_EQ(r.exit_code, 0) << sub << "\n" << r.out;
        EXPECT_EQ(stable_part(r.out), stable_part(devices.out)) << sub;
        EXPECT_NE(r.out.find("    memory:"), std::string::npos) << r.out;
    }
    EXPECT_GE(checked, 1);
}

TEST(DevicesCli, BadFlagExitsOne) {
    const result r = run("devices --no-such-flag");
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_NE(r.out.find("--no-such-flag"), std::string::npos) << r.out;
}

} // namespace

// `tessera devices` and `--list-devices` on other subcommands: exit status
// and the listing's content (runs the built tessera program).
#include <elf.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "support/run_process.hpp"
#include "support/temp_dir.hpp"

namespace {

using tessera::test::process_result;

// Runs the tessera program with `args` (split at spaces; no shell); out
// holds stdout and stderr as written.
// `env`: extra "NAME=value" entries.
process_result run(const std::string & args, std::vector<std::string> env = {}) {
    tessera::test::process_options opt;
    opt.merge_stderr = true;
    opt.env = std::move(env);
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

// The value of feature `name` in a listing ("" when absent).
std::string feature_value(const std::string & out, const std::string & name) {
    const size_t at = out.find(" " + name + "=");
    if (at == std::string::npos) return "";
    const size_t v = at + name.size() + 2;
    return out.substr(v, out.find_first_of(" \n", v) - v);
}

// The quantized GEMM runs on AMX tiles exactly where the chosen build has
// AMX-INT8 and the processor grants it (AMX_INT8=1), unless
// TESSERA_CPU_AMX=0 turns it off.
TEST(DevicesCli, AmxGemmFollowsTheProcessorAndTheSwitch) {
    const process_result on = run("devices");
    ASSERT_EQ(on.exit_code, 0) << on.out;
    const std::string amx = feature_value(on.out, "AMX_INT8");
    ASSERT_TRUE(amx == "0" || amx == "1") << on.out;
    EXPECT_EQ(feature_value(on.out, "AMX_GEMM"), amx) << on.out;
    const process_result off = run("devices", {"TESSERA_CPU_AMX=0"});
    ASSERT_EQ(off.exit_code, 0) << off.out;
    EXPECT_EQ(feature_value(off.out, "AMX_GEMM"), "0") << off.out;
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
    EXPECT_NE(r.out.find("error: tessera devices: --runs needs --bench (got --runs 5 without it) (see tessera devices --help)"), std::string::npos) << r.out;
    r = run("devices --bench --runs 3");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("over 3 runs"), std::string::npos) << r.out;
}

// A half-copied CPU plugin in TESSERA_BACKEND_PATH is refused with a
// message naming it, and the real CPU plugins beside the program are used
// (it used to kill every backend-loading command with SIGBUS in dlopen).
TEST(DevicesCli, TruncatedPluginIsRefusedAndTheOthersStillLoad) {
    namespace fs = std::filesystem;
    const fs::path plugin = fs::path(TESSERA_EXE_PATH).parent_path() / "libtessera-cpu-x64.so";
    if (!fs::exists(plugin)) GTEST_SKIP() << "no CPU plugins beside the program (TESSERA_CPU_STATIC build)";
    tessera::test::temp_dir tmp("plugins");
    const fs::path broken = tmp / "libtessera-cpu-broken.so";
    {
        std::ifstream in(plugin, std::ios::binary);
        std::string bytes(std::istreambuf_iterator<char>(in), {});
        ASSERT_GT(bytes.size(), 20000u);
        std::ofstream(broken, std::ios::binary).write(bytes.data(), 20000);
    }
    const process_result r = run("devices", {"TESSERA_BACKEND_PATH=" + tmp.path.string()});
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("backends (1):\n  cpu  API 1.0"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("tessera: backend library '" + broken.string() + "': cannot open: " +
                         broken.string() + ": truncated shared library: "),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("but the file has 20000 bytes"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("devices (1):\n  CPU: "), std::string::npos) << r.out;
}

// A full-size copy of a CPU variant zeroed from its dynamic section to the
// end (what zeroing the second half of a release build's plugin does; in a
// build with debug information the second half is debug sections) used to
// crash the program inside ld.so while the variants were scored; it is
// refused by the checks before dlopen, naming the file, and the real CPU
// plugin is loaded.
TEST(DevicesCli, ZeroedHalfOfAPluginIsRefusedAndTheOthersStillLoad) {
    namespace fs = std::filesystem;
    const fs::path plugin = fs::path(TESSERA_EXE_PATH).parent_path() / "libtessera-cpu-x64.so";
    if (!fs::exists(plugin)) GTEST_SKIP() << "no CPU plugins beside the program (TESSERA_CPU_STATIC build)";
    tessera::test::temp_dir tmp("plugins");
    const fs::path broken = tmp / "libtessera-cpu-zeroed.so";
    {
        std::ifstream in(plugin, std::ios::binary);
        std::string bytes(std::istreambuf_iterator<char>(in), {});
        Elf64_Ehdr eh;
        ASSERT_GE(bytes.size(), sizeof eh);
        std::memcpy(&eh, bytes.data(), sizeof eh);
        size_t dyn_offset = 0;
        for (size_t i = 0; i < eh.e_phnum; ++i) {
            Elf64_Phdr ph;
            ASSERT_LE(eh.e_phoff + (i + 1) * sizeof ph, bytes.size());
            std::memcpy(&ph, bytes.data() + eh.e_phoff + i * sizeof ph, sizeof ph);
            if (ph.p_type == PT_DYNAMIC) dyn_offset = ph.p_offset;
        }
        ASSERT_GT(dyn_offset, 0u);
        ASSERT_LT(dyn_offset, bytes.size());
        std::fill(bytes.begin() + std::ptrdiff_t(dyn_offset), bytes.end(), '\0');
        std::ofstream(broken, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
    }
    const process_result r = run("devices", {"TESSERA_BACKEND_PATH=" + tmp.path.string()});
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("backends (1):\n  cpu  API 1.0"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("tessera: backend library '" + broken.string() + "': cannot open: " + broken.string() +
                         ": corrupt shared library: "),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("devices (1):\n  CPU: "), std::string::npos) << r.out;
}

// Stray libtessera-cpu-*.so files with score 100 that misstate their
// identity (a reg name "bad name/../x"; no devices) are refused with a
// message naming each, and a real CPU plugin is loaded.
TEST(DevicesCli, StrayCpuLibrariesAreRefusedAndTheRealOneIsUsed) {
    namespace fs = std::filesystem;
    if (!fs::exists(fs::path(TESSERA_EXE_PATH).parent_path() / "libtessera-cpu-x64.so")) {
        GTEST_SKIP() << "no CPU plugins beside the program (TESSERA_CPU_STATIC build)";
    }
    const fs::path dir = fs::path(TESSERA_FAKE_PLUGIN_DIR) / "cpuid";
    const process_result r = run("devices", {"TESSERA_BACKEND_PATH=" + dir.string()});
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("backends (1):\n  cpu  API 1.0"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("bad name/../x  API"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("backend library '" + (dir / "libtessera-cpu-x.so").string() +
                         "': its reg's name 'bad name/../x' is not a backend name"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("backend library '" + (dir / "libtessera-cpu-nodev.so").string() +
                         "': it reports no devices"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("devices (1):\n  CPU: "), std::string::npos) << r.out;
}

// With no backend at all (the program copied alone to a folder without
// plugins), `devices` and `--list-devices` still list what they searched,
// but say so on stderr and exit 1: a script that checks for a device
// must not take an empty listing for success.
TEST(DevicesCli, NoBackendAtAllExitsOne) {
    namespace fs = std::filesystem;
    if (!fs::exists(fs::path(TESSERA_EXE_PATH).parent_path() / "libtessera-cpu-x64.so")) {
        GTEST_SKIP() << "the CPU backend is compiled in (TESSERA_CPU_STATIC build)";
    }
    tessera::test::temp_dir tmp("alone");
    const fs::path exe = tmp / "tessera";
    fs::copy_file(TESSERA_EXE_PATH, exe);
    tessera::test::process_options opt;
    opt.merge_stderr = true;
    opt.env = {"TESSERA_BACKEND_PATH=" + tmp.path.string()};
    for (const std::string args : {"devices", "gguf --list-devices"}) {
        SCOPED_TRACE(args);
        const process_result r = tessera::test::run_process(exe.string(), tessera::test::split_args(args), opt);
        EXPECT_EQ(r.exit_code, 1) << r.out;
        EXPECT_NE(r.out.find("devices (0):\n  none: no backend could be loaded (searched: " + tmp.path.string()),
                  std::string::npos)
            << r.out;
        EXPECT_NE(r.out.find("error: no compute device found: no backend could be loaded (searched: " +
                             tmp.path.string()),
                  std::string::npos)
            << r.out;
        EXPECT_NE(r.out.find("set TESSERA_BACKEND_PATH to the folder that holds libtessera-cpu-*.so"),
                  std::string::npos)
            << r.out;
    }
}

// What a plugin says (its description, feature names and values) and the
// path it was loaded from are printed escaped: a newline, terminal escape
// sequences and invalid UTF-8 reached the terminal as they were. A path's
// well-formed UTF-8 is kept.
TEST(DevicesCli, PluginStringsAndPathsArePrintedEscaped) {
    namespace fs = std::filesystem;
    tessera::test::temp_dir tmp("weird");
    const fs::path dir = tmp / "pl\u00fcg\x1b[31mins\nx";
    fs::create_directory(dir);
    const fs::path lib = dir / "libtessera-fakeweird.so";
    fs::copy_file(fs::path(TESSERA_FAKE_PLUGIN_DIR) / "weird" / "libtessera-fakeweird.so", lib);
    const process_result r = run("devices", {"TESSERA_BACKEND_PATH=" + dir.string()});
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("\xff"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("\xc0"), std::string::npos) << r.out;
    const std::string shown = tmp.path.string() + "/pl\u00fcg\\x1b[31mins\\x0ax";
    EXPECT_NE(r.out.find("  fakeweird  API 1.0  score -  " + shown + "/libtessera-fakeweird.so\n"), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("  Weird0: fake\\x0a\\x1b[2J\\x1b[31mred \\xff\\xfe device\n"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("    features: X\\x1b[31mRED=a\\x0afake line \\xc0\n"), std::string::npos) << r.out;
}

// A plugin that calls exit() in its score (exit(3)) or its init (exit(0))
// does so in the probe process: it is refused with a message naming the
// call, and `devices` lists the rest with status 0. (Where no probe can
// run, the in-process guard ends the program with status 70 instead:
// plugin_exit_test.cpp.)
TEST(DevicesCli, APluginCallingExitWhileProbedIsRefusedAndTheRestListed) {
    namespace fs = std::filesystem;
    for (const auto & [dir_name, message] :
         {std::pair<std::string, std::string>{"exitscore", "called exit(3) during tessera_backend_score() (in a probe process)"},
          {"exitinit", "called exit(0) during tessera_backend_init() (in a probe process)"}}) {
        SCOPED_TRACE(dir_name);
        const fs::path dir = fs::path(TESSERA_FAKE_PLUGIN_DIR) / dir_name;
        const process_result r = run("devices", {"TESSERA_BACKEND_PATH=" + dir.string()});
        EXPECT_EQ(r.exit_code, 0) << r.out;
        EXPECT_NE(r.out.find(message), std::string::npos) << r.out;
        EXPECT_NE(r.out.find("devices ("), std::string::npos) << r.out;
    }
}

} // namespace

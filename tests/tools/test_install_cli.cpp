// `cmake --install` (README "Installing"): the installed tree holds the
// tessera program (bin/), its backend plugins and the tessera-probe helper
// (lib/tessera/) and the C plugin ABI headers (include/tessera/), and runs
// on its own: installed with another prefix than the configured one and
// then moved, with TESSERA_BACKEND_PATH and TESSERA_PROBE_HELPER unset,
// tessera still finds its plugins and its helper relative to its own
// folder (and says so when the helper is not executable), and generates
// the same text as the build tree's tessera.
// Skipped when the tessera program is not built.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "support/run_process.hpp"

namespace {

namespace fs = std::filesystem;
using tessera::test::process_result;
using tessera::test::run_process;

const std::string build_dir = TESSERA_BINARY_DIR;
const std::string exe = build_dir + "/tessera";
const std::string stories = std::string(TESSERA_SHARED_DIR) + "/models/stories260K.gguf";

// Runs `program args` with TESSERA_BACKEND_PATH and TESSERA_PROBE_HELPER
// removed from the environment (as on a machine where tessera was just
// installed), through env(1).
process_result run_clean(const std::string & program, std::vector<std::string> args) {
    args.insert(args.begin(), {"-u", "TESSERA_BACKEND_PATH", "-u", "TESSERA_PROBE_HELPER", program});
    return run_process("/usr/bin/env", args);
}

class InstallCli : public ::testing::Test {
protected:
    void SetUp() override {
        if (!fs::exists(exe)) GTEST_SKIP() << "tessera not built";
        if (!fs::exists("/usr/bin/env")) GTEST_SKIP() << "no /usr/bin/env";
        dir = fs::temp_directory_path() / ("tessera_install_cli_" + std::to_string(::getpid()));
        fs::remove_all(dir);
        fs::create_directories(dir);
    }
    void TearDown() override {
        std::error_code ec;
        if (!dir.empty()) fs::remove_all(dir, ec);
    }
    fs::path dir;
};

TEST_F(InstallCli, AnInstalledAndMovedTreeFindsItsPluginsAndHelper) {
    const fs::path prefix = dir / "prefix";
    const auto inst = run_process(TESSERA_CMAKE_COMMAND, {"--install", build_dir, "--prefix", prefix.string()});
    ASSERT_EQ(inst.exit_code, 0) << inst.out << inst.err;

    // Moved after installing: nothing may depend on the prefix given.
    const fs::path root = dir / "moved";
    fs::rename(prefix, root);
    const fs::path plugins = root / "lib" / "tessera";
    ASSERT_TRUE(fs::is_regular_file(root / "bin" / "tessera"));
    ASSERT_TRUE(fs::is_regular_file(plugins / "tessera-probe"));
    bool any_plugin = false;
    for (const auto & e : fs::directory_iterator(plugins)) {
        any_plugin = any_plugin || e.path().filename().string().rfind("libtessera-cpu", 0) == 0;
    }
    EXPECT_TRUE(any_plugin) << "no CPU plugin in " << plugins;

    // The helper wrapped by a script that leaves a mark, then runs it.
    const fs::path helper = plugins / "tessera-probe";
    fs::rename(helper, plugins / "tessera-probe.real");
    const fs::path mark = dir / "helper-ran";
    {
        std::ofstream s(helper);
        s << "#!/bin/sh\n: > '" << mark.string() << "'\nexec \"$0.real\" \"$@\"\n";
    }
    ASSERT_EQ(::chmod(helper.c_str(), 0755), 0);

    const std::string installed = (root / "bin" / "tessera").string();
    const auto dev = run_clean(installed, {"devices"});
    ASSERT_EQ(dev.exit_code, 0) << dev.out << dev.err;
    // The loaded CPU backend is one of the installed plugins.
    const std::string loaded = "cpu  API ";
    const size_t line = dev.out.find(loaded);
    ASSERT_NE(line, std::string::npos) << dev.out;
    const std::string first = dev.out.substr(line, dev.out.find('\n', line) - line);
    EXPECT_NE(first.find(plugins.string() + "/libtessera-cpu"), std::string::npos) << dev.out;
    EXPECT_TRUE(fs::exists(mark)) << "the installed tessera-probe was not used\n" << dev.err;
    EXPECT_EQ(dev.err, "");

    // A helper that is not executable is named, and the probe still runs
    // (in a fork of tessera).
    ASSERT_EQ(::chmod(helper.c_str(), 0644), 0);
    fs::remove(mark);
    const auto noexec = run_clean(installed, {"devices"});
    EXPECT_EQ(noexec.exit_code, 0) << noexec.err;
    EXPECT_EQ(noexec.err, "tessera: plugin probe helper '" + helper.string() +
                              "' is not executable; backend libraries are probed in a fork of this process instead\n");
    EXPECT_FALSE(fs::exists(mark));
    ASSERT_EQ(::chmod(helper.c_str(), 0755), 0);

    // The same greedy text as the build tree's program.
    const std::vector<std::string> gen = {"run", "-m", stories, "-p", "Once upon a time", "-n", "24", "--temp", "0", "-t", "1"};
    const auto a = run_clean(installed, gen);
    ASSERT_EQ(a.exit_code, 0) << a.err;
    auto b_args = gen;
    b_args.insert(b_args.begin(), {"TESSERA_BACKEND_PATH=" + build_dir, exe});
    const auto b = run_process("/usr/bin/env", b_args);
    ASSERT_EQ(b.exit_code, 0) << b.err;
    EXPECT_GT(a.out.size(), std::string("Once upon a time").size());
    EXPECT_EQ(a.out, b.out);

    // Without its plugin folder it says where it looked, the missing
    // install folder included.
    fs::rename(plugins, root / "lib" / "tessera.off");
    const auto none = run_clean(installed, {"devices"});
    EXPECT_EQ(none.exit_code, 1);
    EXPECT_NE(none.err.find(plugins.string() + " (missing)"), std::string::npos) << none.err;
    const auto none_run = run_clean(installed, {"run", "-m", stories, "-p", "x", "-n", "1"});
    EXPECT_EQ(none_run.exit_code, 1);
    EXPECT_NE(none_run.err.find(plugins.string() + " (missing)"), std::string::npos) << none_run.err;
    fs::rename(root / "lib" / "tessera.off", plugins);

    // The C ABI headers are installed and compile on their own as C.
    ASSERT_TRUE(fs::is_regular_file(root / "include" / "tessera" / "backend.h"));
    ASSERT_TRUE(fs::is_regular_file(root / "include" / "tessera" / "tensor.h"));
    const fs::path src = dir / "uses_abi.c";
    {
        std::ofstream s(src);
        s << "#include <tessera/backend.h>\nint tsr_check_major(void) { return TSR_BACKEND_API_MAJOR; }\n";
    }
    const auto cc = run_process(TESSERA_C_COMPILER, {"-std=c99", "-Wall", "-Werror", "-fsyntax-only", "-I",
                                                     (root / "include").string(), src.string()});
    EXPECT_EQ(cc.exit_code, 0) << cc.out << cc.err;
}

// A program built against the installed CMake package (find_package(tessera),
// tessera::llm; tests/tools/consumer) loads the model through the API and
// generates the same greedy text as `tessera run`, with the installed CPU
// plugins (the package's tessera_PLUGIN_DIR: the program is not in the
// install tree). The package requires C++20 itself (the consumer sets no
// standard) and has components; backend/cpu.hpp (the compiled-in CPU
// backend, not installed) is left out.
TEST_F(InstallCli, AProgramBuiltAgainstTheInstalledPackageGenerates) {
    const fs::path prefix = dir / "prefix";
    const auto inst = run_process(TESSERA_CMAKE_COMMAND, {"--install", build_dir, "--prefix", prefix.string()});
    ASSERT_EQ(inst.exit_code, 0) << inst.out << inst.err;
    for (const char * f : {"lib/cmake/tessera/tesseraConfig.cmake", "lib/cmake/tessera/tesseraConfigVersion.cmake",
                           "lib/libtessera_llm.a", "include/tessera/llm/session.hpp"}) {
        EXPECT_TRUE(fs::is_regular_file(prefix / f)) << f;
    }
    EXPECT_FALSE(fs::exists(prefix / "include/tessera/backend/cpu.hpp"));
    const fs::path cb = dir / "consumer-build";
    const std::string flags = TESSERA_SANITIZE_FLAGS;
    std::vector<std::string> configure = {"-S", TESSERA_CONSUMER_DIR, "-B", cb.string(), "-G", TESSERA_CMAKE_GENERATOR,
                                          "-DCMAKE_PREFIX_PATH=" + prefix.string(),
                                          "-DCMAKE_CXX_COMPILER=" + std::string(TESSERA_CXX_COMPILER),
                                          "-DCMAKE_BUILD_TYPE=Release"};
    if (!std::string(TESSERA_MAKE_PROGRAM).empty()) configure.push_back("-DCMAKE_MAKE_PROGRAM=" + std::string(TESSERA_MAKE_PROGRAM));
    if (!flags.empty()) {
        configure.push_back("-DCMAKE_CXX_FLAGS=" + flags);
        configure.push_back("-DCMAKE_EXE_LINKER_FLAGS=" + flags);
    }
    const auto conf = run_process(TESSERA_CMAKE_COMMAND, configure);
    ASSERT_EQ(conf.exit_code, 0) << conf.out << conf.err;
    const auto build = run_process(TESSERA_CMAKE_COMMAND, {"--build", cb.string()});
    ASSERT_EQ(build.exit_code, 0) << build.out << build.err;

    const auto a = run_clean((cb / "consumer").string(), {stories, "Once upon a time", "24"});
    ASSERT_EQ(a.exit_code, 0) << a.err;
    const auto b = run_process("/usr/bin/env", {"TESSERA_BACKEND_PATH=" + build_dir, exe, "run", "-m", stories, "-p",
                                                "Once upon a time", "-n", "24", "--temp", "0", "-t", "1"});
    ASSERT_EQ(b.exit_code, 0) << b.err;
    EXPECT_GT(a.out.size(), std::string("Once upon a time").size());
    EXPECT_EQ(a.out, b.out);
}

} // namespace

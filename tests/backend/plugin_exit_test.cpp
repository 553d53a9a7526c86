// A plugin that calls exit() while it is being loaded ends the program with
// status 70 and a message naming the library and the call (it ended the
// program with the plugin's status, 0 included, and no word).
#include <gtest/gtest.h>

#include <string>

#include "backend/plugin_exit_guard.hpp"
#include "backend/test_support.hpp"

namespace tessera::test {
namespace {

// `s` as a POSIX extended regular expression that matches it literally.
std::string regex_quote(const std::string & s) {
    std::string out;
    for (char c : s) {
        if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
        out += c;
    }
    return out;
}

std::string exit_message(const fs::path & lib, const std::string & called, const std::string & during) {
    return "error: backend library '" + lib.string() + "' called " + called + " during " + during +
           "; a backend must report a failure by returning, not end the program";
}

class PluginExit : public ::testing::Test {
protected:
    void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(PluginExit, ExitZeroInInitIsAnError) {
    const fs::path lib = fake_plugin("exitinit", "libtessera-fakeexit");
    EXPECT_EXIT(
        {
            registry reg;
            reg.load(lib);
        },
        ::testing::ExitedWithCode(detail::plugin_exit_status),
        regex_quote(exit_message(lib, "exit(0)", "tessera_backend_init()")));
}

// While variants are scored by load_best; the status is named.
TEST_F(PluginExit, ExitInScoreIsAnError) {
    const fs::path lib = fake_plugin("exitscore", "libtessera-fakeexitscore-v");
    EXPECT_EXIT(
        {
            registry reg;
            reg.load_best("fakeexitscore", fake_dir("exitscore"));
        },
        ::testing::ExitedWithCode(detail::plugin_exit_status),
        regex_quote(exit_message(lib, "exit(3)", "tessera_backend_score()")));
}

// In a constructor that dlopen runs.
TEST_F(PluginExit, ExitInAConstructorIsAnError) {
    const fs::path lib = fake_plugin("exitctor", "libtessera-fakeexitctor");
    EXPECT_EXIT(
        {
            registry reg;
            reg.load(lib);
        },
        ::testing::ExitedWithCode(detail::plugin_exit_status),
        regex_quote(exit_message(lib, "exit(4)", "its initializers (run by dlopen)")));
}

// An exit() outside a call into a plugin, after one was loaded, keeps its
// status and says nothing.
TEST_F(PluginExit, OrdinaryExitAfterLoadingIsUntouched) {
    EXPECT_EXIT(
        {
            registry reg;
            reg.load(fake_plugin("gpu", "libtessera-fakegpu"));
            std::exit(0);
        },
        ::testing::ExitedWithCode(0), "^$");
    EXPECT_EXIT(
        {
            registry reg;
            reg.load(fake_plugin("gpu", "libtessera-fakegpu"));
            std::exit(5);
        },
        ::testing::ExitedWithCode(5), "^$");
}

} // namespace
} // namespace tessera::test

// run_process (tests/support/run_process.hpp): exit codes, separate and
// merged capture, large output on both pipes at once, environment, stdin,
// time-out, a program that cannot start. The programs are /bin/sh scripts.
#include <gtest/gtest.h>

#include <csignal>
#include <string>

#include "support/run_process.hpp"

namespace tessera::test {
namespace {

process_result sh(const std::string & script, const process_options & opt = {}) {
    return run_process("/bin/sh", {"-c", script}, opt);
}

TEST(RunProcess, ExitCodeAndSeparateStreams) {
    const process_result r = sh("printf 'to out'; printf 'to err' >&2; exit 3");
    EXPECT_EQ(r.exit_code, 3);
    EXPECT_EQ(r.term_signal, 0);
    EXPECT_FALSE(r.timed_out);
    EXPECT_EQ(r.out, "to out");
    EXPECT_EQ(r.err, "to err");
}

TEST(RunProcess, ArgumentsArePassedWithoutAShell) {
    // One argument with spaces and shell characters arrives as it is.
    const process_result r = run_process("/bin/sh", {"-c", "printf '%s|' \"$@\"", "sh", "a b", "$HOME;*", ""});
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_EQ(r.out, "a b|$HOME;*||");
}

TEST(RunProcess, MergedStderrKeepsTheOrder) {
    process_options opt;
    opt.merge_stderr = true;
    const process_result r = sh("echo one; echo two >&2; echo three", opt);
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_EQ(r.out, "one\ntwo\nthree\n");
    EXPECT_EQ(r.err, "");
}

// 4 MiB to stderr, then 4 MiB to stdout, then stderr again: far beyond a
// pipe's buffer, so reading only one stream at a time would deadlock.
TEST(RunProcess, LargeOutputOnBothStreamsDoesNotBlock) {
    process_options opt;
    opt.timeout_s = 60;
    const process_result r =
        sh("head -c 4194304 /dev/zero | tr '\\0' e >&2; head -c 4194304 /dev/zero | tr '\\0' o; echo done >&2", opt);
    EXPECT_FALSE(r.timed_out);
    EXPECT_EQ(r.exit_code, 0);
    ASSERT_EQ(r.out.size(), 4194304u);
    EXPECT_EQ(r.out.find_first_not_of('o'), std::string::npos);
    ASSERT_EQ(r.err.size(), 4194304u + 5);
    EXPECT_EQ(r.err.substr(4194304), "done\n");
    EXPECT_EQ(r.err.find_first_not_of('e'), 4194304u);
}

TEST(RunProcess, EnvironmentEntriesAddAndReplace) {
    process_options opt;
    opt.env = {"TSR_RUN_PROCESS_A=1", "HOME=/nowhere"};
    const process_result r = sh("printf '%s %s' \"$TSR_RUN_PROCESS_A\" \"$HOME\"", opt);
    EXPECT_EQ(r.out, "1 /nowhere");
}

TEST(RunProcess, StdinIsEmpty) {
    const process_result r = sh("cat; echo done");
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_EQ(r.out, "done\n");
}

TEST(RunProcess, KilledBySignal) {
    const process_result r = sh("kill -TERM $$");
    EXPECT_EQ(r.exit_code, -1);
    EXPECT_EQ(r.term_signal, SIGTERM);
}

TEST(RunProcess, TimeOutKillsTheProgram) {
    process_options opt;
    opt.timeout_s = 1;
    const process_result r = sh("echo started; exec sleep 30", opt);
    EXPECT_TRUE(r.timed_out);
    EXPECT_EQ(r.exit_code, -1);
    EXPECT_EQ(r.term_signal, SIGKILL);
    EXPECT_EQ(r.out, "started\n");
}

TEST(RunProcess, MissingProgramIsReported) {
    const process_result r = run_process("/nonexistent/program", {"x"});
    EXPECT_EQ(r.exit_code, -1);
    EXPECT_EQ(r.term_signal, 0);
    EXPECT_NE(r.err.find("/nonexistent/program: cannot start: No such file or directory"), std::string::npos) << r.err;
}

TEST(SplitArgs, SplitsAtRunsOfSpaces) {
    EXPECT_EQ(split_args("  gguf info   /a/b.gguf --json "), (std::vector<std::string>{"gguf", "info", "/a/b.gguf", "--json"}));
    EXPECT_TRUE(split_args("").empty());
    EXPECT_TRUE(split_args("   ").empty());
}

} // namespace
} // namespace tessera::test

// tests/tools/test_compare_reference.cpp — scripts/compare_reference.py,
// which alternates `tessera bench` and the reference's llama-bench, run
// against a stand-in for llama-bench (a shell script printing fixed JSON in
// llama-bench's field names and recording its arguments): the options reach
// both tools, the table's ratio is tessera's tokens/s over the reference's,
// and a failing tool or bad arguments give a non-zero exit naming the cause.

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "support/run_process.hpp"

namespace fs = std::filesystem;
using tessera::test::process_options;
using tessera::test::process_result;
using tessera::test::run_process;

namespace {

const std::string k_stories = std::string(TESSERA_SHARED_DIR) + "/models/stories260K.gguf";
const std::string k_script = std::string(TESSERA_SCRIPTS_DIR) + "/compare_reference.py";
const std::string k_tessera = std::string(TESSERA_BINARY_DIR) + "/tessera";

class CompareReference : public ::testing::Test {
protected:
    fs::path dir;
    void SetUp() override {
        ASSERT_FALSE(std::string(TESSERA_PYTHON3).empty()) << "python3 was not found when configuring; scripts/install-deps.sh installs it";
        dir = fs::temp_directory_path() / ("tessera_compare_reference_" + std::to_string(::getpid()));
        fs::remove_all(dir);
        fs::create_directories(dir);
    }
    void TearDown() override { fs::remove_all(dir); }

    // An executable shell script at dir/name with the given body.
    std::string script(const std::string & name, const std::string & body) {
        const fs::path p = dir / name;
        std::ofstream(p) << "#!/bin/sh\n" << body;
        fs::permissions(p, fs::perms::owner_all);
        return p.string();
    }

    process_result compare(const std::vector<std::string> & args) {
        std::vector<std::string> a = {k_script};
        a.insert(a.end(), args.begin(), args.end());
        process_options opt;
        opt.env = {"TESSERA_BACKEND_PATH=" + std::string(TESSERA_BINARY_DIR)};
        return run_process(TESSERA_PYTHON3, a, opt);
    }
};

// The table row of `test` split at '|' into its trimmed cells.
std::vector<std::string> row_of(const std::string & table, const std::string & test) {
    std::istringstream in(table);
    for (std::string line; std::getline(in, line);) {
        std::vector<std::string> cells;
        std::istringstream l(line);
        for (std::string c; std::getline(l, c, '|');) {
            const size_t b = c.find_first_not_of(' '), e = c.find_last_not_of(' ');
            cells.push_back(b == std::string::npos ? "" : c.substr(b, e - b + 1));
        }
        if (cells.size() >= 8 && cells[3] == test) return cells;
    }
    return {};
}

} // namespace

TEST_F(CompareReference, RatioIsTesseraOverTheReferenceForEveryTest) {
    // The stand-in reports 100 t/s for the prompt and 50 t/s for generation
    // and appends its arguments to a file.
    const std::string args_log = (dir / "args.txt").string();
    const std::string fake = script("llama-bench", "echo \"$@\" >> '" + args_log + "'\n" +
                                                       "echo '[{\"n_prompt\": 16, \"n_gen\": 0, \"n_depth\": 0, \"avg_ts\": 100.0},"
                                                       " {\"n_prompt\": 0, \"n_gen\": 4, \"n_depth\": 0, \"avg_ts\": 50.0}]'\n");
    const auto r = compare({"--llama-bench", fake, "--tessera", k_tessera, "-p", "16", "-n", "4", "-t", "1", "-r", "1",
                            "--rounds", "2", k_stories});
    ASSERT_EQ(r.exit_code, 0) << r.err;

    // Both rounds ran the reference with the options given.
    std::ifstream log(args_log);
    std::string line;
    int calls = 0;
    while (std::getline(log, line)) {
        EXPECT_EQ(line, "-m " + k_stories + " -t 1 -p 16 -n 4 -r 1 -o json");
        ++calls;
    }
    EXPECT_EQ(calls, 2);

    for (const auto & [test, ref] : {std::pair<std::string, double>{"pp16", 100.0}, {"tg4", 50.0}}) {
        const auto cells = row_of(r.out, test);
        ASSERT_FALSE(cells.empty()) << "no row for " << test << " in\n" << r.out;
        EXPECT_EQ(cells[1], "stories260K.gguf");
        EXPECT_EQ(cells[2], "1");
        const double ours = std::stod(cells[4]), theirs = std::stod(cells[5]), ratio = std::stod(cells[6]);
        EXPECT_GT(ours, 0.0);
        EXPECT_DOUBLE_EQ(theirs, ref);
        // With two rounds the median of the ratios is their mean, which is
        // the median (mean) of tessera's figures over the constant reference;
        // both are printed to 2 decimals.
        EXPECT_NEAR(ratio, ours / ref, 0.01 + 0.005 / ref) << r.out;
        std::istringstream per_round(cells[7]);
        double a = 0, b = 0;
        ASSERT_TRUE(per_round >> a >> b) << cells[7];
        EXPECT_NEAR((a + b) / 2, ratio, 0.011);
    }
}

TEST_F(CompareReference, AFailingReferenceRunIsNamedWithItsErrorOutput) {
    const std::string fake = script("llama-bench", "echo 'boom: cannot load model' >&2\nexit 3\n");
    const auto r = compare({"--llama-bench", fake, "--tessera", k_tessera, "-p", "16", "-n", "4", "-t", "1", "-r", "1",
                            "--rounds", "1", k_stories});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find(fake + " -m " + k_stories), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("exit status 3"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("boom: cannot load model"), std::string::npos) << r.err;
}

TEST_F(CompareReference, ReferenceOutputThatIsNotJsonIsRefused) {
    const std::string fake = script("llama-bench", "echo '| model | size |'\n");
    const auto r = compare({"--llama-bench", fake, "--tessera", k_tessera, "-p", "16", "-n", "4", "-t", "1", "-r", "1",
                            "--rounds", "1", k_stories});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("its output is not JSON"), std::string::npos) << r.err;
}

TEST_F(CompareReference, BadArgumentsAreRefusedBeforeAnythingRuns) {
    const std::string args_log = (dir / "args.txt").string();
    const std::string fake = script("llama-bench", "echo ran >> '" + args_log + "'\n");
    const struct {
        std::vector<std::string> args;
        std::string says;
    } cases[] = {
        {{"--llama-bench", fake, (dir / "missing.gguf").string()}, "is not a file"},
        {{"--llama-bench", (dir / "none").string(), k_stories}, "is not an executable file"},
        {{"--llama-bench", fake, "-t", "1,x", k_stories}, "is not a comma-separated list"},
        {{"--llama-bench", fake, "-t", "0", k_stories}, "is not a comma-separated list"},
        {{"--llama-bench", fake, "--rounds", "0", k_stories}, "--rounds must be at least 1"},
        {{"--llama-bench", fake}, "MODEL"},
    };
    for (const auto & c : cases) {
        std::vector<std::string> args = c.args;
        args.insert(args.begin(), {"--tessera", k_tessera});
        const auto r = compare(args);
        EXPECT_EQ(r.exit_code, 2) << r.err;
        EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    }
    EXPECT_FALSE(fs::exists(args_log)) << "the reference ran despite bad arguments";
}

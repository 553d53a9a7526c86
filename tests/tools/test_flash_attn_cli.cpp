// The fused-attention switches of the command line: `tessera bench -fa 0,1`
// (one table row / JSON object per value, "flash_attn" as used) and
// `tessera run --flash-attn on|off|auto` (reported on stderr, greedy output
// the same either way); bad values exit 1 with a message naming the option.
// Skipped when the tessera program is not built.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "support/run_process.hpp"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string vocab = std::string(TESSERA_SHARED_DIR) + "/vocab/ggml-vocab-llama-spm.gguf";
const std::string stories = std::string(TESSERA_SHARED_DIR) + "/models/stories260K.gguf";

bool have_tessera() { return fs::exists(fs::path(TESSERA_BINARY_DIR) / "tessera"); }

tessera::test::process_result run_tessera(const std::string & args) {
    auto r = tessera::test::run_process(std::string(TESSERA_BINARY_DIR) + "/tessera", tessera::test::split_args(args));
    EXPECT_EQ(r.err.find("Sanitizer"), std::string::npos) << args << "\n" << r.err;
    EXPECT_EQ(r.err.find("runtime error:"), std::string::npos) << args << "\n" << r.err;
    return r;
}

struct temp_model {
    fs::path dir = fs::temp_directory_path() / ("tessera_fa_cli_" + std::to_string(::getpid()));
    std::string path = (dir / "m.gguf").string();
    temp_model() {
        fs::remove_all(dir);
        fs::create_directories(dir);
    }
    ~temp_model() { fs::remove_all(dir); }
};

TEST(FlashAttnCli, BenchRunsEachValue) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    temp_model m;
    ASSERT_EQ(run_tessera("gguf synth -q --preset tiny --type Q8_0 --vocab " + vocab + " -o " + m.path).exit_code, 0);
    auto r = run_tessera("bench -m " + m.path + " -p 6 -n 2 -t 1 -r 1 -fa 0,1 -o json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json j = json::parse(r.out);
    ASSERT_EQ(j.size(), 4u); // (fa 0: pp, tg), (fa 1: pp, tg)
    EXPECT_EQ(j[0]["flash_attn"], false);
    EXPECT_EQ(j[1]["flash_attn"], false);
    EXPECT_EQ(j[2]["flash_attn"], true);
    EXPECT_EQ(j[3]["flash_attn"], true);
    EXPECT_EQ(j[2]["test"], "pp6");

    // Markdown: an "fa" column after "threads" when -fa is given.
    r = run_tessera("bench -m " + m.path + " -p 4 -n 0 -t 1 -r 1 --flash-attn 1");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("| threads | fa |"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("|  1 | "), std::string::npos) << r.out;

    r = run_tessera("bench -m " + m.path + " -p 4 -n 0 -fa 2");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("-fa '2': '2' is not 0, 1, off, on or auto"), std::string::npos) << r.err;
}

TEST(FlashAttnCli, RunOnOffSameGreedyText) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    const std::string base = "run -m " + stories + " -p Once -n 12 --temp 0 -t 2 --flash-attn ";
    const auto on = run_tessera(base + "on");
    const auto off = run_tessera(base + "off");
    ASSERT_EQ(on.exit_code, 0) << on.err;
    ASSERT_EQ(off.exit_code, 0) << off.err;
    EXPECT_EQ(on.out, off.out);
    EXPECT_NE(on.err.find("flash attention on"), std::string::npos) << on.err;
    EXPECT_NE(off.err.find("flash attention off"), std::string::npos) << off.err;
    const auto bad = run_tessera(base + "maybe");
    EXPECT_EQ(bad.exit_code, 1);
    EXPECT_NE(bad.err.find("--flash-attn"), std::string::npos) << bad.err;
}

} // namespace

// The repacked weight layout from the command line (issue 6): `tessera
// devices` lists CPU_REPACK, `tessera run --repack on|off` generates the
// same greedy text, `tessera bench --rp 0,1` runs both and says which in
// its table and JSON ("repack"; -rp is accepted too), and bad values exit
// 1 naming the flag; run says how many matrices it placed in CPU_REPACK.
// Uses a Q4_0 synth model of the "tiny" preset written by `tessera gguf
// synth`. Skipped when the tessera program is not built.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "support/run_process.hpp"
#include "tessera/gguf/reader.hpp"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string exe = std::string(TESSERA_BINARY_DIR) + "/tessera";
const std::string vocab = std::string(TESSERA_SHARED_DIR) + "/vocab/ggml-vocab-llama-spm.gguf";
const std::string stories = std::string(TESSERA_SHARED_DIR) + "/models/stories260K.gguf";

// The line `tessera run` prints at load when every MUL_MAT matrix went to
// CPU_REPACK, worked out from the file itself: the 2-D tensors are the
// weight matrices; all but token_embd.weight (read by GET_ROWS; the
// models here have an output.weight) are the MUL_MAT ones; their bytes.
std::string expected_repack_line(const std::string & path) {
    const tessera::gguf::reader r(path);
    size_t n_matrices = 0, n_mul_mat = 0;
    uint64_t bytes = 0;
    for (const auto & ti : r.tensors()) {
        if (ti.n_dims != 2) continue;
        ++n_matrices;
        if (ti.name == "token_embd.weight") continue;
        ++n_mul_mat;
        bytes += ti.size;
    }
    EXPECT_NE(r.find_tensor("output.weight"), nullptr) << path;
    return fmt::format("repack: {} of {} weight matrices in CPU_REPACK ({:.2f} MiB)\n", n_mul_mat, n_matrices,
                       double(bytes) / (1024.0 * 1024.0));
}

tessera::test::process_result run(const std::string & args) {
    auto r = tessera::test::run_process(exe, tessera::test::split_args(args));
    EXPECT_EQ(r.err.find("Sanitizer"), std::string::npos) << args << "\n" << r.err;
    EXPECT_EQ(r.err.find("runtime error:"), std::string::npos) << args << "\n" << r.err;
    return r;
}

class RepackCli : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        if (!fs::exists(exe)) return;
        dir = fs::temp_directory_path() / ("tessera_repack_cli_" + std::to_string(::getpid()));
        fs::create_directories(dir);
        model = (dir / "tiny-q4.gguf").string();
        const auto r = run("gguf synth --preset tiny --type Q4_0 --vocab " + vocab + " -o " + model);
        ASSERT_EQ(r.exit_code, 0) << r.err;
    }
    static void TearDownTestSuite() {
        std::error_code ec;
        if (!dir.empty()) fs::remove_all(dir, ec);
    }
    void SetUp() override {
        if (!fs::exists(exe)) GTEST_SKIP() << "tessera not built";
    }
    static inline fs::path dir;
    static inline std::string model;
};

TEST_F(RepackCli, DevicesListTheRepackBufferType) {
    const auto r = run("devices");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("buffer types: CPU, CPU_REPACK"), std::string::npos) << r.out;
}

TEST_F(RepackCli, RunGivesTheSameGreedyTextWithRepackOnAndOff) {
    const std::string base = "run -m " + model + " -p Once -n 12 --temp 0 -t 2 --repack ";
    const auto on = run(base + "on");
    const auto off = run(base + "off");
    ASSERT_EQ(on.exit_code, 0) << on.err;
    ASSERT_EQ(off.exit_code, 0) << off.err;
    EXPECT_FALSE(on.out.empty());
    EXPECT_EQ(on.out, off.out);
}

// run says at load how many weight matrices went to CPU_REPACK: all the
// MUL_MAT ones with --repack on (stories260K: 5 x 7 + output.weight = 36 of
// 37), none with --repack off.
TEST_F(RepackCli, RunPrintsHowManyMatricesWentToCpuRepack) {
    for (const std::string & path : {stories, model}) {
        SCOPED_TRACE(path);
        const std::string want = expected_repack_line(path);
        if (path == stories) EXPECT_EQ(want, "repack: 36 of 37 weight matrices in CPU_REPACK (0.99 MiB)\n");
        const auto on = run("run -m " + path + " -p Once -n 2 --temp 0 -t 1");
        ASSERT_EQ(on.exit_code, 0) << on.err;
        EXPECT_NE(on.err.find(want), std::string::npos) << on.err;
        const auto off = run("run -m " + path + " -p Once -n 2 --temp 0 -t 1 --repack off");
        ASSERT_EQ(off.exit_code, 0) << off.err;
        const std::string n_matrices = want.substr(want.find(" of ") + 4, want.find(" weight") - want.find(" of ") - 4);
        EXPECT_NE(off.err.find("repack: 0 of " + n_matrices + " weight matrices in CPU_REPACK (--repack off)\n"),
                  std::string::npos)
            << off.err;
    }
}

TEST_F(RepackCli, BadRepackValuesExitOneNamingTheFlag) {
    const auto r = run("run -m " + model + " -p Once -n 1 --repack maybe");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE((r.out + r.err).find("--repack"), std::string::npos) << r.out << r.err;
    const auto b = run("bench -m " + model + " -p 8 -n 0 -r 1 --rp 0,2");
    EXPECT_EQ(b.exit_code, 1);
    EXPECT_NE(b.err.find("error: tessera bench: -rp 2: expected 0 (off) or 1 (on) (see tessera bench --help)"), std::string::npos) << b.err;
}

TEST_F(RepackCli, BenchRunsBothLayoutsAndReportsWhich) {
    const auto r = run("bench -m " + model + " -p 8 -n 2 -r 1 -t 1 --rp 0,1 -o json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json j = json::parse(r.out);
    ASSERT_EQ(j.size(), 4u); // (pp8, tg2) x (rp 0, rp 1)
    int on = 0, off = 0;
    for (const auto & t : j) {
        ASSERT_TRUE(t.contains("repack"));
        (t["repack"].get<bool>() ? on : off) += 1;
        EXPECT_GT(t["avg_ts"].get<double>(), 0.0);
    }
    EXPECT_EQ(on, 2);
    EXPECT_EQ(off, 2);
    const auto md = run("bench -m " + model + " -p 8 -n 0 -r 1 -t 1 -rp 1"); // llama-bench's spelling
    ASSERT_EQ(md.exit_code, 0) << md.err;
    EXPECT_NE(md.out.find(" rp |"), std::string::npos) << md.out;
}

} // namespace

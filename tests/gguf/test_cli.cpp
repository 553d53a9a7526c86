// `tessera gguf info`: text and JSON output on real files, exit code 1 with a
// clear message on bad input. Skipped when the tessera program is not built.
#include <gtest/gtest.h>

#include <unistd.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gguf/gguf_bytes.hpp"
#include "support/run_process.hpp"

using namespace tessera::test;
namespace fs = std::filesystem;

namespace {

// Runs the program with `args` (no shell); stdout and stderr captured apart.
process_result run_tessera(const std::vector<std::string> & args) {
    return run_process(std::string(TESSERA_BINARY_DIR) + "/tessera", args);
}

bool have_tessera() { return fs::exists(fs::path(TESSERA_BINARY_DIR) / "tessera"); }

} // namespace

TEST(GgufCli, InfoText) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    const auto r = run_tessera({"gguf", "info", (shared_dir() / "models" / "stories260K.gguf").string()});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("GGUF version 3, alignment 32, data offset 14176"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("[STRING x 512] ['<unk>', '<s>', '</s>', '<0x00>'"), std::string::npos);
    EXPECT_NE(r.out.find("tensors: 48"), std::string::npos);
    EXPECT_NE(r.out.find("292800 elements, 1171200 bytes of tensor data"), std::string::npos);
}

TEST(GgufCli, InfoJson) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    const auto r = run_tessera({"gguf", "info", "--json", (shared_dir() / "models" / "llama-2-tiny-random.gguf").string()});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["version"], 3);
    EXPECT_EQ(j["alignment"], 32);
    EXPECT_EQ(j["data_offset"], 724416);
    ASSERT_EQ(j["metadata"].size(), 18u);
    EXPECT_EQ(j["metadata"][0]["key"], "general.architecture");
    EXPECT_EQ(j["metadata"][0]["value"], "llama");
    const auto & tokens = j["metadata"][12];
    EXPECT_EQ(tokens["key"], "tokenizer.ggml.tokens");
    EXPECT_EQ(tokens["element_type"], "STRING");
    EXPECT_EQ(tokens["length"], 32000);
    EXPECT_EQ(tokens["truncated"], true);
    EXPECT_EQ(tokens["value"].size(), 8u);
    ASSERT_EQ(j["tensors"].size(), 12u);
    EXPECT_EQ(j["tensors"][0]["name"], "token_embd.weight");
    EXPECT_EQ(j["tensors"][0]["type"], "F16");
    EXPECT_EQ(j["tensors"][0]["ne"], nlohmann::json::array({8, 32000}));
    EXPECT_EQ(j["tensors"][0]["size"], 512000);
}

TEST(GgufCli, BadInputExitsOne) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    auto r = run_tessera({"gguf", "info", "/nonexistent/file.gguf"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("error: gguf: /nonexistent/file.gguf: cannot open"), std::string::npos) << r.err;
    // A truncated copy of a real file.
    char templ[] = "/tmp/tessera_cli_XXXXXX";
    const int fd = ::mkstemp(templ);
    ASSERT_GE(fd, 0);
    const auto bytes = read_file(shared_dir() / "models" / "stories260K.gguf");
    ASSERT_EQ(::write(fd, bytes.data(), 5000), 5000);
    ::close(fd);
    r = run_tessera({"gguf", "info", templ});
    ::unlink(templ);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("truncated file"), std::string::npos) << r.err;
    r = run_tessera({"gguf", "info"});
    EXPECT_EQ(r.exit_code, 1);
}

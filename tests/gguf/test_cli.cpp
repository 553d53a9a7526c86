// `tessera gguf info`: text and JSON output on real files, exit code 1 with a
// clear message on bad input. Skipped when the tessera program is not built.
#include <gtest/gtest.h>

#include <cstdio>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "gguf/gguf_bytes.hpp"

using namespace tessera::test;
namespace fs = std::filesystem;

namespace {

struct run_result {
    int status = -1;
    std::string out;
};

// Runs the program with `args` (stderr merged into stdout).
run_result run_tessera(const std::string & args) {
    run_result r;
    const std::string cmd = std::string(TESSERA_BINARY_DIR) + "/tessera " + args + " 2>&1";
    FILE * p = ::popen(cmd.c_str(), "r");
    if (p == nullptr) return r;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    const int st = ::pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
}

bool have_tessera() { return fs::exists(fs::path(TESSERA_BINARY_DIR) / "tessera"); }

} // namespace

TEST(GgufCli, InfoText) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    const auto r = run_tessera("gguf info " + (shared_dir() / "models" / "stories260K.gguf").string());
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("GGUF version 3, alignment 32, data offset 14176"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("[STRING x 512] ['<unk>', '<s>', '</s>', '<0x00>'"), std::string::npos);
    EXPECT_NE(r.out.find("tensors: 48"), std::string::npos);
    EXPECT_NE(r.out.find("292800 elements, 1171200 bytes of tensor data"), std::string::npos);
}

TEST(GgufCli, InfoJson) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    const auto r = run_tessera("gguf info --json " + (shared_dir() / "models" / "llama-2-tiny-random.gguf").string());
    ASSERT_EQ(r.status, 0) << r.out;
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
    auto r = run_tessera("gguf info /nonexistent/file.gguf");
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.out.find("error: gguf: /nonexistent/file.gguf: cannot open"), std::string::npos) << r.out;
    // A truncated copy of a real file.
    char templ[] = "/tmp/tessera_cli_XXXXXX";
    const int fd = ::mkstemp(templ);
    ASSERT_GE(fd, 0);
    const auto bytes = read_file(shared_dir() / "models" / "stories260K.gguf");
    ASSERT_EQ(::write(fd, bytes.data(), 5000), 5000);
    ::close(fd);
    r = run_tessera(std::string("gguf info ") + templ);
    ::unlink(templ);
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.out.find("truncated file"), std::string::npos) << r.out;
    r = run_tessera("gguf info");
    EXPECT_EQ(r.status, 1);
}

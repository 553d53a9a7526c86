// `tessera gguf info`: text and JSON output on real files, exit code 1 with a
// clear message on bad input. Skipped when the tessera program is not built.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gguf/gguf_bytes.hpp"
#include "support/run_process.hpp"
#include "support/temp_dir.hpp"

using namespace tessera::test;
namespace fs = std::filesystem;

namespace {

// Runs the program with `args` (no shell); stdout and stderr captured apart.
process_result run_tessera(const std::vector<std::string> & args) {
    return run_process(std::string(TESSERA_BINARY_DIR) + "/tessera", args);
}

bool have_tessera() { return fs::exists(fs::path(TESSERA_BINARY_DIR) / "tessera"); }

// The first `n` of `bytes` written as m.gguf in `dir` (removed with it); its path.
std::string write_gguf(const temp_dir & dir, const std::vector<uint8_t> & bytes, size_t n = SIZE_MAX) {
    const fs::path path = dir / "m.gguf";
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char *>(bytes.data()),
                                                static_cast<std::streamsize>(std::min(n, bytes.size())));
    return path.string();
}

} // namespace

TEST(GgufCli, InfoText) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    const auto r = run_tessera({"gguf", "info", (shared_dir() / "models" / "stories260K.gguf").string()});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("GGUF version 3, alignment 32, data offset 14176"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("[STRING x 512] ['<unk>', '<s>', '</s>', '<0x00>'"), std::string::npos);
    EXPECT_NE(r.out.find("tensors: 48"), std::string::npos);
    EXPECT_NE(r.out.find("292800 elements, 1171200 bytes of tensor data"), std::string::npos);
    // A vocabulary-only file: no data offset past its end (723872 of 723869 bytes).
    const auto v = run_tessera({"gguf", "info", (shared_dir() / "vocab" / "ggml-vocab-llama-spm.gguf").string()});
    ASSERT_EQ(v.exit_code, 0) << v.err;
    EXPECT_NE(v.out.find("GGUF version 3, alignment 32, no tensor data, file size 723869 bytes\n"), std::string::npos) << v.out;
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

// --json writes the tensor table entry by entry (memory independent of
// the tensor count); its text must be exactly the whole document's 2-space
// dump, with tensors and without (a vocab-only file: "tensors": []).
TEST(GgufCli, InfoJsonStreamsTheDocumentsText) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    for (const fs::path & file : {shared_dir() / "models" / "llama-2-tiny-random.gguf",
                                  shared_dir() / "models" / "stories260K.gguf",
                                  shared_dir() / "vocab" / "ggml-vocab-llama-spm.gguf"}) {
        const auto r = run_tessera({"gguf", "info", "--json", file.string()});
        ASSERT_EQ(r.exit_code, 0) << r.err;
        const auto j = nlohmann::ordered_json::parse(r.out);
        EXPECT_EQ(j.dump(2) + "\n", r.out) << file;
        EXPECT_EQ(j.back().is_array(), true) << file; // "tensors" comes last
    }
}

TEST(GgufCli, BadInputExitsOne) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    auto r = run_tessera({"gguf", "info", "/nonexistent/file.gguf"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("error: gguf: /nonexistent/file.gguf: no such file"), std::string::npos) << r.err;
    // A name with control bytes is shown escaped (UTF-8 kept).
    r = run_tessera({"gguf", "info", "/nonexistent/a\x1b[31m\xc3\xa9.gguf"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("error: gguf: /nonexistent/a\\x1b[31m\xc3\xa9.gguf: no such file"), std::string::npos) << r.err;
    // A truncated copy of a real file.
    const temp_dir dir("cli");
    r = run_tessera({"gguf", "info", write_gguf(dir, read_file(shared_dir() / "models" / "stories260K.gguf"), 5000)});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("truncated file"), std::string::npos) << r.err;
    r = run_tessera({"gguf", "info"});
    EXPECT_EQ(r.exit_code, 1);
}

// Non-finite float metadata: JSON numbers cannot hold NaN or infinity (a
// JSON writer turns them into null, losing the value), so --json gives the
// strings "nan", "inf", "-inf"; finite floats stay numbers.
TEST(GgufCli, NonFiniteFloatsInJsonAreNamed) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    raw f;
    f.b.reserve(512);
    f.header(0, 5);
    f.str("general.architecture").u32(8).str("test");
    f.str("test.nan").u32(6).f32(std::nanf(""));
    f.str("test.ninf").u32(6).f32(-std::numeric_limits<float>::infinity());
    f.str("test.f64").u32(12).put<double>(std::numeric_limits<double>::infinity());
    f.str("test.list").u32(9).u32(6).u64(3).f32(1.5f).f32(std::numeric_limits<float>::infinity()).f32(std::nanf(""));
    const temp_dir dir("cli");
    const auto js = run_tessera({"gguf", "info", "--json", write_gguf(dir, f.b)});
    ASSERT_EQ(js.exit_code, 0) << js.err;
    const auto j = nlohmann::json::parse(js.out);
    EXPECT_EQ(j["metadata"][1]["value"], "nan") << js.out;
    EXPECT_EQ(j["metadata"][2]["value"], "-inf") << js.out;
    EXPECT_EQ(j["metadata"][3]["type"], "FLOAT64") << js.out;
    EXPECT_EQ(j["metadata"][3]["value"], "inf") << js.out;
    EXPECT_EQ(j["metadata"][4]["value"], nlohmann::json::parse(R"([1.5, "inf", "nan"])")) << js.out;
}

// String metadata that is not valid UTF-8: the text output shows each bad
// byte as \xNN (well-formed characters pass through, an abbreviated string
// is never cut inside a character); --json stays valid JSON, each bad
// sequence replaced by U+FFFD.
TEST(GgufCli, InvalidUtf8IsEscaped) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    const std::string bad = "ok \xc3\xa9 bad \xff\xc3( \xed\xa0\x80 \xc0\xaf end"; // lone FF, cut C3, surrogate, overlong
    const std::string long_value = std::string(119, 'a') + "\xc3\xa9" + "b";   // 122 bytes, 'é' across byte 120
    raw f;
    f.b.reserve(512); // (g++ 12 -O2 warns of a false overflow in the first insert into an empty vector)
    f.header(0, 4);
    f.str("general.architecture").u32(8).str("test");
    f.str("test.bad").u32(8).str(bad);
    f.str("test.list").u32(9).u32(8).u64(2).str("\x80x").str("fine");
    f.str("test.long").u32(8).str(long_value);
    const temp_dir dir("cli");
    const std::string file = write_gguf(dir, f.b);
    const auto text = run_tessera({"gguf", "info", file});
    const auto full = run_tessera({"gguf", "info", "--full", file});
    const auto js = run_tessera({"gguf", "info", "--json", "--full", file});
    const auto short_js = run_tessera({"gguf", "info", "--json", file});
    ASSERT_EQ(text.exit_code, 0) << text.err;
    EXPECT_NE(text.out.find("'ok \xc3\xa9 bad \\xff\\xc3( \\xed\\xa0\\x80 \\xc0\\xaf end'"), std::string::npos) << text.out;
    EXPECT_NE(text.out.find("[STRING x 2] ['\\x80x', 'fine']"), std::string::npos) << text.out;
    EXPECT_NE(text.out.find("'" + std::string(119, 'a') + "...(122 bytes)'"), std::string::npos) << text.out;
    ASSERT_EQ(full.exit_code, 0) << full.err;
    EXPECT_NE(full.out.find("'" + long_value + "'"), std::string::npos) << full.out;
    ASSERT_EQ(js.exit_code, 0) << js.err;
    const auto j = nlohmann::json::parse(js.out); // throws on invalid UTF-8 or JSON
    EXPECT_EQ(j["metadata"][1]["key"], "test.bad");
    const std::string fffd = "\xef\xbf\xbd";
    const std::string f2 = fffd + fffd, f3 = f2 + fffd; // one per byte that cannot be read
    EXPECT_EQ(j["metadata"][1]["value"], "ok \xc3\xa9 bad " + f2 + "( " + f3 + " " + f2 + " end") << js.out;
    EXPECT_EQ(j["metadata"][2]["value"][0], fffd + "x");
    EXPECT_EQ(j["metadata"][3]["value"], long_value);
    EXPECT_FALSE(j["metadata"][3].contains("truncated"));
    // Without --full a long string is abbreviated as in the text (never cut
    // inside a character), with its whole length: memory and output stay
    // bounded (a 20 MB string took 417 MB for --json).
    ASSERT_EQ(short_js.exit_code, 0) << short_js.err;
    const auto sj = nlohmann::json::parse(short_js.out);
    EXPECT_EQ(sj["metadata"][3]["value"], std::string(119, 'a')) << short_js.out;
    EXPECT_EQ(sj["metadata"][3]["length"], 122) << short_js.out;
    EXPECT_EQ(sj["metadata"][3]["truncated"], true) << short_js.out;
    EXPECT_FALSE(sj["metadata"][1].contains("truncated")) << short_js.out; // 27 bytes: whole
}

// The text output pads the key and tensor-name columns to the longest
// name up to 64 columns; a longer name overflows its column instead of
// widening every line (one key of 65535 control bytes made 2000 short keys
// print 524 MB).
TEST(GgufCli, LongKeysDoNotWidenEveryLine) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    raw f;
    f.b.reserve(4096);
    f.header(0, 3);
    f.str("general.architecture").u32(8).str("test");
    f.str(std::string(1000, '\x01')).u32(0).put<uint8_t>(7);
    f.str("short").u32(0).put<uint8_t>(9);
    const temp_dir dir("cli");
    const auto text = run_tessera({"gguf", "info", write_gguf(dir, f.b)});
    ASSERT_EQ(text.exit_code, 0) << text.err;
    EXPECT_NE(text.out.find("\n  short" + std::string(64 - 5, ' ') + "  UINT8    9\n"), std::string::npos) << text.out;
    EXPECT_NE(text.out.find("\\x01\\x01  UINT8    7\n"), std::string::npos) << text.out;
}

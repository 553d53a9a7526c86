// The `tessera quantize`, `tessera gguf synth` and `tessera bench` commands,
// run as a user runs them: outputs, files, JSON fields, exit code 1 with a
// clear message on bad input. Skipped when the tessera program is not built.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/run_process.hpp"
#include "tessera/gguf/reader.hpp"
#include "tessera/gguf/writer.hpp"
#include "tessera/llm/quantize.hpp"
#include "support/temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string vocab = std::string(TESSERA_SHARED_DIR) + "/vocab/ggml-vocab-llama-spm.gguf";

std::string slurp(const fs::path & p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

bool have_tessera() { return fs::exists(fs::path(TESSERA_BINARY_DIR) / "tessera"); }

// Paths as strings: the CLI tests paste them into command lines.
struct temp_dir : tessera::test::temp_dir {
    temp_dir() : tessera::test::temp_dir("cli") {}
    std::string operator/(const std::string & s) const { return (path / s).string(); }
};

// Runs the program with `args` (no shell), stdout and stderr captured apart.
tessera::test::process_result run_tessera(const std::vector<std::string> & args) {
    auto r = tessera::test::run_process(std::string(TESSERA_BINARY_DIR) + "/tessera", args);
    // In sanitizer builds a report (which may also exit 1) must fail the test.
    std::string cmd;
    for (const auto & a : args) cmd += "'" + a + "' ";
    EXPECT_EQ(r.err.find("Sanitizer"), std::string::npos) << cmd << "\n" << r.err;
    EXPECT_EQ(r.err.find("runtime error:"), std::string::npos) << cmd << "\n" << r.err;
    return r;
}

// The same with `args` split at spaces.
tessera::test::process_result run_tessera(const std::string & args) {
    return run_tessera(tessera::test::split_args(args));
}

bool contains(const std::string & s, const std::string & needle) { return s.find(needle) != std::string::npos; }

// The line of `text` that contains `needle` ("" when none).
std::string line_with(const std::string & text, const std::string & needle) {
    const size_t at = text.find(needle);
    if (at == std::string::npos) return {};
    const size_t b = text.rfind('\n', at);
    const size_t e = text.find('\n', at);
    return text.substr(b == std::string::npos ? 0 : b + 1, e == std::string::npos ? std::string::npos : e - (b + 1));
}

// The trimmed cells of a markdown table row "| a | b |".
std::vector<std::string> cells(const std::string & row) {
    std::vector<std::string> out;
    size_t at = row.find('|');
    while (at != std::string::npos) {
        const size_t next = row.find('|', at + 1);
        if (next == std::string::npos) break;
        std::string c = row.substr(at + 1, next - at - 1);
        const size_t b = c.find_first_not_of(' '), e = c.find_last_not_of(' ');
        out.push_back(b == std::string::npos ? std::string() : c.substr(b, e - b + 1));
        at = next;
    }
    return out;
}

// The lines of `text` (without their '\n').
std::vector<std::string> lines_of(const std::string & text) {
    std::vector<std::string> out;
    size_t at = 0;
    while (at < text.size()) {
        const size_t nl = text.find('\n', at);
        out.push_back(text.substr(at, nl - at));
        at = nl == std::string::npos ? text.size() : nl + 1;
    }
    return out;
}

// The fields of one CSV line whose every field is double-quoted (RFC 4180:
// a quote inside is doubled); an empty vector when the line is not such.
std::vector<std::string> csv_cells(const std::string & line) {
    std::vector<std::string> out;
    size_t i = 0;
    while (i < line.size()) {
        if (line[i] != '"') return {};
        std::string f;
        for (++i;; ++i) {
            if (i >= line.size()) return {};
            if (line[i] == '"') {
                if (i + 1 < line.size() && line[i + 1] == '"') {
                    f += '"';
                    ++i;
                    continue;
                }
                ++i;
                break;
            }
            f += line[i];
        }
        out.push_back(f);
        if (i == line.size()) break;
        if (line[i] != ',') return {};
        ++i;
    }
    return out;
}

} // namespace

// An unknown subcommand or top-level option is named, with the command it
// was given to; a missing subcommand lists the ones there are.
TEST(TesseraCli, UnknownSubcommandIsNamed) {
    if (!have_tessera()) GTEST_SKIP() << "tessera not built";
    const std::pair<const char *, const char *> cases[] = {
        {"nosuch", "error: tessera: unknown subcommand 'nosuch' (see tessera --help)"},
        {"--bogus", "error: tessera: unknown option '--bogus' (see tessera --help)"},
        {"gguf bogus", "error: tessera gguf: unknown subcommand 'bogus' (see tessera gguf --help)"},
        // An unknown option that left a required argument missing is named
        // (these said "TYPE is required" and "--model is required").
        {"quantize ./-in.gguf -out.gguf Q8_0",
         "error: tessera quantize: unknown option '-out.gguf' (a file name that begins with '-' needs './' before it) "
         "(see tessera quantize --help)"},
        {"run -p x --bogus", "error: tessera run: unknown option '--bogus' (see tessera run --help)"},
        // The reference bench's one-dash options tessera lacks are unknown
        // options: CLI11 read "-ts" as "-t s" and "-mg 0" as two more models
        // ("-m g"), benched the given model, then failed on "g" and "0".
        {"bench -m x.gguf -ts 1", "error: tessera bench: unknown option '-ts' (see tessera bench --help)"},
        {"bench -m x.gguf -mg 0", "error: tessera bench: unknown option '-mg' (see tessera bench --help)"},
        {"bench -m x.gguf -nkvo 1", "error: tessera bench: unknown option '-nkvo' (see tessera bench --help)"},
        {"bench -mmodel.gguf",
         "error: tessera bench: unknown option '-mmodel.gguf' (an option's value goes after a space: '-m model.gguf') "
         "(see tessera bench --help)"},
        // After a flag (it takes no value, so the next argument is checked
        // too: a flag was taken for an option with a value, and "-mg" after
        // --no-warmup went through as "-m g").
        {"bench -m x.gguf --no-warmup -mg 0", "error: tessera bench: unknown option '-mg' (see tessera bench --help)"},
        {"tokenize -m x.gguf --no-bos -pfoo", "error: tessera tokenize: unknown option '-pfoo' (see tessera tokenize --help)"},
        // "--" as an option's value does not end the options.
        {"run -m x.gguf -p -- -ts", "error: tessera run: unknown option '-ts' (see tessera run --help)"},
        // bench's own multi-letter spellings with a glued value.
        {"bench -m x.gguf -ngl=99", "unknown option '-ngl=99' (an option's value goes after a space: '-ngl 99')"},
        {"bench -m x.gguf -fa1", "unknown option '-fa1' (an option's value goes after a space: '-fa 1')"},
        // A flag's letter gets no value hint ("-h ello.txt").
        {"run -m x.gguf -hello.txt", "unknown option '-hello.txt' (a file name that begins with '-' needs './' before it)"},
    };
    for (const auto & [args, want] : cases) {
        const auto r = run_tessera(args);
        EXPECT_EQ(r.exit_code, 1) << args;
        EXPECT_TRUE(contains(r.err, want)) << args << ": " << r.err;
    }
    // A missing subcommand lists the choices; an option given twice says so
    // (CLI11's own words were "A subcommand is required" and "At Most 1
    // required but received 2").
    const std::pair<const char *, const char *> reworded[] = {
        {"gguf", "error: tessera gguf: a subcommand is required: info, synth (see tessera gguf --help)"},
        {"run -m x.gguf -n 5 -n 6", "error: tessera run: --n-predict: takes one value, but was given 2 (see tessera run --help)"},
    };
    for (const auto & [args, want] : reworded) {
        const auto r = run_tessera(args);
        EXPECT_EQ(r.exit_code, 1) << args;
        EXPECT_TRUE(contains(r.err, want)) << args << ": " << r.err;
    }
    // A value that begins with '-' after a flag is still the value; an
    // empty stray argument is named as one.
    const std::string model = std::string(TESSERA_SHARED_DIR) + "/models/stories260K.gguf";
    const auto dash = run_tessera(std::vector<std::string>{"tokenize", "-m", model, "--no-bos", "-p", "-hello world"});
    EXPECT_EQ(dash.exit_code, 0) << dash.err;
    EXPECT_EQ(dash.out, "410 464 260 306 414 263 304 341\n");
    const auto empty = run_tessera(std::vector<std::string>{"run", "-m", model, ""});
    EXPECT_EQ(empty.exit_code, 1);
    EXPECT_TRUE(contains(empty.err, "error: tessera run: unexpected argument '' (see tessera run --help)")) << empty.err;
    const auto help = run_tessera("--help");
    EXPECT_EQ(help.exit_code, 0);
    // gguf also writes models (synth), not only inspects them.
    EXPECT_TRUE(contains(line_with(help.out, "  gguf"), "inspect GGUF files (info) and write random-weight test models (synth)"))
        << help.out;
}

// Control bytes in a file name or an option's value (ESC of a colour
// sequence) reach no message raw, on stderr or stdout: they show as \xNN
// in errors, warnings, summary and progress lines alike (text shown
// escaped once is not escaped again), and an empty path is named as such.
TEST(TesseraCli, ControlBytesInNamesAndValuesAreEscaped) {
    if (!have_tessera()) GTEST_SKIP() << "tessera not built";
    temp_dir d;
    const std::string model = std::string(TESSERA_SHARED_DIR) + "/models/stories260K.gguf";
    const std::string odd = d / "ctl\x1b[31mname.gguf", odd_shown = d / "ctl\\x1b[31mname.gguf";
    fs::copy_file(model, odd);
    const std::string missing = d / "no\x1b[31m.gguf", missing_shown = d / "no\\x1b[31m.gguf";
    const std::string text = d / "t\x1b[2J.txt", text_shown = d / "t\\x1b[2J.txt";
    struct esc_case {
        std::vector<std::string> args;
        int exit_code;
        std::string message; // on stderr
    };
    const std::vector<std::string> synth = {"gguf", "synth", "-q", "--preset", "tiny", "--type", "Q8_0"}; // then --vocab, -o
    const auto with = [](std::vector<std::string> a, const std::vector<std::string> & more) {
        a.insert(a.end(), more.begin(), more.end());
        return a;
    };
    const std::vector<esc_case> cases = {
        // Informational lines: run's model line, the summaries, bench's progress.
        {{"run", "-m", odd, "-p", "Once", "-n", "1", "-t", "1"}, 0, "model: " + odd_shown + " (llama), "},
        {{"quantize", odd, d / "q\x1b[1m.gguf", "Q8_0"}, 0, d / "q\\x1b[1m.gguf: "},
        {with(synth, {"--vocab", vocab, "-o", d / "s\x1b[1m.gguf"}), 0, d / "s\\x1b[1m.gguf: synth-tiny Q8_0"},
        {{"bench", "-m", odd, "-p", "4", "-n", "0", "-r", "1", "-t", "1", "--progress"}, 0,
         "bench: " + odd_shown + " 1 thread pp4: repetition 1/1"},
        // Missing files, bad values, unknown options.
        {{"quantize", missing, d / "x.gguf", "Q8_0"}, 1, "error: " + missing_shown + ": no such file"},
        {{"quantize", odd, d / "x.gguf", "BAD\x1b[31m"}, 1, "type 'BAD\\x1b[31m'"},
        {with(synth, {"--vocab", missing, "-o", d / "x.gguf"}), 1, "error: " + missing_shown + ": no such file (vocabulary GGUF)"},
        {{"gguf", "synth", "--preset", "ti\x1bny", "--vocab", vocab, "-o", d / "x.gguf"}, 1, "unknown preset 'ti\\x1bny'"},
        {{"gguf", "synth", "--preset", "tiny", "--type", "Q\x1b[31m", "--vocab", vocab, "-o", d / "x.gguf"}, 1,
         "--type 'Q\\x1b[31m' is not supported"},
        {with(synth, {"--vocab", vocab, "-o", d / "nodir\x1b[31m/x.gguf"}), 1,
         "cannot create a temporary file in " + d / "nodir\\x1b[31m" + ": No such file or directory"},
        {{"bench", "-m", missing, "-p", "4", "-n", "0"}, 1, "error: " + missing_shown + ": no such file"},
        {{"bench", "-m", odd, "-p", "4", "-n", "0", "-o", "x\x1b[31m"}, 1, "-o 'x\\x1b[31m': expected md"},
        {{"bench", "-m", odd, "-p", "4", "-n", "0", "-ctk", "q\x1b[31m"}, 1, "cache type 'q\\x1b[31m' is not one"},
        {{"run", "-m", odd, "-p", "x", "--kv-type", "F\x1b[31m"}, 1, "'F\\x1b[31m' is not one of F32, F16"},
        {{"run", "-m", odd, "-p", "x", "--\x1b[31m"}, 1, "unknown option '--\\x1b[31m'"},
        {{"bench", "-m", odd, "-\x1b[31m"}, 1, "unknown option '-\\x1b[31m'"},
        {{"run", "-m", odd, "-f", text}, 1, "error: -f '" + text_shown + "': cannot open it: No such file or directory"},
        {{"tokenize", "-m", odd, "-f", text}, 1, "error: -f '" + text_shown + "': cannot open it"},
        {{"perplexity", "-m", odd, "-f", text}, 1, "error: -f '" + text_shown + "': cannot open it"},
        // A path the library's message shows escaped is not escaped again.
        {{"gguf", "info", missing}, 1, "error: gguf: " + missing_shown + ": no such file\n"},
        // An empty path is named as such (it said "gguf: : no such file").
        {{"run", "-m", "", "-p", "x"}, 1, "error: gguf: the path is empty\n"},
        {{"tokenize", "-m", "", "-p", "x"}, 1, "error: gguf: the path is empty\n"},
        {{"bench", "-m", "", "-p", "4", "-n", "0"}, 1, "error: gguf: the path is empty\n"},
        {{"gguf", "info", ""}, 1, "error: gguf: the path is empty\n"},
        {with(synth, {"--vocab", "", "-o", d / "x.gguf"}), 1, "error: synth: the vocabulary path is empty\n"},
    };
    for (const esc_case & c : cases) {
        std::string cmd;
        for (const auto & a : c.args) cmd += "'" + a + "' ";
        const auto r = run_tessera(c.args);
        EXPECT_EQ(r.exit_code, c.exit_code) << cmd << "\n" << r.err;
        EXPECT_TRUE(contains(r.err, c.message)) << cmd << "\n" << r.err;
        EXPECT_FALSE(contains(r.err, "\x1b")) << cmd << "\n" << r.err;
        EXPECT_FALSE(contains(r.out, "\x1b")) << cmd << "\n" << r.out;
    }
}

// When every converted tensor got one type other than the target's (the
// tiny preset's 64-long rows are too short for Q6_K's and Q4_K's 256-value
// blocks), the summary says which: it named only the target before, a type
// no tensor got.
TEST(QuantizeCli, SummaryNamesTheTypeTheTensorsGot) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    temp_dir d;
    ASSERT_EQ(run_tessera("gguf synth -q --preset tiny --type F32 --seed 9 --vocab " + vocab + " -o " + (d / "f32.gguf")).exit_code, 0);
    for (const auto & [type, said] : std::vector<std::pair<std::string, std::string>>{
             {"Q6_K", "16 of 21 tensors converted to Q6_K (all 16 as Q8_0);"},
             {"Q4_K", "16 of 21 tensors converted to Q4_K (all 16 as Q5_0);"}}) {
        const auto r = run_tessera("quantize -q " + (d / "f32.gguf") + " " + (d / "q.gguf") + " " + type);
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_TRUE(contains(r.err, said)) << r.err;
    }
}

TEST(QuantizeCli, ConvertsWithProgressAndMatchesSynth) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    temp_dir d;
    auto r = run_tessera("gguf synth -q --preset tiny --type F32 --seed 9 --vocab " + vocab + " -o " + (d / "f32.gguf"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    r = run_tessera("quantize " + (d / "f32.gguf") + " " + (d / "q8.gguf") + " q8_0");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // One line per tensor: index/count, name, old -> new type.
    EXPECT_TRUE(contains(r.err, "[ 1/21] token_embd.weight")) << r.err;
    EXPECT_TRUE(contains(r.err, "F32 -> Q8_0")) << r.err;
    EXPECT_TRUE(contains(r.err, "[21/21] blk.1.ffn_down.weight")) << r.err;
    EXPECT_TRUE(contains(line_with(r.err, "blk.1.ffn_norm.weight"), "F32 -> F32")) << r.err;
    EXPECT_TRUE(contains(line_with(r.err, "blk.1.ffn_up.weight"), "F32 -> Q8_0  [64, 128]")) << r.err;
    EXPECT_TRUE(contains(r.err, "16 of 21 tensors converted to Q8_0;")) << r.err; // one type, the target's: no list
    // Same bytes as the generator writing Q8_0 directly.
    r = run_tessera("gguf synth -q --preset tiny --type Q8_0 --seed 9 --vocab " + vocab + " -o " + (d / "s8.gguf"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(slurp(d / "q8.gguf"), slurp(d / "s8.gguf"));
    const tessera::gguf::reader q8(d / "q8.gguf");
    EXPECT_EQ(q8.get_u32("general.file_type"), 7u);
    EXPECT_EQ(q8.tensor("blk.0.attn_k.weight").type, TSR_TYPE_Q8_0);
}

TEST(QuantizeCli, BadInputExitsOneWithoutOutput) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    temp_dir d;
    auto r = run_tessera("quantize " + (d / "missing.gguf") + " " + (d / "out.gguf") + " Q4_0");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err, "missing.gguf: no such file")) << r.err;
    { std::ofstream(d / "text.gguf") << "hello, not gguf"; }
    r = run_tessera("quantize " + (d / "text.gguf") + " " + (d / "out.gguf") + " Q4_0");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err, "error: ")) << r.err;
    EXPECT_TRUE(contains(r.err, "text.gguf")) << r.err;
    r = run_tessera("gguf synth -q --preset tiny --type F16 --vocab " + vocab + " -o " + (d / "m.gguf"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    r = run_tessera("quantize " + (d / "m.gguf") + " " + (d / "out.gguf") + " Q9_9");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err, "unknown or unsupported quantization type 'Q9_9' (supported: F32, F16, BF16, Q8_0, "
                                "Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M)"))
        << r.err;
    // A GGUF block type without an encoder here, and a mix that does not exist.
    for (const std::string bad : {"Q3_K", "Q5_K_L"}) {
        r = run_tessera("quantize " + (d / "m.gguf") + " " + (d / "out.gguf") + " " + bad);
        EXPECT_EQ(r.exit_code, 1) << bad;
        EXPECT_TRUE(contains(r.err, "unknown or unsupported quantization type '" + bad + "' (supported: ")) << r.err;
    }
    r = run_tessera("quantize " + (d / "m.gguf"));
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_FALSE(fs::exists(d / "out.gguf"));
}

// stories260K (F32) written to `path` with the values of F32 tensor `name`
// changed by edit(values, ne[0]); everything else copied.
void write_stories_with_values(const std::string & path, const std::string & name,
                               const std::function<void(std::vector<float> &, int64_t)> & edit) {
    const tessera::gguf::reader src(std::string(TESSERA_SHARED_DIR) + "/models/stories260K.gguf");
    tessera::gguf::writer w;
    w.copy_all_kv(src);
    for (const tessera::gguf::tensor_info & ti : src.tensors()) {
        if (ti.name != name) {
            w.copy_tensor(src, ti.name);
            continue;
        }
        ASSERT_EQ(ti.type, TSR_TYPE_F32);
        std::vector<float> v(ti.size / sizeof(float));
        std::memcpy(v.data(), ti.data, ti.size);
        edit(v, ti.ne[0]);
        std::vector<uint8_t> bytes(ti.size);
        std::memcpy(bytes.data(), v.data(), ti.size);
        w.add_tensor(ti.name, ti.type, std::span<const int64_t>(ti.ne, ti.n_dims), std::move(bytes));
    }
    w.write(path);
}

// A model whose weights hold NaN, or a value its new type cannot hold, is
// refused naming the tensor, the place and the value: exit 1, no output, an
// existing output unchanged. (An all-NaN token_embd used to become a Q8_0
// model that generated empty text; a 1e30 weight an F16 scale of Inf.)
TEST(QuantizeCli, NonFiniteOrOverflowingWeightsExitOne) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    temp_dir d;
    write_stories_with_values(d / "nan_emb.gguf", "token_embd.weight", [](std::vector<float> & v, int64_t) {
        std::fill(v.begin(), v.end(), std::nanf(""));
    });
    write_stories_with_values(d / "big_q.gguf", "blk.0.attn_q.weight", [](std::vector<float> & v, int64_t) { v[0] = 1e30f; });
    // A single -Inf in row 100 of blk.1.ffn_gate.weight ([64, 172]).
    write_stories_with_values(d / "inf_gate.gguf", "blk.1.ffn_gate.weight", [](std::vector<float> & v, int64_t ne0) {
        v[size_t(100 * ne0 + 17)] = -std::numeric_limits<float>::infinity();
    });
    { std::ofstream(d / "out.gguf") << "previous contents"; }
    const std::tuple<std::string, std::string, std::string> runs[] = {
        {"nan_emb.gguf", "Q8_0",
         "tensor 'token_embd.weight': value nan at row 0, column 0 is not a finite number (converting F32 to Q8_0)"},
        {"nan_emb.gguf", "Q4_K_M", // Q4_K, rows of 64: Q5_0
         "tensor 'token_embd.weight': value nan at row 0, column 0 is not a finite number (converting F32 to Q5_0)"},
        {"big_q.gguf", "Q8_0",
         "tensor 'blk.0.attn_q.weight': value 1e+30 at row 0, column 0 does not fit Q8_0 (the scale of its block, "
         "columns 0..31, overflows F16)"},
        {"big_q.gguf", "F16",
         "tensor 'blk.0.attn_q.weight': value 1e+30 at row 0, column 0 does not fit F16 (its largest finite value is "
         "65504)"},
        {"inf_gate.gguf", "Q4_0",
         "tensor 'blk.1.ffn_gate.weight': value -inf at row 100, column 17 is not a finite number (converting F32 to "
         "Q4_0)"},
    };
    for (const auto & [in, type, want] : runs) {
        const auto r = run_tessera({"quantize", "-q", d / in, d / "out.gguf", type});
        EXPECT_EQ(r.exit_code, 1) << in << " " << type << ": " << r.err;
        EXPECT_TRUE(contains(r.err, "error: " + (d / in) + ": " + want + "\n")) << r.err;
        EXPECT_EQ(slurp(d.path / "out.gguf"), "previous contents");
    }
    EXPECT_EQ(d.n_entries(), 4u); // no temporaries left
    // BF16 holds 1e30: that file converts.
    const auto r = run_tessera({"quantize", "-q", d / "big_q.gguf", d / "bf16.gguf", "BF16"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
}

// A file none of whose tensors takes the target (the mnist classifier: no
// Llama weight names) is copied with a warning, and keeps its own type keys
// (it has no general.file_type) instead of claiming Q8_0's 7.
TEST(QuantizeCli, NothingConvertedKeepsTheInputFileType) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    temp_dir d;
    const std::string mnist = std::string(TESSERA_SHARED_DIR) + "/models/mnist-fc-f32.gguf";
    const auto r = run_tessera("quantize " + mnist + " " + (d / "q.gguf") + " Q8_0");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(contains(r.err, "0 of ")) << r.err;
    EXPECT_TRUE(contains(r.err, "warning: " + (d / "q.gguf") + ": no tensor was converted to Q8_0")) << r.err;
    const tessera::gguf::reader in(mnist), out(d / "q.gguf");
    EXPECT_EQ(in.find_key("general.file_type") != nullptr, out.find_key("general.file_type") != nullptr);
    EXPECT_EQ(out.find_key("general.quantization_version") != nullptr, in.find_key("general.quantization_version") != nullptr);
    ASSERT_EQ(out.n_tensors(), in.n_tensors());
    for (size_t i = 0; i < in.n_tensors(); ++i) EXPECT_EQ(out.tensors()[i].type, in.tensors()[i].type);
}

// Q4_K_M on the tiny shape (n_embd 64, n_ff 128: no 256-element super-block
// fits, so every matrix falls back: Q4_K -> Q5_0, Q6_K -> Q8_0), from an F16
// model and then run; from an F32 model it equals synth's own Q4_K_M file.
TEST(QuantizeCli, Q4KMOfTinyFallsBackMatchesSynthAndRuns) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    temp_dir d;
    auto r = run_tessera("gguf synth -q --preset tiny --type F16 --seed 9 --vocab " + vocab + " -o " + (d / "f16.gguf"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    r = run_tessera("quantize " + (d / "f16.gguf") + " " + (d / "m.gguf") + " q4_k_m");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string embd = line_with(r.err, "token_embd.weight");
    EXPECT_TRUE(contains(embd, "F16 -> Q5_0")) << r.err;
    EXPECT_TRUE(contains(embd, "(fallback: Q4_K needs ne[0] % 256 == 0)")) << r.err;
    EXPECT_TRUE(contains(line_with(r.err, "output.weight"), "(fallback: Q6_K needs ne[0] % 256 == 0)")) << r.err;
    EXPECT_TRUE(contains(line_with(r.err, "blk.1.attn_v.weight"), "F16 -> Q8_0")) << r.err; // layer 1 of 2: more bits
    EXPECT_TRUE(contains(line_with(r.err, "blk.0.attn_v.weight"), "F16 -> Q5_0")) << r.err;
    EXPECT_FALSE(contains(line_with(r.err, "blk.0.ffn_norm.weight"), "fallback")) << r.err;
    EXPECT_TRUE(contains(r.err, "16 of 21 tensors converted to Q4_K_M (13 Q5_0, 3 Q8_0)")) << r.err;
    {
        const tessera::gguf::reader m(d / "m.gguf");
        EXPECT_EQ(m.get_u32("general.file_type"), 15u);
        EXPECT_EQ(m.tensor("blk.1.ffn_down.weight").type, TSR_TYPE_Q8_0);
        EXPECT_EQ(m.tensor("blk.0.ffn_down.weight").type, TSR_TYPE_Q5_0);
    }
    r = run_tessera("run -m " + (d / "m.gguf") + " -p Hello -n 4 --temp 0 -t 1 -c 64");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(contains(r.err, "generation: 4 tokens")) << r.err;

    r = run_tessera("gguf synth -q --preset tiny --type F32 --seed 9 --vocab " + vocab + " -o " + (d / "f32.gguf"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    r = run_tessera("quantize -q " + (d / "f32.gguf") + " " + (d / "q.gguf") + " Q4_K_M");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    r = run_tessera("gguf synth -q --preset tiny --type Q4_K_M --seed 9 --vocab " + vocab + " -o " + (d / "s.gguf"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(slurp(d / "q.gguf"), slurp(d / "s.gguf"));
}

// Q5_K_M and Q5_1 on the tiny shape: Q5_K falls back to Q5_1 (Q6_K to
// Q8_0) for every matrix; the files run, and from an F32 model they equal
// synth's own files.
TEST(QuantizeCli, Q5KMAndQ5_1OfTinyFallBackMatchSynthAndRun) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    temp_dir d;
    auto r = run_tessera("gguf synth -q --preset tiny --type F16 --seed 9 --vocab " + vocab + " -o " + (d / "f16.gguf"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    r = run_tessera("quantize " + (d / "f16.gguf") + " " + (d / "m.gguf") + " q5_k_m");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string embd = line_with(r.err, "token_embd.weight");
    EXPECT_TRUE(contains(embd, "F16 -> Q5_1")) << r.err;
    EXPECT_TRUE(contains(embd, "(fallback: Q5_K needs ne[0] % 256 == 0)")) << r.err;
    EXPECT_TRUE(contains(line_with(r.err, "output.weight"), "(fallback: Q6_K needs ne[0] % 256 == 0)")) << r.err;
    EXPECT_TRUE(contains(line_with(r.err, "blk.1.attn_v.weight"), "F16 -> Q8_0")) << r.err; // layer 1 of 2: more bits
    EXPECT_TRUE(contains(line_with(r.err, "blk.0.attn_v.weight"), "F16 -> Q5_1")) << r.err;
    EXPECT_TRUE(contains(r.err, "16 of 21 tensors converted to Q5_K_M (13 Q5_1, 3 Q8_0)")) << r.err;
    {
        const tessera::gguf::reader m(d / "m.gguf");
        EXPECT_EQ(m.get_u32("general.file_type"), 17u);
        EXPECT_EQ(m.tensor("blk.1.ffn_down.weight").type, TSR_TYPE_Q8_0);
        EXPECT_EQ(m.tensor("blk.0.ffn_down.weight").type, TSR_TYPE_Q5_1);
    }
    r = run_tessera("run -m " + (d / "m.gguf") + " -p Hello -n 4 --temp 0 -t 1 -c 64");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(contains(r.err, "generation: 4 tokens")) << r.err;
    // The summary names the file type, and the type most weights have.
    EXPECT_TRUE(contains(r.err, "type Q5_K - Medium (most weights Q5_1)")) << r.err;

    r = run_tessera("quantize " + (d / "f16.gguf") + " " + (d / "q51.gguf") + " Q5_1");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(contains(line_with(r.err, "output.weight"), "F16 -> Q5_1")) << r.err;
    EXPECT_FALSE(contains(r.err, "fallback")) << r.err;
    EXPECT_TRUE(contains(r.err, "16 of 21 tensors converted to Q5_1;")) << r.err;
    EXPECT_EQ(tessera::gguf::reader(d / "q51.gguf").get_u32("general.file_type"), 9u);
    r = run_tessera("run -m " + (d / "q51.gguf") + " -p Hello -n 4 --temp 0 -t 1 -c 64");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(contains(r.err, "generation: 4 tokens")) << r.err;

    r = run_tessera("gguf synth -q --preset tiny --type F32 --seed 9 --vocab " + vocab + " -o " + (d / "f32.gguf"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (const std::string t : {"Q5_K_M", "Q5_K_S", "Q5_K", "Q5_1"}) {
        r = run_tessera("quantize -q " + (d / "f32.gguf") + " " + (d / "q.gguf") + " " + t);
        ASSERT_EQ(r.exit_code, 0) << r.err;
        r = run_tessera("gguf synth -q --preset tiny --type " + t + " --seed 9 --vocab " + vocab + " -o " + (d / "s.gguf"));
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_EQ(slurp(d / "q.gguf"), slurp(d / "s.gguf")) << t;
    }
}

// The 135m shape in Q4_K_M really holds K-quants (ffn_down: n_ff 1536 = 6
// super-blocks) next to the fallbacks, runs, and benches as "Q4_K - Medium".
TEST(SynthCli, Q4KM135mHoldsKQuantsRunsAndBenches) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    temp_dir d;
    auto r = run_tessera("gguf synth --preset 135m --type Q4_K_M --vocab " + vocab + " -o " + (d / "m.gguf"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(contains(r.err, "synth-135m Q4_K_M (n_embd 576, 30 layers")) << r.err;
    {
        const tessera::gguf::reader m(d / "m.gguf");
        EXPECT_EQ(m.get_u32("general.file_type"), 15u);
        EXPECT_EQ(m.tensor("token_embd.weight").type, TSR_TYPE_Q5_0);
        EXPECT_EQ(m.tensor("blk.0.attn_q.weight").type, TSR_TYPE_Q5_0);
        EXPECT_EQ(m.tensor("blk.29.ffn_up.weight").type, TSR_TYPE_Q5_0);
        EXPECT_EQ(m.tensor("output.weight").type, TSR_TYPE_Q8_0);
        EXPECT_EQ(m.tensor("blk.2.ffn_down.weight").type, TSR_TYPE_Q6_K); // 2 < 30/8
        EXPECT_EQ(m.tensor("blk.3.ffn_down.weight").type, TSR_TYPE_Q4_K);
        EXPECT_EQ(m.tensor("blk.5.ffn_down.weight").type, TSR_TYPE_Q6_K); // (5 - 3) % 3 == 2
        EXPECT_EQ(m.tensor("blk.5.attn_v.weight").type, TSR_TYPE_Q8_0);
        EXPECT_EQ(m.tensor("blk.6.attn_v.weight").type, TSR_TYPE_Q5_0);
    }
    r = run_tessera("run -m " + (d / "m.gguf") + " -p Hello -n 2 --temp 0 -t 2 -c 64");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(contains(r.err, "generation: 2 tokens")) << r.err;
    r = run_tessera("bench -m " + (d / "m.gguf") + " -p 4 -n 0 -t 2 -r 1 -o json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(json::parse(r.out)[0]["model_type"], "llama 143M Q4_K - Medium");
}

TEST(SynthCli, ReproducibleLoadableAndChecked) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    temp_dir d;
    const std::string base = "gguf synth -q --preset tiny --type Q4_0 --vocab " + vocab;
    ASSERT_EQ(run_tessera(base + " --seed 3 -o " + (d / "a.gguf")).exit_code, 0);
    ASSERT_EQ(run_tessera(base + " --seed 3 -o " + (d / "b.gguf")).exit_code, 0);
    ASSERT_EQ(run_tessera(base + " --seed 4 -o " + (d / "c.gguf")).exit_code, 0);
    EXPECT_EQ(slurp(d / "a.gguf"), slurp(d / "b.gguf"));
    EXPECT_NE(slurp(d / "a.gguf"), slurp(d / "c.gguf"));
    // Progress and summary on stderr.
    auto r = run_tessera("gguf synth --preset tiny --type F16 --vocab " + vocab + " -o " + (d / "f16.gguf"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(contains(r.err, "[21/21] blk.1.ffn_down.weight")) << r.err;
    EXPECT_TRUE(contains(r.err, "synth-tiny F16 (n_embd 64, 2 layers, 4 heads, 2 kv heads, n_ff 128), seed 1")) << r.err;
    EXPECT_FALSE(contains(r.err, "warning")) << r.err;
    // The preset in any case, as --type; a byte-level BPE vocabulary is
    // copied and read; one tessera cannot read (WordPiece 'bert') is still
    // copied, with a warning that says why.
    r = run_tessera("gguf synth -q --preset TINY --type f16 --vocab " + std::string(TESSERA_SHARED_DIR) + "/vocab/ggml-vocab-gpt-2.gguf -o " +
                    (d / "bpe.gguf"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_FALSE(contains(r.err, "warning")) << r.err;
    EXPECT_EQ(tessera::gguf::reader(d / "bpe.gguf").get_string("tokenizer.ggml.model"), "gpt2");
    r = run_tessera("gguf synth -q --preset tiny --vocab " + std::string(TESSERA_SHARED_DIR) + "/vocab/ggml-vocab-bert-bge.gguf -o " +
                    (d / "wpm.gguf"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(contains(r.err, "warning: " + (d / "wpm.gguf") + ": tokenizer model 'bert' copied from")) << r.err;
    EXPECT_TRUE(contains(r.err, "tessera run and tokenize cannot read it (tokenizer: " + (d / "wpm.gguf") +
                                    ": unsupported tokenizer model 'bert'"))
        << r.err;
    // bench feeds token ids, so it runs such a model (the warning no longer names it).
    r = run_tessera("bench -m " + (d / "wpm.gguf") + " -p 4 -n 1 -t 1 -r 1 -o json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(json::parse(r.out).size(), 2u) << r.out;

    r = run_tessera("gguf synth --preset 7b --vocab " + vocab + " -o " + (d / "x.gguf"));
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err, "unknown preset '7b'")) << r.err;
    r = run_tessera("gguf synth --preset tiny --type Q3_K --vocab " + vocab + " -o " + (d / "x.gguf"));
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err, "--type 'Q3_K' is not supported (F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, "
                                "Q6_K, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M)"))
        << r.err;
    r = run_tessera("gguf synth --preset tiny --vocab " + (d / "none.gguf") + " -o " + (d / "x.gguf"));
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err, "none.gguf: no such file")) << r.err;
    r = run_tessera("gguf synth --preset tiny -o " + (d / "x.gguf")); // --vocab missing
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_FALSE(fs::exists(d / "x.gguf"));
}

TEST(BenchCli, JsonFieldsAndStatistics) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    temp_dir d;
    ASSERT_EQ(run_tessera("gguf synth -q --preset tiny --type Q4_0 --vocab " + vocab + " -o " + (d / "m.gguf")).exit_code, 0);
    const auto r = run_tessera("bench -m " + (d / "m.gguf") + " -p 8 -n 3 -t 1 -r 3 -o json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json j = json::parse(r.out);
    ASSERT_TRUE(j.is_array());
    ASSERT_EQ(j.size(), 2u);

    // Size and parameter count computed from the file.
    const tessera::gguf::reader g(d / "m.gguf");
    uint64_t bytes = 0;
    int64_t params = 0;
    for (const auto & t : g.tensors()) {
        bytes += t.size;
        params += t.n_elements();
    }
    for (size_t i = 0; i < 2; ++i) {
        const json & o = j[i];
        EXPECT_EQ(o["model_filename"], d / "m.gguf");
        EXPECT_EQ(o["model_type"], "llama 4M Q4_0");
        EXPECT_EQ(o["model_size"].get<uint64_t>(), bytes);
        EXPECT_EQ(o["model_n_params"].get<int64_t>(), params);
        EXPECT_EQ(o["n_params"].get<int64_t>(), params);
        EXPECT_EQ(o["n_threads"], 1);
        EXPECT_EQ(o["backends"], "CPU");
        const int n_tokens = o["n_prompt"].get<int>() + o["n_gen"].get<int>();
        const auto ts = o["samples_ts"].get<std::vector<double>>();
        const auto ns = o["samples_ns"].get<std::vector<uint64_t>>();
        ASSERT_EQ(ts.size(), 3u);
        ASSERT_EQ(ns.size(), 3u);
        double mean = 0;
        for (size_t k = 0; k < 3; ++k) {
            EXPECT_GT(ns[k], 0u);
            EXPECT_NEAR(ts[k], n_tokens * 1e9 / double(ns[k]), 1e-9 * ts[k]);
            mean += ts[k] / 3;
        }
        double var = 0;
        for (double x : ts) var += (x - mean) * (x - mean) / 2; // sample variance, n - 1 = 2
        EXPECT_NEAR(o["avg_ts"].get<double>(), mean, 1e-9 * mean);
        EXPECT_NEAR(o["stddev_ts"].get<double>(), std::sqrt(var), 1e-9 * mean);
        EXPECT_TRUE(o.contains("avg_ns") && o.contains("stddev_ns") && o.contains("test_time"));
    }
    EXPECT_EQ(j[0]["n_prompt"], 8);
    EXPECT_EQ(j[0]["n_gen"], 0);
    EXPECT_EQ(j[0]["test"], "pp8");
    EXPECT_EQ(j[1]["n_prompt"], 0);
    EXPECT_EQ(j[1]["n_gen"], 3);
    EXPECT_EQ(j[1]["test"], "tg3");
}

TEST(BenchCli, MarkdownTableRows) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    temp_dir d;
    ASSERT_EQ(run_tessera("gguf synth -q --preset tiny --type Q8_0 --vocab " + vocab + " -o " + (d / "a.gguf")).exit_code, 0);
    ASSERT_EQ(run_tessera("gguf synth -q --preset tiny --type F16 --vocab " + vocab + " -o " + (d / "b.gguf")).exit_code, 0);
    const auto r = run_tessera("bench -m " + (d / "a.gguf") + " -m " + (d / "b.gguf") + " -p 4 -n 2 -t 1,2 -r 1");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::vector<std::string> lines;
    size_t at = 0;
    while (at < r.out.size()) {
        const size_t nl = r.out.find('\n', at);
        lines.push_back(r.out.substr(at, nl - at));
        at = nl == std::string::npos ? r.out.size() : nl + 1;
    }
    ASSERT_EQ(lines.size(), 2u + 2 * 2 * 2) << r.out; // header, rule, models x threads x tests
    EXPECT_EQ(cells(lines[0]), (std::vector<std::string>{"model", "size", "params", "backend", "threads", "test", "t/s"}));
    EXPECT_EQ(cells(lines[1]).size(), 7u);
    const auto row = cells(lines[2]);
    ASSERT_EQ(row.size(), 7u) << lines[2];
    EXPECT_EQ(row[0], "llama 4M Q8_0");
    EXPECT_EQ(row[2], "4.17 M");
    EXPECT_EQ(row[3], "CPU");
    EXPECT_EQ(row[4], "1");
    EXPECT_EQ(row[5], "pp4");
    EXPECT_TRUE(row[6].ends_with(" ± 0.00")) << row[6]; // one repetition: stddev 0
    EXPECT_EQ(cells(lines[3])[5], "tg2");
    EXPECT_EQ(cells(lines[4])[4], "2");
    EXPECT_EQ(cells(lines[6])[0], "llama 4M F16");
}

// --limits: the limits measured around each test, and each test as a
// fraction of its limit: tg of the read bandwidth
// (weight bytes per token: the file's tensors but token_embd, computed
// here from the file), pp of the F32 FMA peak (2 FLOP per parameter and
// token). The markdown table gets an "of limit" column and the limits
// after it; without the flag neither, and no such JSON fields.
TEST(BenchCli, LimitsGiveEachTestAsAFractionOfTheMachinesLimit) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    temp_dir d;
    ASSERT_EQ(run_tessera("gguf synth -q --preset tiny --type Q8_0 --vocab " + vocab + " -o " + (d / "m.gguf")).exit_code, 0);
    const auto r = run_tessera("bench -m " + (d / "m.gguf") + " -p 8 -n 3 -t 1,2 -r 2 --limits -o json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json j = json::parse(r.out);
    ASSERT_EQ(j.size(), 4u);
    const tessera::gguf::reader g(d / "m.gguf");
    uint64_t bytes = 0, embd = 0;
    bool tied = true;
    for (const auto & t : g.tensors()) {
        bytes += t.size;
        if (t.name == "token_embd.weight") embd = t.size;
        if (t.name == "output.weight") tied = false;
    }
    ASSERT_GT(embd, 0u);
    const uint64_t per_token = tied ? bytes : bytes - embd;
    for (size_t i = 0; i < j.size(); ++i) {
        const json & o = j[i];
        SCOPED_TRACE(o["test"].get<std::string>() + " on " + std::to_string(o["n_threads"].get<int>()) + " threads");
        EXPECT_EQ(o["weight_bytes_per_token"].get<uint64_t>(), per_token);
        const double fma = o["fma_peak_flops"].get<double>(), bw = o["read_bw_bytes_per_s"].get<double>();
        const double ts = o["avg_ts"].get<double>(), of = o["of_limit"].get<double>();
        if (o["n_gen"].get<int>() > 0) {
            EXPECT_EQ(o["limit"], "bw");
            if (bw > 0) EXPECT_NEAR(of, ts * double(per_token) / bw, 1e-9 * of);
        } else {
            EXPECT_EQ(o["limit"], "FMA");
            if (fma > 0) EXPECT_NEAR(of, ts * 2.0 * o["n_params"].get<double>() / fma, 1e-9 * of);
        }
#if defined(__x86_64__)
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) { // measured: plausible figures
            EXPECT_GT(fma, 1e9 * o["n_threads"].get<double>()) << "at least 1 GFLOP/s a thread";
            EXPECT_GT(bw, 1e8);
            EXPECT_GT(of, 0.0);
        }
#endif
    }

    const auto md = run_tessera("bench -m " + (d / "m.gguf") + " -p 0 -n 2 -t 1 -r 1 --limits");
    ASSERT_EQ(md.exit_code, 0) << md.err;
    const size_t nl = md.out.find('\n');
    ASSERT_NE(nl, std::string::npos) << md.out;
    const auto head = cells(md.out.substr(0, nl));
    ASSERT_EQ(head.size(), 8u) << md.out;
    EXPECT_EQ(head[7], "of limit");
    const size_t row_at = md.out.find("| llama");
    ASSERT_NE(row_at, std::string::npos) << md.out;
    const auto row = cells(md.out.substr(row_at, md.out.find('\n', row_at) - row_at));
    ASSERT_EQ(row.size(), 8u) << md.out;
    EXPECT_TRUE(row[7].ends_with(" bw") || row[7] == "n/a") << row[7];
    EXPECT_TRUE(contains(md.out, "limits measured in this run")) << md.out;
    EXPECT_TRUE(contains(md.out, "1 thread: F32 FMA peak ")) << md.out;
    // -o sql: the `limit` field is a reserved word of SQL, so its column is
    // a quoted identifier in the table and in each INSERT (unquoted, SQLite
    // refused the whole output); the other names stay bare.
    const auto sql = run_tessera("bench -m " + (d / "m.gguf") + " -p 0 -n 2 -t 1 -r 1 --limits -o sql");
    ASSERT_EQ(sql.exit_code, 0) << sql.err;
    EXPECT_TRUE(contains(sql.out, "  of_limit REAL,\n  \"limit\" TEXT")) << sql.out;
    EXPECT_TRUE(contains(sql.out, ", of_limit, \"limit\") VALUES (")) << sql.out;
    EXPECT_TRUE(contains(sql.out, ", 'bw');")) << sql.out;
    EXPECT_FALSE(contains(sql.out, " limit ")) << sql.out;
    // A value the flag cannot take is refused, naming it, before any test.
    const auto bad = run_tessera("bench -m " + (d / "m.gguf") + " -p 0 -n 2 -t 1 -r 1 --limits=abc");
    EXPECT_EQ(bad.exit_code, 1);
    EXPECT_TRUE(contains(bad.err, "--limits")) << bad.err;
    EXPECT_FALSE(contains(bad.out, "| llama")) << bad.out;
    const auto plain = run_tessera("bench -m " + (d / "m.gguf") + " -p 0 -n 2 -t 1 -r 1 -o json");
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    EXPECT_FALSE(json::parse(plain.out)[0].contains("of_limit"));
}

// The model description names the file type as the reference's bench does.
TEST(BenchCli, KQuantFileTypeNames) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    temp_dir d;
    for (const auto & [type, name] : std::vector<std::pair<std::string, std::string>>{
             {"Q4_K_M", "llama 4M Q4_K - Medium"}, {"Q4_K_S", "llama 4M Q4_K - Small"},
             {"Q4_K", "llama 4M Q4_K - Small"}, {"Q6_K", "llama 4M Q6_K"},
             {"Q5_K_M", "llama 4M Q5_K - Medium"}, {"Q5_K_S", "llama 4M Q5_K - Small"},
             {"Q5_K", "llama 4M Q5_K - Small"}, {"Q5_1", "llama 4M Q5_1"}}) {
        ASSERT_EQ(run_tessera("gguf synth -q --preset tiny --type " + type + " --vocab " + vocab + " -o " + (d / "m.gguf"))
                      .exit_code,
                  0);
        const auto r = run_tessera("bench -m " + (d / "m.gguf") + " -p 4 -n 0 -t 1 -r 1 -o json");
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_EQ(json::parse(r.out)[0]["model_type"], name) << type;
    }
}

TEST(BenchCli, BadInputExitsOne) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    temp_dir d;
    auto r = run_tessera("bench -m " + (d / "missing.gguf") + " -p 4 -n 2");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err, "missing.gguf: no such file")) << r.err;
    ASSERT_EQ(run_tessera("gguf synth -q --preset tiny --type Q8_0 --vocab " + vocab + " -o " + (d / "a.gguf")).exit_code, 0);
    r = run_tessera("bench -m " + (d / "a.gguf") + " -p 4 -n 2 -o xml");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err, "-o 'xml': expected md, json, jsonl, csv or sql")) << r.err;
    r = run_tessera("bench -m " + (d / "a.gguf") + " -p 4 -n 2 -r 0");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err, "--repetitions: '0' is outside the range 1 to 1000000")) << r.err;
    // Past int: CLI11 said 'Could not convert: --repetitions = 99999999999'.
    r = run_tessera("bench -m " + (d / "a.gguf") + " -p 4 -n 2 -r 99999999999");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err, "--repetitions: '99999999999' is outside the range 1 to 1000000")) << r.err;
    // --delay as -r (CLI11 said 'Could not convert: --delay = 1.5').
    for (const auto & [v, said] : std::vector<std::pair<std::string, std::string>>{
             {"1.5", "--delay: '1.5' is not a whole number"},
             {"99999999999", "--delay: '99999999999' is outside the range 0 to 86400"}}) {
        r = run_tessera("bench -m " + (d / "a.gguf") + " -p 4 -n 2 --delay " + v);
        EXPECT_EQ(r.exit_code, 1) << v;
        EXPECT_TRUE(contains(r.err, said)) << r.err;
    }
    // As run's and perplexity's whole numbers (CLI11 said 'Could not convert: --repetitions = 2.5').
    r = run_tessera("bench -m " + (d / "a.gguf") + " -p 4 -n 2 -r 2.5");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err, "--repetitions: '2.5' is not a whole number")) << r.err;
    r = run_tessera("bench -m " + (d / "a.gguf") + " -p 0 -n 0");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err, "nothing to run: every -p and -n value is 0 and there is no -pg")) << r.err;
    r = run_tessera("bench -m " + (d / "a.gguf") + " -p 4000 -n 0"); // beyond the 2048-token context
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err, "context")) << r.err;
    r = run_tessera("bench -m " + vocab + " -p 4 -n 0"); // vocab-only file: not a model
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err, "error: ")) << r.err;
    EXPECT_TRUE(r.out.empty() || contains(r.out, "| model")) << r.out;
    r = run_tessera("bench -m " + d.path.string() + " -p 4 -n 0"); // a directory
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err, ": not a regular file")) << r.err;
    for (const char * t : {"-1", "513"}) { // past the CPU pool's 512 threads: refused before loading
        r = run_tessera("bench -m " + (d / "a.gguf") + " -p 4 -n 0 -t " + t);
        EXPECT_EQ(r.exit_code, 1) << t;
        EXPECT_TRUE(contains(r.err, std::string("-t ") + t + ": expected 0 (all cores) to 512")) << r.err;
    }
    r = run_tessera("bench -m " + (d / "a.gguf") + " -p 4 -n 0 -t 0 -o json"); // 0: all cores, as for run
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(contains(r.out, "\"n_threads\": " + std::to_string(std::max(1u, std::thread::hardware_concurrency()))))
        << r.out;
    r = run_tessera("run -m " + (d / "a.gguf") + " -p x -n 1 -t 513");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err, "513")) << r.err;
    EXPECT_FALSE(contains(r.err, "backend")) << "refused by the option parser, not the backend: " << r.err;
}

// One bad -m among good ones: the good models are still benched and
// reported (JSON array or table rows), the bad one's error goes to stderr
// naming the file, and the exit code is 1.
TEST(BenchCli, BadModelAmongGoodOnesStillReportsTheGoodOnes) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    temp_dir d;
    ASSERT_EQ(run_tessera("gguf synth -q --preset tiny --type Q8_0 --vocab " + vocab + " -o " + (d / "a.gguf")).exit_code, 0);
    ASSERT_EQ(run_tessera("gguf synth -q --preset tiny --type F16 --vocab " + vocab + " -o " + (d / "b.gguf")).exit_code, 0);
    // A missing file between two good ones, and a file that is not a model.
    auto r = run_tessera("bench -m " + (d / "a.gguf") + " -m " + (d / "missing.gguf") + " -m " + (d / "b.gguf") + " -m " +
                         vocab + " -p 4 -n 0 -t 1 -r 1 -o json");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err, "error: " + (d / "missing.gguf") + ": no such file")) << r.err;
    EXPECT_TRUE(contains(r.err, "ggml-vocab-llama-spm.gguf: missing tensor 'token_embd.weight'")) << r.err;
    EXPECT_TRUE(contains(r.err, "2 of 4 models failed")) << r.err;
    const json j = json::parse(r.out);
    ASSERT_EQ(j.size(), 2u) << r.out;
    EXPECT_EQ(j[0]["model_filename"], d / "a.gguf");
    EXPECT_EQ(j[0]["model_type"], "llama 4M Q8_0");
    EXPECT_EQ(j[1]["model_filename"], d / "b.gguf");
    EXPECT_EQ(j[1]["model_type"], "llama 4M F16");
    EXPECT_GT(j[1]["avg_ts"].get<double>(), 0.0);
    // The table: header, rule and the good model's row.
    r = run_tessera("bench -m " + (d / "missing.gguf") + " -m " + (d / "a.gguf") + " -p 4 -n 0 -t 1 -r 1");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err, "missing.gguf: no such file")) << r.err;
    EXPECT_EQ(cells(line_with(r.out, "pp4")).at(0), "llama 4M Q8_0") << r.out;
    // Only bad models: an empty JSON array, exit 1.
    r = run_tessera("bench -m " + (d / "missing.gguf") + " -p 4 -n 0 -o json");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(json::parse(r.out), json::array()) << r.out;
}

// Every comma-separated list option of bench refuses an empty entry or one
// that is not a whole number, naming the option and the list as given;
// --seed and --device are checked too. All before any model is loaded.
TEST(BenchCli, BadListSeedAndDeviceNameTheOption) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    temp_dir d;
    ASSERT_EQ(run_tessera("gguf synth -q --preset tiny --type Q8_0 --vocab " + vocab + " -o " + (d / "a.gguf")).exit_code, 0);
    const std::string seed_range = "expected a whole number from 0 to 18446744073709551615";
    const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
        {{"-p", "8,,8"}, "error: tessera bench: -p '8,,8': empty entry in the comma-separated list"},
        {{"-p", "8,"}, "error: tessera bench: -p '8,': empty entry in the comma-separated list"},
        {{"-p", ""}, "error: tessera bench: -p '': empty entry in the comma-separated list"},
        {{"-p", "4", "-p", ",4"}, "error: tessera bench: -p ',4': empty entry in the comma-separated list"},
        {{"-n", "2,,3"}, "error: tessera bench: -n '2,,3': empty entry in the comma-separated list"},
        {{"-t", "1, ,2"}, "error: tessera bench: -t '1, ,2': empty entry in the comma-separated list"},
        {{"-fa", "0,,1"}, "error: tessera bench: -fa '0,,1': empty entry in the comma-separated list"},
        {{"--flash-attn", ",1"}, "error: tessera bench: -fa ',1': empty entry in the comma-separated list"},
        {{"-rp", "1,"}, "error: tessera bench: -rp '1,': empty entry in the comma-separated list"},
        {{"-p", "8,x"}, "error: tessera bench: -p '8,x': 'x' is not a whole number"},
        {{"-n", "0x10"}, "error: tessera bench: -n '0x10': '0x10' is not a whole number"},
        {{"-p", "99999999999"}, "error: tessera bench: -p '99999999999': 99999999999 is out of range (0 to 2147483647)"},
        {{"-d", "-99999999999"}, "error: tessera bench: -d '-99999999999': -99999999999 is out of range (0 to 2147483647)"},
        {{"--seed", "-1"}, "error: tessera bench: --seed '-1': " + seed_range},
        {{"--seed", "18446744073709551616"}, "error: tessera bench: --seed '18446744073709551616': " + seed_range},
        {{"--seed", "abc"}, "error: tessera bench: --seed 'abc': " + seed_range},
        {{"--device", ""},
         "error: tessera bench: --device '': expected a device name (see `tessera devices`); leave --device out for the best device"},
    };
    for (const auto & [extra, want] : cases) {
        std::vector<std::string> args{"bench", "-m", d / "a.gguf", "-n", "0", "-r", "1", "-t", "1"};
        if (extra[0] != "-n" && extra[0] != "-t") args.insert(args.end(), {"-p", "4"}); // a -p is the one checked
        args.insert(args.end(), extra.begin(), extra.end());
        const auto r = run_tessera(args);
        std::string cmd;
        for (const auto & a : args) cmd += "'" + a + "' ";
        EXPECT_EQ(r.exit_code, 1) << cmd << "\n" << r.err;
        EXPECT_TRUE(contains(r.err, want)) << cmd << "\n" << r.err;
        EXPECT_EQ(r.out, "") << cmd; // refused before the table's header
    }
    // Well-formed lists (spaces around entries allowed, repeated options
    // add up) and the largest seed run.
    const auto r = run_tessera(std::vector<std::string>{"bench", "-m", d / "a.gguf", "-p", "4, 8", "-p", "2", "-n", "0", "-r",
                                                        "1", "-t", "1", "-o", "json", "--seed", "18446744073709551615"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json j = json::parse(r.out);
    ASSERT_EQ(j.size(), 3u) << r.out;
    EXPECT_EQ(j[0]["test"], "pp4");
    EXPECT_EQ(j[1]["test"], "pp8");
    EXPECT_EQ(j[2]["test"], "pp2");
}

// A test longer than a model's context names the option, the model's
// context length and the file; the other models are still benched.
TEST(BenchCli, TestLongerThanTheContextNamesTheOption) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    temp_dir d;
    ASSERT_EQ(run_tessera("gguf synth -q --preset tiny --type Q8_0 --vocab " + vocab + " -o " + (d / "a.gguf")).exit_code, 0);
    auto r = run_tessera("bench -m " + (d / "a.gguf") + " -p 4096 -n 0 -r 1 -t 1");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err, "error: " + (d / "a.gguf") + ": -p 4096: more than the model's context length of 2048 tokens"))
        << r.err;
    r = run_tessera("bench -m " + (d / "a.gguf") + " -p 4,2049 -n 0 -r 1 -t 1");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err, "error: " + (d / "a.gguf") + ": -p 2049: more than the model's context length of 2048 tokens"))
        << r.err;
    r = run_tessera("bench -m " + (d / "a.gguf") + " -p 0 -n 3000 -r 1 -t 1");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err, "error: " + (d / "a.gguf") + ": -n 3000: more than the model's context length of 2048 tokens"))
        << r.err;
    r = run_tessera("bench -m " + (d / "a.gguf") + " -p 2048 -n 0 -r 1 -t 1 --no-warmup -o json"); // exactly the context: runs
    EXPECT_EQ(r.exit_code, 0) << r.err;
}

// -d: each test runs after its depth's tokens are decoded, untimed, into
// the cache; names and JSON as the reference's bench tool ("tg2 @ d8",
// n_depth). The depth counts against the context; a bad -d is refused
// naming the option before any model is loaded.
TEST(BenchCli, DepthFillsTheCacheFirst) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    temp_dir d;
    ASSERT_EQ(run_tessera("gguf synth -q --preset tiny --type Q8_0 --vocab " + vocab + " -o " + (d / "a.gguf")).exit_code, 0);
    const std::string base = "bench -m " + (d / "a.gguf") + " -t 1 -r 1 ";
    auto r = run_tessera(base + "-p 4 -n 2 -d 0,8 -o json --progress");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json j = json::parse(r.out);
    ASSERT_EQ(j.size(), 4u) << r.out;
    const std::vector<std::tuple<std::string, int, int, int>> want = {
        {"pp4", 4, 0, 0}, {"tg2", 0, 2, 0}, {"pp4 @ d8", 4, 0, 8}, {"tg2 @ d8", 0, 2, 8}};
    for (size_t i = 0; i < want.size(); ++i) {
        const auto & [name, p, n, depth] = want[i];
        EXPECT_EQ(j[i]["test"], name) << i;
        EXPECT_EQ(j[i]["n_prompt"], p) << i;
        EXPECT_EQ(j[i]["n_gen"], n) << i;
        EXPECT_EQ(j[i]["n_depth"], depth) << i;
        EXPECT_GT(j[i]["avg_ts"].get<double>(), 0.0) << i;
    }
    EXPECT_TRUE(contains(r.err, "tg2 @ d8: repetition 1/1 (after 8 tokens of depth, untimed)")) << r.err;
    EXPECT_FALSE(contains(r.err, "tg2: repetition 1/1 (after")) << r.err;
    // The table's test column widens to the longest name.
    r = run_tessera(base + "-p 4 -n 0 -d 16");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(cells(line_with(r.out, "pp4 @ d16")).at(5), "pp4 @ d16") << r.out;
    // Depth plus the test fills the 2048-token context exactly: runs; one more: refused, naming -d.
    r = run_tessera(base + "-p 0 -n 8 -d 2040 --no-warmup -o json");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    r = run_tessera(base + "-p 0 -n 9 -d 2040 --no-warmup");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err, ": -d 2040 with -n 9: 2049 tokens, more than the model's context length of 2048")) << r.err;
    EXPECT_EQ(r.out, "") << "no table for a model refused before any test";
    for (const auto & [arg, msg] : std::vector<std::pair<std::string, std::string>>{
             {"-d -1", "error: tessera bench: -d -1: must not be negative"},
             {"-d 8,,8", "error: tessera bench: -d '8,,8': empty entry in the comma-separated list"},
             {"-d x", "error: tessera bench: -d 'x': 'x' is not a whole number"}}) {
        r = run_tessera(base + "-p 4 -n 0 " + arg);
        EXPECT_EQ(r.exit_code, 1) << arg;
        EXPECT_TRUE(contains(r.err, msg)) << arg << ": " << r.err;
        EXPECT_EQ(r.out, "") << arg;
    }
}

// -pg P,N: P prompt tokens then N generated, timed together (the
// reference's "pp4+tg2"), after the -p and -n tests; at depth too. The
// same tests in the four output formats: JSON, JSON Lines (one object a
// line), CSV (header of the JSON's field names but the sample arrays, every
// value quoted, quotes doubled: a model path with a quote in it comes back
// whole) and the table. build_commit and build_number are those of
// `tessera --version`.
TEST(BenchCli, CombinedTestsAndOutputFormats) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    temp_dir d;
    const std::string model = d / "q\"uote.gguf";
    ASSERT_EQ(run_tessera(std::vector<std::string>{"gguf", "synth", "-q", "--preset", "tiny", "--type", "Q8_0", "--vocab", vocab,
                                                   "-o", model})
                  .exit_code,
              0);
    const std::vector<std::string> base{"bench", "-m", model, "-p", "4", "-n", "2", "-pg", "4,2", "-t", "1", "-r", "2"};
    auto with = [&](std::vector<std::string> extra) {
        std::vector<std::string> a = base;
        a.insert(a.end(), extra.begin(), extra.end());
        return run_tessera(a);
    };
    const auto version = run_tessera("--version");
    ASSERT_EQ(version.exit_code, 0) << version.err;
    // After a subcommand too (it said "--model is required"); an unknown
    // option there is still refused by name.
    for (const std::string sub : {"run", "bench", "quantize", "gguf info"}) {
        const auto v = run_tessera(sub + " --version");
        EXPECT_EQ(v.exit_code, 0) << sub << ": " << v.err;
        EXPECT_EQ(v.out, version.out) << sub;
    }
    const auto bogus = run_tessera("run -m x --bogus");
    EXPECT_EQ(bogus.exit_code, 1);
    EXPECT_TRUE(contains(bogus.err, "--bogus")) << bogus.err;
    auto r = with({"-o", "json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::ordered_json::parse(r.out); // in the program's field order
    ASSERT_EQ(j.size(), 3u) << r.out;
    const std::vector<std::tuple<std::string, int, int>> want = {{"pp4", 4, 0}, {"tg2", 0, 2}, {"pp4+tg2", 4, 2}};
    for (size_t i = 0; i < want.size(); ++i) {
        const auto & [name, p, n] = want[i];
        EXPECT_EQ(j[i]["test"], name);
        EXPECT_EQ(j[i]["n_prompt"], p);
        EXPECT_EQ(j[i]["n_gen"], n);
        EXPECT_EQ(j[i]["model_filename"], model);
        const auto ts = j[i]["samples_ts"].get<std::vector<double>>();
        const auto ns = j[i]["samples_ns"].get<std::vector<uint64_t>>();
        ASSERT_EQ(ts.size(), 2u);
        for (size_t k = 0; k < 2; ++k) EXPECT_NEAR(ts[k], (p + n) * 1e9 / double(ns[k]), 1e-9 * ts[k]) << name;
        const std::string commit = j[i]["build_commit"].get<std::string>();
        EXPECT_TRUE(contains(version.out, "(commit " + commit + ", build " + std::to_string(j[i]["build_number"].get<long>()) + ")"))
            << version.out << " / " << commit;
        EXPECT_TRUE(commit == "unknown" || (commit.size() == 8 && commit.find_first_not_of("0123456789abcdef") == std::string::npos))
            << commit;
    }

    r = with({"-o", "jsonl"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto jl = lines_of(r.out);
    ASSERT_EQ(jl.size(), 3u) << r.out;
    for (size_t i = 0; i < 3; ++i) {
        const json o = json::parse(jl[i]);
        EXPECT_EQ(o["test"], j[i]["test"]);
        EXPECT_EQ(o.size(), j[i].size()); // the same fields
        EXPECT_EQ(o["model_filename"], model);
    }

    r = with({"-o", "csv"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto cl = lines_of(r.out);
    ASSERT_EQ(cl.size(), 4u) << r.out;
    const auto header = csv_cells(cl[0]);
    std::vector<std::string> keys; // the JSON's fields but the arrays, in order
    for (const auto & [k, v] : j[0].items()) {
        if (!v.is_array()) keys.push_back(k);
    }
    EXPECT_EQ(header, keys) << cl[0];
    for (size_t i = 0; i < 3; ++i) {
        const auto row = csv_cells(cl[i + 1]);
        ASSERT_EQ(row.size(), header.size()) << cl[i + 1];
        for (size_t c = 0; c < header.size(); ++c) {
            const auto & v = j[i][header[c]];
            if (header[c] == "test_time" || header[c].find("_ns") != std::string::npos || header[c].find("_ts") != std::string::npos) {
                continue; // timings differ between the runs
            }
            const std::string text = v.is_string() ? v.get<std::string>() : v.is_boolean() ? (v.get<bool>() ? "1" : "0") : v.dump();
            EXPECT_EQ(row[c], text) << header[c];
        }
    }

    r = with({}); // the table: the combined test's row, its name in the test column
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(cells(line_with(r.out, "pp4+tg2")).at(5), "pp4+tg2") << r.out;
    r = with({"-d", "8"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(cells(line_with(r.out, "pp4+tg2 @ d8")).at(5), "pp4+tg2 @ d8") << r.out;

    // Only -pg (no -p/-n tests); a bad -pg is refused before any model loads.
    r = run_tessera("bench -m " + (d / "none.gguf") + " -p 0 -n 0 -pg 4,2 -t 1 -r 1");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err, "none.gguf: no such file")) << r.err;
    for (const auto & [arg, msg] : std::vector<std::pair<std::string, std::string>>{
             {"16", "error: tessera bench: -pg '16': expected two counts, prompt tokens and generated tokens (as in -pg 512,128)"},
             {"16,4,2", "error: tessera bench: -pg '16,4,2': expected two counts"},
             {"0,4", "error: tessera bench: -pg '0,4': both counts must be at least 1 (-p and -n run one kind alone)"},
             {"4,0", "error: tessera bench: -pg '4,0': both counts must be at least 1"},
             {"a,2", "error: tessera bench: -pg 'a,2': 'a' is not a whole number"},
             {"4,", "error: tessera bench: -pg '4,': empty entry in the comma-separated list"}}) {
        r = run_tessera(std::vector<std::string>{"bench", "-m", model, "-pg", arg, "-t", "1", "-r", "1"});
        EXPECT_EQ(r.exit_code, 1) << arg;
        EXPECT_TRUE(contains(r.err, msg)) << arg << ": " << r.err;
        EXPECT_EQ(r.out, "") << arg;
    }
    // Longer than the 2048-token context, alone or with -d: refused naming -pg.
    r = run_tessera(std::vector<std::string>{"bench", "-m", model, "-p", "0", "-n", "0", "-pg", "2000,49", "-t", "1", "-r", "1"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err, ": -pg 2000,49 (2049 tokens): more than the model's context length of 2048 tokens")) << r.err;
    r = run_tessera(
        std::vector<std::string>{"bench", "-m", model, "-p", "0", "-n", "0", "-pg", "4,5", "-d", "2040", "-t", "1", "-r", "1"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err, ": -d 2040 with -pg 4,5 (9 tokens): 2049 tokens, more than the model's context length of 2048"))
        << r.err;
    // P + N beyond int: refused the same way, without overflow (UBSan).
    r = run_tessera(
        std::vector<std::string>{"bench", "-m", model, "-p", "0", "-n", "0", "-pg", "2147483647,2147483647", "-t", "1", "-r", "1"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err, ": -pg 2147483647,2147483647 (4294967294 tokens): more than the model's context length")) << r.err;
    // A model path that is not UTF-8: its bytes replaced in JSON and JSON
    // Lines (the good model's results kept), as it is in CSV's quotes.
    const std::string bad = d / "bad\xff.gguf";
    fs::copy_file(model, bad);
    for (const std::string format : {"json", "jsonl"}) {
        r = run_tessera(std::vector<std::string>{"bench", "-m", model, "-m", bad, "-p", "4", "-n", "0", "-t", "1", "-r", "1", "-o", format});
        ASSERT_EQ(r.exit_code, 0) << format << ": " << r.err;
        std::vector<json> objects;
        if (format == "json") {
            for (const auto & o : json::parse(r.out)) objects.push_back(o);
        } else {
            for (const auto & l : lines_of(r.out)) objects.push_back(json::parse(l));
        }
        ASSERT_EQ(objects.size(), 2u) << format << ": " << r.out;
        EXPECT_EQ(objects[0]["model_filename"], model);
        EXPECT_EQ(objects[1]["model_filename"], d / "bad\xef\xbf\xbd.gguf") << format; // U+FFFD
    }
    // --kv-type in either case (the JSON's type_k spelling); other types refused.
    r = run_tessera(std::vector<std::string>{"bench", "-m", model, "-p", "4", "-n", "0", "-t", "1", "-r", "1", "--kv-type", "f32",
                                             "-o", "json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(json::parse(r.out)[0]["type_k"], "f32");
    r = run_tessera(std::vector<std::string>{"bench", "-m", model, "-p", "4", "-n", "0", "--kv-type", "q8_0"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err, "--kv-type 'q8_0': cache type 'q8_0' is not one tessera has (f16 or f32)")) << r.err;
}

// Output that cannot be written (a full disk) is an error, exit 1, for
// bench's formats and --version alike; the same runs succeed otherwise.
// llama-bench's options where tessera has the feature: ranges in the
// lists, -b/-ub, -ctk/-ctv, -fa on/off/auto, -ngl (recorded), -o sql and
// -oe (a second format on stderr); one test per combination, the values in
// every format; an option tessera lacks is refused by name.
TEST(BenchCli, ReferenceOptionsRangesAndSql) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    temp_dir d;
    const std::string model = d / "m.gguf";
    ASSERT_EQ(run_tessera("gguf synth -q --preset tiny --type Q8_0 --vocab " + vocab + " -o " + model).exit_code, 0);
    auto r = run_tessera(std::vector<std::string>{"bench", "-m", model, "-p", "2-8*2", "-n", "1-3+2", "-t", "1", "-r", "1", "-b",
                                                  "2048", "-ub", "2,4", "-ctk", "F16", "-ctv", "f16", "-ngl", "99", "-fa", "on",
                                                  "-o", "json", "-oe", "jsonl", "--delay", "0"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json j = json::parse(r.out);
    // Per -ub value: pp2, pp4, pp8 (2-8*2), tg1, tg3 (1-3+2).
    const std::vector<std::string> names{"pp2", "pp4", "pp8", "tg1", "tg3"};
    ASSERT_EQ(j.size(), 2 * names.size()) << r.out;
    for (size_t i = 0; i < j.size(); ++i) {
        EXPECT_EQ(j[i]["test"], names[i % names.size()]) << i;
        EXPECT_EQ(j[i]["n_batch"], 2048);
        EXPECT_EQ(j[i]["n_ubatch"], i < names.size() ? 2 : 4);
        EXPECT_EQ(j[i]["type_k"], "f16");
        EXPECT_EQ(j[i]["type_v"], "f16");
        EXPECT_EQ(j[i]["n_gpu_layers"], 99);
        EXPECT_EQ(j[i]["flash_attn"], true);
    }
    EXPECT_TRUE(contains(r.err, "note: -ngl 99: tessera runs every layer on the bench's device (CPU)")) << r.err;
    // -oe jsonl: the same tests on stderr, one object a line.
    size_t on_stderr = 0;
    for (const std::string & line : lines_of(r.err)) {
        if (line.empty() || line[0] != '{') continue;
        const json o = json::parse(line);
        EXPECT_EQ(o["test"], j[on_stderr]["test"]);
        EXPECT_EQ(o["n_ubatch"], j[on_stderr]["n_ubatch"]);
        ++on_stderr;
    }
    EXPECT_EQ(on_stderr, j.size()) << r.err;

    // The table shows a column for each of these options given.
    r = run_tessera(std::vector<std::string>{"bench", "-m", model, "-p", "2", "-n", "0", "-t", "1", "-r", "1", "-ub", "2",
                                             "-ctk", "f32", "-ctv", "f32", "-ngl", "0", "-fa", "0,auto"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(contains(r.out, "| threads | fa | n_batch | n_ubatch | type_k | type_v | ngl |")) << r.out;
    EXPECT_TRUE(contains(r.out, "|       1 |  0 |    2048 |        2 |    f32 |    f32 |   0 |")) << r.out;
    EXPECT_TRUE(contains(r.out, "|       1 |  1 |    2048 |        2 |    f32 |    f32 |   0 |")) << r.out; // auto: on for the CPU
    EXPECT_FALSE(contains(r.err, "note: -ngl")) << r.err;

    // -ctk alone sets V too (it was refused as "-ctk f32 with -ctv f16",
    // a -ctv never given); lists of both run the pairs of one type and skip
    // the others with a note (they were refused whole); -o in either case.
    r = run_tessera(std::vector<std::string>{"bench", "-m", model, "-p", "2", "-n", "0", "-t", "1", "-r", "1", "-ctk", "f32"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(contains(r.out, "|       1 |    f32 |    f32 |          pp2 |")) << r.out;
    r = run_tessera(std::vector<std::string>{"bench", "-m", model, "-p", "2", "-n", "0", "-t", "1", "-r", "1", "-ctk", "f32,f16",
                                             "-ctv", "f32,f16", "-o", "JSONL"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto kv_lines = lines_of(r.out);
    ASSERT_EQ(kv_lines.size(), 2u) << r.out;
    EXPECT_EQ(json::parse(kv_lines[0])["type_k"], "f32");
    EXPECT_EQ(json::parse(kv_lines[0])["type_v"], "f32");
    EXPECT_EQ(json::parse(kv_lines[1])["type_k"], "f16");
    EXPECT_EQ(json::parse(kv_lines[1])["type_v"], "f16");
    EXPECT_TRUE(contains(r.err, "note: skipped -ctk f32 with -ctv f16, -ctk f16 with -ctv f32: tessera's KV cache holds K and V "
                                "in one type\n"))
        << r.err;

    // -o sql: the reference's table, then one INSERT a test with the JSON's values.
    r = run_tessera(std::vector<std::string>{"bench", "-m", model, "-p", "2", "-n", "1", "-t", "1", "-r", "1", "-o", "sql"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto sql = lines_of(r.out);
    ASSERT_FALSE(sql.empty());
    EXPECT_EQ(sql[0], "CREATE TABLE IF NOT EXISTS llama_bench (");
    EXPECT_TRUE(contains(r.out, "  model_filename TEXT,\n")) << r.out;
    EXPECT_TRUE(contains(r.out, "  n_prompt INTEGER,\n")) << r.out;
    EXPECT_TRUE(contains(r.out, "  flash_attn INTEGER,\n")) << r.out;
    EXPECT_TRUE(contains(r.out, "  stddev_ts REAL\n);\n")) << r.out;
    EXPECT_FALSE(contains(r.out, "samples_ns")) << r.out; // no arrays, as in CSV
    std::vector<std::string> inserts;
    for (const std::string & line : sql) {
        if (line.rfind("INSERT INTO llama_bench (build_commit, ", 0) == 0) inserts.push_back(line);
    }
    ASSERT_EQ(inserts.size(), 2u) << r.out;
    EXPECT_TRUE(contains(inserts[0], "'" + model + "'")) << inserts[0];
    EXPECT_TRUE(contains(inserts[0], ", 2, 0, 0, 'pp2', '")) << inserts[0]; // n_prompt, n_gen, n_depth, test
    EXPECT_TRUE(contains(inserts[1], ", 0, 1, 0, 'tg1', '")) << inserts[1];

    // Bad values name the option, the list and what is wrong; nothing runs.
    const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
        {{"-p", "8-4"}, "error: tessera bench: -p '8-4': range '8-4': runs backwards (8 is above 4)"},
        {{"-p", "1-8+0"}, "error: tessera bench: -p '1-8+0': range '1-8+0': the step must be at least 1"},
        {{"-p", "0-8*2"}, "error: tessera bench: -p '0-8*2': range '0-8*2': needs a multiplier of 2 or more and a first value of 1 or more"},
        {{"-p", "1-9*1"}, "error: tessera bench: -p '1-9*1': range '1-9*1': needs a multiplier of 2 or more and a first value of 1 or more"},
        {{"-n", "1-5000"}, "error: tessera bench: -n '1-5000': range '1-5000': more than 1024 values"},
        // each list within its bound, their product not (it was built in memory: 2e9 tests took gigabytes)
        {{"-b", "1-1024", "-ub", "1-1024", "-ngl", "0-1023"},
         "error: tessera bench: the options ask for 2147483648 tests (1 -m x 2 -p/-n/-pg x 1024 -b x 1024 -ub x 1024 -ngl), more than 100000 in one run"},
        {{"-t", "1-x"}, "error: tessera bench: -t '1-x': '1-x' is not a whole number"},
        {{"-fa", "maybe"}, "error: tessera bench: -fa 'maybe': 'maybe' is not 0, 1, off, on or auto"},
        {{"-ctk", "q8_0"}, "error: tessera bench: -ctk 'q8_0': cache type 'q8_0' is not one tessera has (f16 or f32)"},
        {{"-ctk", "f16", "-ctv", "f32"}, "error: tessera bench: -ctk f16 with -ctv f32: tessera's KV cache holds K and V in one type"},
        {{"-ub", "0"}, "error: tessera bench: -ub 0: micro-batch size must be at least 1"},
        {{"-b", "1,0"}, "error: tessera bench: -b 0: batch size must be at least 1"},
        {{"-ngl", "-2"}, "error: tessera bench: -ngl -2: expected -1 or more"},
        // the range named for a value past int's agrees with the one accepted (-1 is)
        {{"-ngl", "99999999999999"}, "error: tessera bench: -ngl '99999999999999': 99999999999999 is out of range (-1 to 2147483647)"},
        {{"-ngl", "-99999999999999"}, "error: tessera bench: -ngl '-99999999999999': -99999999999999 is out of range (-1 to 2147483647)"},
        {{"-oe", "xml"}, "error: tessera bench: -oe 'xml': expected md, json, jsonl, csv or sql"},
        {{"--delay", "-1"}, "--delay: '-1' is outside the range 0 to 86400"},
        {{"--numa", "distribute"}, "error: tessera bench: unknown option '--numa' (see tessera bench --help)"},
        {{"-sm", "none"}, "error: tessera bench: unknown option '-sm' (see tessera bench --help)"},
    };
    for (const auto & [extra, want] : bad) {
        std::vector<std::string> args{"bench", "-m", model, "-r", "1", "-t", "1"};
        args.insert(args.end(), extra.begin(), extra.end());
        const auto e = run_tessera(args);
        EXPECT_EQ(e.exit_code, 1) << extra[0];
        EXPECT_TRUE(contains(e.err, want)) << extra[0] << ": " << e.err;
        EXPECT_EQ(e.out, "") << extra[0];
    }
    const auto stray = run_tessera(std::vector<std::string>{"run", "-m", model, "stray"});
    EXPECT_EQ(stray.exit_code, 1);
    EXPECT_TRUE(contains(stray.err, "error: tessera run: unexpected argument 'stray' (see tessera run --help)")) << stray.err;
    // After "--" every argument is a value: a stray one, never an option,
    // also when spelled like an option given before it (`-p hi -- -p`).
    for (const char * after : {"-p", "--foo"}) {
        for (const bool given_before : {false, true}) {
            if (given_before && std::string_view(after) != "-p") continue; // (--foo is no option of run's)
            std::vector<std::string> args{"run", "-m", model};
            if (given_before) args.insert(args.end(), {after, "hi"});
            args.insert(args.end(), {"--", after});
            const auto dashed = run_tessera(args);
            EXPECT_EQ(dashed.exit_code, 1) << after;
            EXPECT_TRUE(contains(dashed.err, std::string("error: tessera run: unexpected argument '") + after + "' (see tessera run --help)"))
                << dashed.err;
        }
    }
}

TEST(BenchCli, OutputThatCannotBeWrittenExitsOne) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
    temp_dir d;
    ASSERT_EQ(run_tessera("gguf synth -q --preset tiny --type Q8_0 --vocab " + vocab + " -o " + (d / "m.gguf")).exit_code, 0);
    const std::string bench = std::string(TESSERA_BINARY_DIR) + "/tessera bench -m " + (d / "m.gguf") + " -p 4 -n 0 -t 1 -r 1";
    for (const std::string cmd : {bench, bench + " -o json", bench + " -o jsonl", bench + " -o csv",
                                  std::string(TESSERA_BINARY_DIR) + "/tessera --version"}) {
        const auto full = tessera::test::run_process("/bin/sh", {"-c", cmd + " > /dev/full"});
        EXPECT_EQ(full.exit_code, 1) << cmd;
        // With the reason (--version gave none: CLI11's own flush had failed).
        EXPECT_TRUE(contains(full.err, "error: could not write the output to stdout: No space left on device")) << cmd << ": " << full.err;
        const auto ok = tessera::test::run_process("/bin/sh", {"-c", cmd + " > /dev/null"});
        EXPECT_EQ(ok.exit_code, 0) << cmd << ": " << ok.err;
    }
    // The formats that write each test as it ends stop at the first failed
    // write (they ran every test first, their output already lost): one
    // test's progress of three.
    for (const std::string format : {"md", "jsonl", "csv"}) {
        const std::string cmd = bench + " -d 0,1,2 --progress -o " + format + " > /dev/full";
        const auto full = tessera::test::run_process("/bin/sh", {"-c", cmd});
        EXPECT_EQ(full.exit_code, 1) << cmd;
        EXPECT_TRUE(contains(full.err, "error: could not write the output to stdout: No space left on device")) << full.err;
        size_t reps = 0;
        for (size_t at = full.err.find("repetition 1/1"); at != std::string::npos; at = full.err.find("repetition 1/1", at + 1)) ++reps;
        EXPECT_EQ(reps, 1u) << cmd << ": " << full.err;
    }
}

// run stops generating at the first failed write of its text (it generated
// all -n tokens, then reported the failure), and a closed standard input
// read by -f - is an error, not an empty text.
TEST(TesseraCli, FailedTextOutputAndClosedInputStopTheCommand) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
    const std::string bin = std::string(TESSERA_BINARY_DIR) + "/tessera";
    const std::string model = std::string(TESSERA_SHARED_DIR) + "/models/stories260K.gguf";
    const auto sh = [](const std::string & cmd) { return tessera::test::run_process("/bin/sh", {"-c", cmd}); };
    auto r = sh(bin + " run -m " + model + " -p Once -n 1000 --temp 0 -t 1 > /dev/full");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err, "error: could not write the output to stdout: No space left on device")) << r.err;
    EXPECT_FALSE(contains(r.err, "generation:")) << r.err;
    for (const std::string cmd : {" run -m " + model + " -f - -n 3", " tokenize -m " + model + " -f -",
                                  " perplexity -m " + model + " -f - -c 16"}) {
        r = sh(bin + cmd + " <&-");
        EXPECT_EQ(r.exit_code, 1) << cmd;
        EXPECT_TRUE(contains(r.err, "error: -f '-': standard input is closed")) << cmd << ": " << r.err;
        EXPECT_EQ(r.out, "") << cmd;
    }
    r = sh(bin + " tokenize -m " + model + " -f /dev/stdin <&-"); // it opened main()'s stand-in: an empty text
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err, "error: -f '/dev/stdin': standard input is closed")) << r.err;
    r = sh(bin + " tokenize -m " + model + " -f /dev/null <&-"); // a file that is not stdin reads as usual
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "1\n");
}

// A model file that shrinks while a command reads its mapped bytes (here
// truncated while bench runs: the pages past the new end fault with SIGBUS)
// ends the command with an error naming the file, exit 1, not a bare
// "Bus error" (signal 7).
TEST(TesseraCli, ModelFileShrinkingWhileInUseIsNamed) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    temp_dir d;
    const std::string model = d / "shrink.gguf";
    fs::copy_file(std::string(TESSERA_SHARED_DIR) + "/models/stories260K.gguf", model);
    const std::string bin = std::string(TESSERA_BINARY_DIR) + "/tessera";
    // Truncated once the process has mapped it (its /proc maps name it).
    const std::string script = bin + " bench -m " + model + " -p 0 -n 64 -r 300 -t 1 --no-warmup & pid=$!; " +
                               "until grep -q shrink.gguf /proc/$pid/maps 2>/dev/null; do sleep 0.05; done; sleep 0.3; " +
                               "truncate -s 20000 " + model + "; wait $pid";
    tessera::test::process_options opt;
    opt.timeout_s = 300;
    const auto r = tessera::test::run_process("/bin/sh", {"-c", script}, opt);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_TRUE(contains(r.err, "error: gguf: " + model + ": the file shrank while in use")) << r.err;
}

// Standard streams closed or full: a closed stderr must not let the next
// file opened (quantize's and synth's temporaries) take descriptor 2 and
// receive the progress lines (the file then replaced a good output with a
// corrupt one, and the process aborted); a failed diagnostic write never
// aborts (it ended in std::terminate) and never costs the work: the file
// is written with the bytes of a normal run, the text is generated, exit 0;
// a real error still exits 1. A closed stdout is still a failed output.
TEST(TesseraCli, ClosedOrFullStandardStreams) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
    temp_dir d;
    const std::string bin = std::string(TESSERA_BINARY_DIR) + "/tessera";
    const std::string model = std::string(TESSERA_SHARED_DIR) + "/models/stories260K.gguf";
    const auto sh = [](const std::string & cmd) { return tessera::test::run_process("/bin/sh", {"-c", cmd}); };
    ASSERT_EQ(run_tessera("quantize " + model + " " + (d / "ref.gguf") + " Q8_0").exit_code, 0);
    ASSERT_EQ(run_tessera("gguf synth --preset tiny --type Q4_0 --vocab " + vocab + " -o " + (d / "ref-s.gguf")).exit_code, 0);
    for (const std::string redirect : {"2>&-", "2>/dev/full"}) {
        fs::copy_file(d / "ref.gguf", d / "q.gguf", fs::copy_options::overwrite_existing);
        auto r = sh(bin + " quantize " + model + " " + (d / "q.gguf") + " Q8_0 " + redirect);
        EXPECT_EQ(r.exit_code, 0) << redirect << ": " << r.err;
        EXPECT_EQ(slurp(d / "q.gguf"), slurp(d / "ref.gguf")) << redirect;
        r = sh(bin + " gguf synth --preset tiny --type Q4_0 --vocab " + vocab + " -o " + (d / "s.gguf") + " " + redirect);
        EXPECT_EQ(r.exit_code, 0) << redirect << ": " << r.err;
        EXPECT_EQ(slurp(d / "s.gguf"), slurp(d / "ref-s.gguf")) << redirect;
        r = sh(bin + " run -m " + model + " -p Once -n 4 --temp 0 -t 1 " + redirect);
        EXPECT_EQ(r.exit_code, 0) << redirect << ": " << r.err;
        EXPECT_TRUE(r.out.starts_with("Once") && r.out.size() > 4) << redirect << ": " << r.out;
        r = sh(bin + " run -m " + (d / "missing.gguf") + " -p Once " + redirect);
        EXPECT_EQ(r.exit_code, 1) << redirect; // the error is lost, not the status
        EXPECT_EQ(r.term_signal, 0) << redirect;
    }
    std::ofstream(d / "text.txt") << "Once upon a time";
    for (const std::string cmd : {bin + " tokenize -m " + model + " -p hi >&-", bin + " tokenize -m " + model + " -p hi >&- 2>&-",
                                  bin + " gguf info " + model + " > /dev/full",
                                  bin + " perplexity -m " + model + " -f " + (d / "text.txt") + " -c 4 -t 1 > /dev/full"}) {
        const auto r = sh(cmd);
        EXPECT_EQ(r.exit_code, 1) << cmd;
        EXPECT_EQ(r.term_signal, 0) << cmd;
        // One wording, naming the stream and the reason, whichever write failed.
        if (!contains(cmd, "2>&-")) EXPECT_TRUE(contains(r.err, "error: could not write the output to stdout: ")) << cmd << ": " << r.err;
    }
}

// -o /dev/stdout: into a redirected file it writes that file and reports
// its size (it said 0.00 MiB, the replaced file's) without a warning; into a pipe it is
// refused as not a regular file (it said "cannot create a temporary file
// in /proc/self/fd").
TEST(SynthCli, OutputThroughDevStdout) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    if (!fs::exists("/dev/stdout")) GTEST_SKIP() << "no /dev/stdout";
    temp_dir d;
    const std::string synth = std::string(TESSERA_BINARY_DIR) + "/tessera gguf synth -q --preset tiny --type Q4_0 --vocab " + vocab;
    ASSERT_EQ(run_tessera("gguf synth -q --preset tiny --type Q4_0 --vocab " + vocab + " -o " + (d / "ref.gguf")).exit_code, 0);
    auto r = tessera::test::run_process("/bin/sh", {"-c", synth + " -o /dev/stdout > " + (d / "out.gguf")});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(slurp(d / "out.gguf"), slurp(d / "ref.gguf"));
    char mib[32];
    std::snprintf(mib, sizeof mib, "%.2f MiB", double(fs::file_size(d / "ref.gguf")) / (1024.0 * 1024.0));
    EXPECT_TRUE(contains(r.err, mib)) << mib << " / " << r.err;
    // The tokenizer check reads the file written, not the replaced one
    // /dev/stdout still names (it warned "cannot read it (... truncated file: 0 bytes ...)").
    EXPECT_FALSE(contains(r.err, "warning")) << r.err;
    r = tessera::test::run_process("/bin/sh", {"-c", synth + " -o /dev/stdout | cat > /dev/null"});
    EXPECT_TRUE(contains(r.err, "/dev/stdout: not a regular file")) << r.err;
}

// An input named with a trailing '/' after a file's name ("m.gguf/") is
// reported as what it is, "Not a directory", by quantize, bench and synth's
// --vocab alike (they said "no such file" of a file that exists).
TEST(TesseraCli, AFileNamedAsADirectoryIsNotCalledMissing) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    temp_dir d;
    const std::string model = std::string(TESSERA_SHARED_DIR) + "/models/stories260K.gguf";
    const std::string slashed = model + "/";
    struct slash_case {
        std::vector<std::string> args;
        std::string message;
    };
    for (const slash_case & c : {
             slash_case{{"quantize", "-q", slashed, d / "x.gguf", "Q8_0"}, "error: " + slashed + ": Not a directory\n"},
             slash_case{{"bench", "-m", slashed, "-p", "4", "-n", "0", "-r", "1", "-t", "1"}, "error: " + slashed + ": Not a directory\n"},
             slash_case{{"gguf", "synth", "-q", "--preset", "tiny", "--vocab", vocab + "/", "-o", d / "x.gguf"},
                        "error: " + vocab + "/: Not a directory (vocabulary GGUF)\n"},
         }) {
        const auto r = run_tessera(c.args);
        EXPECT_EQ(r.exit_code, 1) << c.args[0];
        EXPECT_TRUE(contains(r.err, c.message)) << c.args[0] << ": " << r.err;
        EXPECT_FALSE(fs::exists(d / "x.gguf")) << c.args[0];
    }
}

// gguf synth's --seed takes every 64-bit value and refuses others, naming
// the flag and the range, without writing the output.
// --head-dim: a bad size names the option (range) or the problem (odd, or
// no block fits the projections), exits 1 and writes nothing.
TEST(SynthCli, HeadDimIsChecked) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    temp_dir d;
    const std::string base = "gguf synth -q --preset tiny --vocab " + vocab + " -o " + (d / "m.gguf") + " ";
    struct bad_case {
        std::string args, message;
    };
    for (const bad_case & c : {bad_case{"--head-dim 0", "--head-dim: '0' is outside the range 2 to 4096"},
                               bad_case{"--head-dim 5000", "--head-dim: '5000' is outside the range 2 to 4096"},
                               bad_case{"--head-dim 9", "synth: head size 9 must be even"},
                               bad_case{"--head-dim 20 --type Q8_0", "error: synth: blk.0.attn_output.weight: rows of 80 elements are not "
                                                                      "a multiple of the Q8_0 block size 32 (n_embd 64, n_ff 128, "
                                                                      "n_head x head size 4 x 20 = 80)"}}) {
        const auto r = run_tessera(base + c.args);
        EXPECT_EQ(r.exit_code, 1) << c.args;
        EXPECT_TRUE(contains(r.err, c.message)) << c.args << ": " << r.err;
        EXPECT_FALSE(fs::exists(d / "m.gguf")) << c.args;
    }
    const auto r = run_tessera(base + "--head-dim 24 --type F32");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(tessera::gguf::reader(d / "m.gguf").get_u32("llama.attention.key_length"), 24u);
}

TEST(SynthCli, SeedRange) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    temp_dir d;
    const std::string base = "gguf synth --preset tiny --type Q8_0 --vocab " + vocab + " -o " + (d / "m.gguf") + " --seed ";
    auto r = run_tessera(base + "18446744073709551615");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(contains(r.err, "seed 18446744073709551615,")) << r.err;
    fs::remove(d / "m.gguf");
    for (const std::string bad : {"-1", "18446744073709551616", "1e3", "seven"}) {
        r = run_tessera(base + bad);
        EXPECT_EQ(r.exit_code, 1) << bad;
        EXPECT_TRUE(contains(r.err, "error: tessera gguf synth: --seed '" + bad + "': expected a whole number from 0 to 18446744073709551615"))
            << r.err;
        EXPECT_FALSE(fs::exists(d / "m.gguf")) << bad;
    }
}

namespace {

// A whole-number option written with leading zeros means the decimal number
// (as in llama.cpp's tools), not an octal one: CLI11 converts with strtoll's
// base 0, so "-n 010" generated 8 tokens, "-c 010" made a context of 8,
// "--head-dim 010" wrote a head size of 8, and "-n 08" failed with CLI11's
// bare "Could not convert".
TEST(TesseraCli, LeadingZerosAreDecimalNotOctal) {
    if (!have_tessera()) GTEST_SKIP() << "tessera program not built";
    const std::string stories = std::string(TESSERA_SHARED_DIR) + "/models/stories260K.gguf";
    auto r = run_tessera({"run", "-m", stories, "-p", "", "--temp", "0", "-n", "010", "-c", "0020", "-b", "016",
                          "--top-k", "+040", "-t", "01"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(contains(r.err, "generation: 10 tokens")) << r.err;
    EXPECT_TRUE(contains(r.err, "1 thread, context 20, batch 16,")) << r.err;
    r = run_tessera({"run", "-m", stories, "-p", "", "--temp", "0", "-n", "08"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(contains(r.err, "generation: 8 tokens")) << r.err;
    // Zero alone, or with more zeros, is still zero; a negative keeps its sign.
    r = run_tessera({"run", "-m", stories, "-p", "", "-n", "000"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(contains(r.err, "generation: 0 tokens")) << r.err;
    r = run_tessera({"run", "-m", stories, "-p", "", "-n", "-01"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err, "--n-predict: '-1' is outside the range 0 to 16777216")) << r.err;

    temp_dir d;
    r = run_tessera({"gguf", "synth", "-q", "--preset", "tiny", "--type", "F32", "--vocab", vocab, "-o", d / "m.gguf",
                     "--head-dim", "010"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(tessera::gguf::reader(d / "m.gguf").get_u32("llama.attention.key_length"), 10u);
    // --head-dim names a value of another form as not a whole number (it
    // called "0x10" out of range).
    r = run_tessera({"gguf", "synth", "-q", "--preset", "tiny", "--vocab", vocab, "-o", d / "n.gguf", "--head-dim",
                     "0x10"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(contains(r.err, "--head-dim: '0x10' is not a whole number")) << r.err;
}

} // namespace

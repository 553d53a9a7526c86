// `tessera run` and `tessera tokenize` as a user runs them: greedy output on
// stdout byte-identical to prompt + the reference continuation, and clear
// errors with exit code 1 for bad input.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/run_process.hpp"

namespace {

namespace fs = std::filesystem;
const std::string shared_dir = TESSERA_SHARED_DIR;
const std::string tessera_bin = std::string(TESSERA_BINARY_DIR) + "/tessera";

using tessera::test::process_result;

// Runs tessera with `args` (no shell), capturing stdout and stderr apart.
process_result run(const std::vector<std::string> & args) { return tessera::test::run_process(tessera_bin, args); }

std::string from_hex(const std::string & hex) {
    std::string out;
    for (size_t i = 0; i + 1 < hex.size(); i += 2) out += char(std::stoi(hex.substr(i, 2), nullptr, 16));
    return out;
}

nlohmann::json reference(const std::string & name) {
    std::ifstream f(shared_dir + "/reference/" + name);
    return nlohmann::json::parse(f);
}

// stdout of a greedy run is exactly the prompt followed by the continuation.
TEST(cli_run, greedy_stdout_is_prompt_plus_reference_continuation) {
    const auto ref = reference("stories260K.f32.json");
    for (const auto & c : ref["cases"]) {
        const std::string prompt = c["prompt"];
        const std::string want = prompt + from_hex(c["greedy_text_hex"]);
        for (const char * batch : {"512", "1"}) {
            const process_result r = run({"run", "-m", shared_dir + "/models/stories260K.gguf", "-p", prompt, "-n", "64",
                                  "--temp", "0", "-t", "2", "-c", "512", "-b", batch});
            ASSERT_EQ(r.exit_code, 0) << r.err;
            EXPECT_EQ(r.out, want) << "prompt '" << prompt << "' batch " << batch;
            EXPECT_NE(r.err.find("generation: 64 tokens"), std::string::npos) << r.err;
            EXPECT_NE(r.err.find("device: CPU"), std::string::npos) << r.err;
            EXPECT_NE(r.err.find("load time:"), std::string::npos) << r.err;
        }
    }
}

// Same seed, same sampled text; the sampled text differs from greedy.
TEST(cli_run, seeded_sampling_is_reproducible) {
    const std::vector<std::string> args{"run", "-m", shared_dir + "/models/stories260K.gguf", "-p", "Once upon a time",
                                        "-n", "32", "--temp", "1.0", "--top-k", "40", "--top-p", "0.9",
                                        "--min-p", "0.05", "--repeat-penalty", "1.1", "--seed", "42"};
    const process_result a = run(args);
    const process_result b = run(args);
    ASSERT_EQ(a.exit_code, 0) << a.err;
    EXPECT_EQ(a.out, b.out);
    EXPECT_EQ(a.out.rfind("Once upon a time", 0), 0u);
}

// --seed takes every 64-bit value: the default is seed 0, a seed below 2^32
// draws as before (tests/llm/test_sampler.cpp pins the generator), and the
// high half of a larger one counts (42 + 2^32 is not 42).
TEST(cli_run, seed_takes_64_bit_values) {
    const std::vector<std::string> base{"run", "-m", shared_dir + "/models/stories260K.gguf", "-p", "Once upon a time",
                                        "-n", "24", "--temp", "1.0", "-t", "1"};
    const auto with_seed = [&](const std::string & seed) {
        std::vector<std::string> args = base;
        args.insert(args.end(), {"--seed", seed});
        const process_result r = run(args);
        EXPECT_EQ(r.exit_code, 0) << seed << "\n" << r.err;
        return r.out;
    };
    const process_result plain = run(base);
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    EXPECT_EQ(with_seed("0"), plain.out);
    const std::string s42 = with_seed("42");
    EXPECT_EQ(with_seed("+42"), s42); // a '+' as -n and the other whole numbers take
    const std::string s42_high = with_seed("4294967338"); // 42 + 2^32
    EXPECT_NE(s42_high, s42);
    EXPECT_EQ(with_seed("4294967338"), s42_high);
    const std::string max = with_seed("18446744073709551615");
    EXPECT_EQ(max.rfind("Once upon a time", 0), 0u) << max;
    EXPECT_EQ(with_seed("18446744073709551615"), max);
}

// --pieces quotes each piece with the quote, backslash and control bytes
// escaped: one line an id (stories260K: 439 is "'", 500 "\\", 13 the
// byte-fallback newline, 12 the tab).
TEST(cli_tokenize, pieces_are_escaped_one_per_line) {
    const process_result r =
        run({"tokenize", "-m", shared_dir + "/models/stories260K.gguf", "-p", "a'b\\c\nd\te", "--pieces"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "1 '<s>'\n261 ' a'\n439 '\\''\n430 'b'\n500 '\\\\'\n429 'c'\n13 '\\n'\n418 'd'\n12 '\\t'\n411 'e'\n");
}

// A piece that is not UTF-8 text (a byte-fallback piece such as <0xFF>, or
// one byte of a character the vocabulary splits) is escaped byte by byte,
// so the output stays valid UTF-8 (the bytes went out raw); UTF-8 text
// stays as it is (llama-spm: 28059 "afé", 30325 "日").
TEST(cli_tokenize, pieces_that_are_not_utf8_are_escaped) {
    const std::string vocab = shared_dir + "/vocab/ggml-vocab-llama-spm.gguf";
    process_result r = run({"tokenize", "-m", vocab, "-p", "caf\xc3\xa9 \xe6\x97\xa5", "--pieces", "--no-bos"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "274 ' c'\n28059 'af\xc3\xa9'\n29871 ' '\n30325 '\xe6\x97\xa5'\n");
    r = run({"tokenize", "-m", shared_dir + "/models/stories260K.gguf", "-p", "\xff\xc3\xa9", "--pieces", "--no-bos"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "410 ' '\n258 '\\xff'\n198 '\\xc3'\n172 '\\xa9'\n");
}

// The program alone in a folder (no CPU plugin beside it, none in
// TESSERA_BACKEND_PATH): run says where it looked and what to set.
TEST(cli_run, no_backend_names_the_folders_searched) {
    const fs::path dir = fs::temp_directory_path() / "tessera_cli_lone";
    fs::remove_all(dir);
    fs::create_directories(dir / "empty");
    fs::copy_file(tessera_bin, dir / "tessera");
    tessera::test::process_options opt;
    opt.env = {"TESSERA_BACKEND_PATH=" + (dir / "empty").string()};
    const process_result r = tessera::test::run_process((dir / "tessera").string(),
                                                        {"run", "-m", shared_dir + "/models/stories260K.gguf", "-p", "x"}, opt);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("no compute device found (no CPU backend could be loaded; looked for libtessera-cpu-*.so in: "),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find((dir / "empty").string()), std::string::npos) << r.err;
    const bool own_folder = r.err.find(dir.string() + ";") != std::string::npos || r.err.find(dir.string() + ",") != std::string::npos;
    EXPECT_TRUE(own_folder) << "the program's own folder " << dir << " not listed: " << r.err;
    EXPECT_NE(r.err.find("set TESSERA_BACKEND_PATH"), std::string::npos) << r.err;
    fs::remove_all(dir);
}

TEST(cli_tokenize, prints_reference_ids) {
    const auto ref = reference("llama-2-tiny-random.json");
    for (const auto & c : ref["cases"]) {
        const std::string prompt = c["prompt"];
        const process_result r = run({"tokenize", "-m", shared_dir + "/models/llama-2-tiny-random.gguf", "-p", prompt});
        ASSERT_EQ(r.exit_code, 0) << r.err;
        std::string want;
        for (const auto & id : c["prompt_ids"]) want += (want.empty() ? "" : " ") + std::to_string(id.get<int>());
        EXPECT_EQ(r.out, want + "\n") << prompt;
    }
}

struct bad_case {
    std::vector<std::string> args;
    std::string message; // must appear on stderr
};

// More threads than the machine runs at once: a warning naming -t, and the
// same greedy text as with one thread; as many as it has: no warning.
TEST(cli_run, oversubscribed_threads_warn) {
    const int hw = int(std::thread::hardware_concurrency());
    if (hw < 1) GTEST_SKIP() << "hardware_concurrency unknown";
    const std::string model = shared_dir + "/models/stories260K.gguf";
    const process_result over = run({"run", "-m", model, "-p", "Once", "-n", "4", "--temp", "0", "-t", std::to_string(hw + 1)});
    EXPECT_EQ(over.exit_code, 0) << over.err;
    EXPECT_NE(over.err.find("warning: -t " + std::to_string(hw + 1) + " is more than the " + std::to_string(hw) +
                            " hardware threads"),
              std::string::npos)
        << over.err;
    const process_result fit = run({"run", "-m", model, "-p", "Once", "-n", "4", "--temp", "0", "-t", std::to_string(hw)});
    EXPECT_EQ(fit.exit_code, 0) << fit.err;
    EXPECT_EQ(fit.err.find("warning: -t"), std::string::npos) << fit.err;
    EXPECT_EQ(over.out, fit.out);
}

// A bad tuning variable is reported on stderr when the backend starts,
// whatever the model's weight types, and never on stdout; the text is the
// one the defaults give.
TEST(cli_run, bad_tuning_variable_warns_at_start) {
    const std::vector<std::string> args = {"run", "-m", shared_dir + "/models/stories260K.gguf", "-p", "Once", "-n", "4",
                                           "--temp", "0", "-t", "1"};
    tessera::test::process_options opt;
    opt.env = {"TESSERA_CPU_STREAM_PREFETCH=63"};
    const process_result bad = tessera::test::run_process(tessera_bin, args, opt);
    const process_result plain = run(args);
    EXPECT_EQ(bad.exit_code, 0) << bad.err;
    EXPECT_NE(bad.err.find("warning: TESSERA_CPU_STREAM_PREFETCH"), std::string::npos) << bad.err;
    EXPECT_LT(bad.err.find("warning: TESSERA_CPU_STREAM_PREFETCH"), bad.err.find("device: ")) << bad.err;
    EXPECT_EQ(bad.out, plain.out);
}

// -f reads the prompt (run) or text (tokenize) from a file, byte for byte:
// the same output as the same text given with -p, newlines and all.
TEST(cli_run, prompt_from_a_file_is_the_same_as_from_p) {
    const std::string stories = shared_dir + "/models/stories260K.gguf";
    const fs::path file = fs::temp_directory_path() / ("tessera_cli_prompt_" + std::to_string(::getpid()) + ".txt");
    const std::string prompt = "Once upon a time\nthere was a dog.\n";
    std::ofstream(file, std::ios::binary) << prompt;
    const process_result by_p = run({"run", "-m", stories, "-p", prompt, "-n", "16", "--temp", "0"});
    const process_result by_f = run({"run", "-m", stories, "-f", file.string(), "-n", "16", "--temp", "0"});
    ASSERT_EQ(by_p.exit_code, 0) << by_p.err;
    ASSERT_EQ(by_f.exit_code, 0) << by_f.err;
    EXPECT_EQ(by_f.out, by_p.out);
    EXPECT_EQ(by_f.out.rfind(prompt, 0), 0u) << by_f.out;
    const process_result ids_p = run({"tokenize", "-m", stories, "-p", prompt});
    const process_result ids_f = run({"tokenize", "-m", stories, "-f", file.string()});
    ASSERT_EQ(ids_f.exit_code, 0) << ids_f.err;
    EXPECT_EQ(ids_f.out, ids_p.out);
    EXPECT_NE(ids_f.out.find(" 13 "), std::string::npos) << ids_f.out; // the newline's byte token <0x0A>
    // "-": standard input (here /dev/null): BOS alone.
    const process_result empty = run({"tokenize", "-m", stories, "-f", "-"});
    EXPECT_EQ(empty.exit_code, 0) << empty.err;
    EXPECT_EQ(empty.out, "1\n");
    fs::remove(file);
}

TEST(cli_errors, clear_message_and_exit_1) {
    const std::string stories = shared_dir + "/models/stories260K.gguf";
    const fs::path not_gguf = fs::temp_directory_path() / "tessera_cli_not_gguf.txt";
    std::ofstream(not_gguf) << "this is not a GGUF file, just some text\n";
    const fs::path huge = fs::temp_directory_path() / "tessera_cli_huge.txt"; // sparse: 256 MiB + 1 byte
    std::ofstream(huge) << "x";
    fs::resize_file(huge, (uintmax_t(256) << 20) + 1);
    std::string the_2047 = "the"; // 2047 tokens ' the' after BOS: the whole context of 2048
    for (int i = 1; i < 2047; ++i) the_2047 += " the";
    const std::vector<bad_case> cases = {
        {{"run", "-m", "/nonexistent/m.gguf", "-p", "x"}, "/nonexistent/m.gguf"},
        {{"run", "-m", not_gguf.string(), "-p", "x"}, "tessera_cli_not_gguf.txt"},
        {{"run", "-m", shared_dir + "/models/mnist-fc-f32.gguf", "-p", "x"}, "unsupported architecture 'mnist-fc'"},
        {{"run", "-m", shared_dir + "/vocab/ggml-vocab-llama-spm.gguf", "-p", "x"}, "missing tensor 'token_embd.weight'"},
        {{"run", "-m", stories, "-p", "x", "--device", "NoSuchGPU"}, "unknown device 'NoSuchGPU'"},
        {{"run", "-m", stories, "-p", "x", "--device", "GPU\x1b[2J"}, "unknown device 'GPU\\x1b[2J'"}, // escaped
        {{"run", "-m", stories, "-p", "x", "--device", ""},
         "error: tessera run: --device '': expected a device name (see `tessera devices`); leave --device out for the best device (see tessera run --help)"},
        {{"run", "-m", stories, "-p", "x", "--seed", "-1"},
         "error: tessera run: --seed '-1': expected a whole number from 0 to 18446744073709551615 (see tessera run --help)"},
        {{"run", "-m", stories, "-p", "x", "--seed", "18446744073709551616"},
         "error: tessera run: --seed '18446744073709551616': expected a whole number from 0 to 18446744073709551615 (see tessera run --help)"},
        {{"run", "-m", stories, "-p", "x", "--seed", "4294967296x"},
         "error: tessera run: --seed '4294967296x': expected a whole number from 0 to 18446744073709551615 (see tessera run --help)"},
        {{"run", "-m", stories, "-p", "x", "--seed", ""}, "error: tessera run: --seed '': expected a whole number from 0 to 18446744073709551615 (see tessera run --help)"},
        {{"run", "-m", stories, "-p", "x", "--seed", "+"}, "error: tessera run: --seed '+': expected a whole number from 0"},
        {{"run", "-m", stories, "-p", "x", "--seed", "+-1"}, "error: tessera run: --seed '+-1': expected a whole number from 0"},
        // A flag's value that does not convert: the option and the value,
        // not CLI11's "Could not convert: --pieces = banana".
        {{"tokenize", "-m", stories, "-p", "a", "--pieces=banana"},
         "error: tessera tokenize: --pieces 'banana': a flag takes no value, or true or false (see tessera tokenize --help)"},
        {{"run", "-m", stories, "-p", "x", "-n", "-5"}, "-n"},
        {{"run", "-m", stories, "-p", "x", "--top-p", "2"}, "--top-p"},
        {{"run", "-m", stories, "-p", "x", "--temp", "nan"}, "error: tessera run: --temp: 'nan' is not a finite number"},
        {{"run", "-m", stories, "-p", "x", "--min-p", "NaN"}, "--min-p: 'NaN' is not a finite number"},
        {{"run", "-m", stories, "-p", "x", "--temp", "1e999"}, "--temp: '1e999' is not a finite number"},
        // '+' is a sign and an underflow is 0, as strtof read them: in range here.
        {{"run", "-m", stories, "-p", "x", "--temp", "+200"}, "--temp: '+200' is outside the range 0 to 100 (see"},
        {{"run", "-m", stories, "-p", "x", "--top-p", "+2"}, "--top-p: '+2' is outside the range 0 to 1 (see"},
        // Not numbers: named as such, not "outside the range".
        {{"run", "-m", stories, "-p", "x", "--temp", "abc"}, "--temp: 'abc' is not a number"},
        {{"run", "-m", stories, "-p", "x", "--top-p", ""}, "--top-p: '' is not a number"},
        {{"run", "-m", stories, "-p", "x", "--repeat-penalty", "0.5x"}, "--repeat-penalty: '0.5x' is not a number"},
        // Another tool's one-dash options are unknown options, not a
        // one-letter option with a glued value ("-fa" was "-f a").
        {{"run", "-m", stories, "-p", "x", "-fa", "on"}, "error: tessera run: unknown option '-fa' (see tessera run --help)"},
        {{"run", "-m", stories, "-p", "x", "-ngl", "99"}, "error: tessera run: unknown option '-ngl' (see"},
        {{"run", "-m", stories, "-p", "x", "-ctk", "f16"}, "error: tessera run: unknown option '-ctk' (see"},
        {{"run", "-m", stories, "-p=-hello"},
         "error: tessera run: unknown option '-p=-hello' (an option's value goes after a space: '-p -hello')"},
        {{"run", "-m", stories, "-n", "2", "--n-predict", "2"}, "error: tessera run: --n-predict:"},
        {{"run", "-m", stories, "-p", "x", "-t", "many"}, "-t"},
        {{"run", "-m", stories, "-p", "x", "--bogus"}, "--bogus"},
        {{"run", "-m", stories, "-p", "x", "-c", "100000"}, "exceeds the model's context length 2048"},
        {{"run", "-m", stories, "-p", "Once upon a time there was", "-c", "4"}, "more than the context size 4 (raise it with -c, up to the model's 2048)"},
        {{"run", "-m", stories, "-p", "Once", "-c", "8", "-n", "100", "--temp", "0"},
         "error: the context of 8 tokens is full after 7 generated tokens (raise it with -c, up to the model's 2048)"},
        // One token: singular (the prompt "Once" is BOS + 1 token; "" is BOS alone).
        {{"run", "-m", stories, "-p", "Once", "-c", "2", "-n", "100", "--temp", "0"},
         "error: the context of 2 tokens is full after 1 generated token (raise it with -c, up to the model's 2048)"},
        {{"run", "-m", stories, "-p", "", "-c", "1", "-n", "100", "--temp", "0"},
         "error: the context of 1 token is full after 1 generated token (raise it with -c, up to the model's 2048)"},
        {{"run", "-p", "x"}, "--model"},
        // Numbers CLI11's range check would call out of range.
        {{"run", "-m", stories, "-p", "x", "-n", "1e3"}, "--n-predict: '1e3' is not a whole number"},
        {{"run", "-m", stories, "-p", "x", "-c", "2.5"}, "--ctx-size: '2.5' is not a whole number"},
        {{"run", "-m", stories, "-p", "x", "--top-k", "4k"}, "--top-k: '4k' is not a whole number"},
        // -f: the prompt from a file, not beside -p.
        {{"run", "-m", stories, "-f", "/nonexistent/prompt.txt"},
         "error: -f '/nonexistent/prompt.txt': cannot open it: No such file or directory"},
        {{"run", "-m", stories, "-f", shared_dir}, "error: -f '" + shared_dir + "': cannot read it: Is a directory"},
        // An empty file name is no file (run generated from an empty prompt).
        {{"run", "-m", stories, "-f", "", "-n", "2"}, "error: -f '': cannot open it: No such file or directory"},
        {{"tokenize", "-m", stories, "-f", ""}, "error: -f '': cannot open it: No such file or directory"},
        {{"run", "-m", stories, "-p", "x", "-f", not_gguf.string()}, "--prompt excludes --file"},
        {{"tokenize", "-m", stories}, "error: tokenize: give the text with -p or -f"},
        {{"tokenize", "-m", stories, "-f", "/nonexistent/t.txt"},
         "error: -f '/nonexistent/t.txt': cannot open it: No such file or directory"},
        {{"tokenize", "-m", "/nonexistent/v.gguf", "-p", "x"}, "/nonexistent/v.gguf"},
        // An endless text ends in an error naming the limit, not in all of
        // the memory (it read /dev/zero until std::bad_alloc or the OOM
        // killer); a larger regular file is refused by its size.
        {{"run", "-m", stories, "-f", "/dev/zero"}, "error: -f '/dev/zero': longer than 256 MiB, the most a text file may hold here"},
        {{"tokenize", "-m", stories, "-f", "/dev/zero"}, "error: -f '/dev/zero': longer than 256 MiB"},
        {{"tokenize", "-m", stories, "-f", huge.string()}, "error: -f '" + huge.string() + "': longer than 256 MiB"},
        {{"quantize", "", "out.gguf", "Q8_0"}, "error: quantize: the input path is empty"},
        {{"quantize", stories, "", "Q8_0"}, "error: quantize: the output path is empty"},
        // A prompt that fills the model's whole context: no -c to raise.
        {{"run", "-m", stories, "-p", the_2047, "-n", "4", "--temp", "0"},
         "error: the context of 2048 tokens is full after 1 generated token (the model's own context length)"},
    };
    for (const auto & c : cases) {
        const process_result r = run(c.args);
        std::string cmd;
        for (const auto & a : c.args) cmd += a + " ";
        EXPECT_EQ(r.exit_code, 1) << cmd << "\nstderr: " << r.err;
        EXPECT_NE(r.err.find(c.message), std::string::npos) << cmd << "\nstderr: " << r.err;
    }
    fs::remove(not_gguf);
    fs::remove(huge);
}

} // namespace

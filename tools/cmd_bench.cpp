// tools/cmd_bench.cpp — `tessera bench`: prompt-processing (pp) and
// token-generation (tg) speed of GGUF models, reported like the reference's
// bench tool (llama.cpp tools/llama-bench: same test definitions, same JSON
// field names, so one script can read both):
//   ppP: a fresh (empty) cache, one decode call of P random tokens (BOS first
//        when the model asks for it), split into micro-batches of -b tokens;
//   tgN: a fresh cache, N decode calls of one token each (BOS first, then
//        random tokens);
//   ppP+tgN (-pg P,N): a fresh cache, the pp test's decode of P tokens, then
//        the tg test's N decodes of one token, timed together: the speed of
//        answering a prompt;
//   with -d D > 0 ("pp512 @ d1024", "tg128 @ d1024"): the cache first holds
//        D tokens (one untimed decode of a random prompt, BOS first), and
//        the test's tokens (random, no BOS) follow them: speed at depth.
// Each test runs once untimed (warm-up), then -r times timed; tokens/s of a
// repetition = tokens / seconds; the table shows mean ± sample standard
// deviation (n - 1) of those rates. Output: a markdown table (-o md), or
// the reference's JSON array (json), JSON Lines (jsonl: one object a line,
// as each test ends) or CSV (csv: a header of field names, then one row a
// test, every value double-quoted, without the samples arrays).
// With --limits, the machine's limits for the test's thread count are
// measured just before and just after each test (bench/machine_peaks.hpp:
// the widest F32 FMA chains, a 512 MiB streaming read; the larger of the
// two counts: on shared virtual machines the memory bandwidth moves by a
// third within minutes), and each test on the CPU is also given as a
// fraction of its limit, as this project's speed goals are stated:
//   tg: mean t/s x weight bytes read per token / read bandwidth (every
//       weight but the token embeddings, of which a token reads one row;
//       all of them when the output matrix is tied to them);
//   pp: mean t/s x 2 x n_params / F32 FMA peak (2 FLOP per parameter and
//       token; quantized and BF16 weights may exceed 1: their kernels run
//       on integer and BF16 dot products).
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "build_info.hpp"
#include "commands.hpp"
#include "machine_peaks.hpp"
#include "tessera/core/error.hpp"
#include "tessera/llm/file_type.hpp"
#include "tessera/llm/model.hpp"
#include "tessera/llm/session.hpp"

namespace tessera::tools {

namespace {

using json = nlohmann::ordered_json;
using clock_type = std::chrono::steady_clock;

// The comma-separated list options as given, one string per occurrence
// (CLI11's own ',' delimiter silently drops empty entries: int_list checks them).
struct list_args {
    std::vector<std::string> n_prompt{"512"}, n_gen{"128"}, n_depth{"0"}, threads, flash_attn, repack;
    std::vector<std::string> prompt_gen; // -pg, one "P,N" pair each
};

// A combined test (-pg P,N): P prompt tokens, then N generated.
struct prompt_gen {
    int n_prompt = 0, n_gen = 0;
};

struct options {
    std::vector<std::string> models;
    list_args lists;
    std::vector<int> n_prompt;   // parsed from lists by check_options
    std::vector<int> n_gen;
    std::vector<int> n_depth;    // -d: tokens in the cache before each test
    std::vector<prompt_gen> pg;  // -pg: the combined tests
    std::vector<int> threads;    // empty = all hardware threads
    std::vector<int> flash_attn; // -fa values (0/1); empty = the session's automatic choice
    std::vector<int> repack;     // --rp values (0/1): repacked weight layout; empty = on
    int reps = 5;
    int n_batch = 512;
    std::string output = "md"; // md, json, jsonl or csv
    std::string device;
    bool device_given = false; // --device was on the command line (an empty name is an error, not "the best")
    std::string kv_type = "F16";
    bool no_warmup = false;
    bool progress = false;
    std::string seed_text = "1234"; // --seed as given (parse_seed)
    uint64_t seed = 1234;
    bool limits = false; // --limits: measure the machine's limits, print fractions of them
};

// The machine's limits for one thread count (--limits); 0 = not measured
// (the processor lacks the instructions, or the buffer could not be had).
struct machine_limits {
    double fma_flops = 0;  // F32 FMA FLOP/s
    int fma_bits = 0;      // of these vectors
    double read_bps = 0;   // streaming read bytes/s
};

// One finished test.
struct result {
    std::string filename, model_type, backend, cpu_info;
    uint64_t model_size = 0;
    int64_t n_params = 0;
    int n_threads = 0, n_prompt = 0, n_gen = 0, n_depth = 0, n_batch = 0;
    std::string kv_type, test_time;
    bool flash_attn = false; // fused attention used (as resolved by the session)
    bool repack = true;      // weight matrices in CPU_REPACK: asked for (--rp) and the device had it
    std::vector<uint64_t> samples_ns;
    // --limits only: the weight bytes a decoded token reads, this thread
    // count's limits, and the test's fraction of its limit (0: none).
    bool with_limits = false;
    uint64_t weight_bytes_per_token = 0;
    machine_limits limits;
    double of_limit = 0;
    const char * limit_name = ""; // "bw" (tg) or "FMA" (pp)

    int n_tokens() const { return n_prompt + n_gen; }
    std::vector<double> samples_ts() const {
        std::vector<double> ts;
        for (uint64_t ns : samples_ns) ts.push_back(1e9 * n_tokens() / double(ns));
        return ts;
    }
};

double mean(const std::vector<double> & v) {
    if (v.empty()) return 0.0;
    double s = 0.0;
    for (double x : v) s += x;
    return s / double(v.size());
}

// Sample standard deviation (divides by n - 1); 0 for fewer than 2 values.
double stddev(const std::vector<double> & v) {
    if (v.size() < 2) return 0.0;
    const double m = mean(v);
    double s = 0.0;
    for (double x : v) s += (x - m) * (x - m);
    return std::sqrt(s / double(v.size() - 1));
}

template <class T> std::vector<double> as_double(const std::vector<T> & v) { return {v.begin(), v.end()}; }

std::string utc_now() {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

// "llama 1B Q4_0", "llama 1B Q4_K - Medium": architecture, size class, file
// type (the reference's model description; general.file_type named as its
// bench names llama_ftype ids, llm::file_type_description), or the most
// common weight type when the file has no known id.
std::string model_type(const llm::model & m) {
    const double n = double(m.n_params());
    std::string size = n >= 1e9 ? fmt::format("{:.0f}B", n / 1e9) : fmt::format("{:.0f}M", n / 1e6);
    return fmt::format("{} {} {}", m.hp().arch, size, m.type_description());
}

std::string size_text(uint64_t bytes) {
    const double gib = 1024.0 * 1024.0 * 1024.0;
    if (double(bytes) >= gib) return fmt::format("{:.2f} GiB", double(bytes) / gib);
    return fmt::format("{:.2f} MiB", double(bytes) / (1024.0 * 1024.0));
}

std::string params_text(int64_t n) {
    if (n >= 1000000000) return fmt::format("{:.2f} B", double(n) / 1e9);
    return fmt::format("{:.2f} M", double(n) / 1e6);
}

// "pp512", "tg128", "tg128 @ d1024": the reference's test names.
std::string test_name(int n_prompt, int n_gen, int n_depth) {
    const std::string at = n_depth > 0 ? fmt::format(" @ d{}", n_depth) : "";
    if (n_gen == 0) return fmt::format("pp{}{}", n_prompt, at);
    if (n_prompt == 0) return fmt::format("tg{}{}", n_gen, at);
    return fmt::format("pp{}+tg{}{}", n_prompt, n_gen, at);
}

std::string test_name(const result & r) { return test_name(r.n_prompt, r.n_gen, r.n_depth); }

// Markdown table, one row per test, printed as results arrive (the header
// with the first).
struct md_printer {
    static constexpr int w_model = 24, w_size = 10, w_params = 10, w_backend = 7, w_threads = 7, w_ts = 20;
    int w_test = 12; // widened to the longest test name ("tg128 @ d1024")
    bool show_fa = false; // an "fa" column after "threads" (only when -fa was given)
    bool show_rp = false; // an "rp" column after that (only when --rp was given)
    bool show_limit = false; // an "of limit" column at the end (--limits)
    void header() const {
        fmt::print("| {:<{}} | {:>{}} | {:>{}} | {:<{}} | {:>{}} |{} {:>{}} | {:>{}} |{}\n", "model", w_model, "size", w_size,
                   "params", w_params, "backend", w_backend, "threads", w_threads,
                   std::string(show_fa ? " fa |" : "") + (show_rp ? " rp |" : ""), "test",
                   w_test, "t/s", w_ts, show_limit ? "   of limit |" : "");
        fmt::print("| {:-<{}} | {:->{}}: | {:->{}}: | {:-<{}} | {:->{}}: |{} {:->{}}: | {:->{}}: |{}\n", "", w_model, "",
                   w_size - 1, "", w_params - 1, "", w_backend, "", w_threads - 1,
                   std::string(show_fa ? " -: |" : "") + (show_rp ? " -: |" : ""), "",
                   w_test - 1, "", w_ts - 1, show_limit ? " ---------: |" : "");
        std::fflush(stdout);
    }
    bool header_done = false;
    // Prints the header first, with the first row: a model refused before
    // any test ran (a missing file, a context too short) leaves no table.
    void row(const result & r) {
        if (!header_done) {
            header();
            header_done = true;
        }
        const auto ts = r.samples_ts();
        // Two decimals; two significant digits below 0.1 (an oversubscribed run).
        const std::string limit = r.of_limit <= 0     ? "n/a"
                                  : r.of_limit < 0.1 ? fmt::format("{:.2g} {}", r.of_limit, r.limit_name)
                                                     : fmt::format("{:.2f} {}", r.of_limit, r.limit_name);
        fmt::print("| {:<{}} | {:>{}} | {:>{}} | {:<{}} | {:>{}} |{} {:>{}} | {:>{}} |{}\n", r.model_type, w_model,
                   size_text(r.model_size), w_size, params_text(r.n_params), w_params, r.backend, w_backend,
                   r.n_threads, w_threads,
                   std::string(show_fa ? (r.flash_attn ? "  1 |" : "  0 |") : "") + (show_rp ? (r.repack ? "  1 |" : "  0 |") : ""),
                   test_name(r), w_test,
                   fmt::format("{:.2f} ± {:.2f}", mean(ts), stddev(ts)), w_ts,
                   show_limit ? fmt::format(" {:>10} |", limit) : "");
        std::fflush(stdout);
    }
};

json to_json(const result & r) {
    const auto ts = r.samples_ts();
    const auto ns = as_double(r.samples_ns);
    json j;
    j["build_commit"] = k_build_commit;
    j["build_number"] = k_build_number;
    j["cpu_info"] = r.cpu_info;
    j["gpu_info"] = "";
    j["backends"] = r.backend;
    j["model_filename"] = r.filename;
    j["model_type"] = r.model_type;
    j["model_size"] = r.model_size;
    j["model_n_params"] = r.n_params;
    j["n_params"] = r.n_params;
    j["n_batch"] = r.n_batch;
    j["n_ubatch"] = r.n_batch;
    j["n_threads"] = r.n_threads;
    j["type_k"] = lower(r.kv_type);
    j["type_v"] = lower(r.kv_type);
    j["flash_attn"] = r.flash_attn;
    j["repack"] = r.repack;
    j["n_gpu_layers"] = 0;
    j["n_prompt"] = r.n_prompt;
    j["n_gen"] = r.n_gen;
    j["n_depth"] = r.n_depth;
    j["test"] = test_name(r);
    j["test_time"] = r.test_time;
    j["avg_ns"] = static_cast<uint64_t>(std::llround(mean(ns)));
    j["stddev_ns"] = static_cast<uint64_t>(std::llround(stddev(ns)));
    j["avg_ts"] = mean(ts);
    j["stddev_ts"] = stddev(ts);
    j["samples_ns"] = r.samples_ns;
    j["samples_ts"] = ts;
    if (r.with_limits) { // --limits (not in the reference's output)
        j["weight_bytes_per_token"] = r.weight_bytes_per_token;
        j["fma_peak_flops"] = r.limits.fma_flops;
        j["fma_peak_bits"] = r.limits.fma_bits;
        j["read_bw_bytes_per_s"] = r.limits.read_bps;
        j["of_limit"] = r.of_limit;
        j["limit"] = r.limit_name;
    }
    return j;
}

// JSON text of j; bytes of strings that are not UTF-8 (a model path from
// the command line) are replaced by U+FFFD rather than failing the output.
std::string dump(const json & j, int indent) {
    return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

// RFC 4180 field: the value's text in double quotes, quotes inside doubled
// (every field quoted, and true/false as 1/0, as the reference's CSV has them).
std::string csv_field(const json & v) {
    const std::string text = v.is_string() ? v.get<std::string>() : v.is_boolean() ? (v.get<bool>() ? "1" : "0") : v.dump();
    std::string out = "\"";
    for (char c : text) {
        if (c == '"') out += '"';
        out += c;
    }
    return out + "\"";
}

// One CSV line of `j`'s fields that are not arrays (the samples), in its
// order; with header = true, their names instead.
std::string csv_line(const json & j, bool header) {
    std::string line;
    for (const auto & [key, value] : j.items()) {
        if (value.is_array()) continue;
        if (!line.empty()) line += ',';
        line += header ? csv_field(key) : csv_field(value);
    }
    return line;
}

// Bytes of weights one decoded token reads: every weight tensor but the
// token embeddings (GET_ROWS reads one row of them), which count when the
// output matrix is tied to them.
uint64_t weight_bytes_per_token(const llm::model & m) {
    const bool tied = m.output == m.tok_embd;
    return m.n_bytes() - (m.tok_embd != nullptr && !tied ? nbytes(m.tok_embd) : 0);
}

// "1 thread", "2 threads".
std::string threads_text(int n) {
    return fmt::format("{} thread{}", n, n == 1 ? "" : "s");
}

// Measures the limits of n threads (see the top of this file). More
// threads than the hardware has share its cores, so each runs fewer FMA
// trips (the measurement takes as long as for the hardware's count). Says
// on stderr, once per thread count, what could not be measured.
machine_limits measure_limits(int n, std::map<int, bool> & warned) {
    machine_limits l;
    l.fma_bits = bench::fma_bits();
    const long hw = std::max(1L, long(std::thread::hardware_concurrency()));
    if (l.fma_bits > 0) l.fma_flops = bench::measure_fma_peak(n, l.fma_bits, bench::k_peak_iters * std::min<long>(n, hw) / n);
    size_t buffer = size_t{512} << 20;
    l.read_bps = bench::measure_read_bw(n, buffer);
    if (l.read_bps == 0 && l.fma_bits > 0) { // memory tight: a smaller buffer
        buffer = size_t{128} << 20;
        l.read_bps = bench::measure_read_bw(n, buffer);
    }
    if (!warned[n] && (l.fma_flops == 0 || l.read_bps == 0 || buffer != size_t{512} << 20)) {
        warned[n] = true;
        if (l.fma_bits == 0) {
            fmt::print(stderr, "warning: --limits: this processor has no FMA/AVX2 loop to measure; its tests show n/a\n");
        } else if (l.read_bps == 0) {
            fmt::print(stderr, "warning: --limits: no buffer of 128 MiB for the read bandwidth of {}; tg tests show n/a\n",
                       threads_text(n));
        } else if (buffer != size_t{512} << 20) {
            fmt::print(stderr, "warning: --limits: the read bandwidth of {} measured on 128 MiB (512 MiB could not be had)\n",
                       threads_text(n));
        }
    }
    return l;
}

// Each limit of a and b, the larger.
machine_limits larger(const machine_limits & a, const machine_limits & b) {
    machine_limits l;
    l.fma_flops = std::max(a.fma_flops, b.fma_flops);
    l.fma_bits = std::max(a.fma_bits, b.fma_bits);
    l.read_bps = std::max(a.read_bps, b.read_bps);
    return l;
}

// r's fraction of its limit (see the top of this file); 0 for a test of
// both kinds, another device or a limit not measured.
void set_fraction(result & r) {
    const double ts = mean(r.samples_ts());
    if (r.backend != "CPU") return;
    if (r.n_gen > 0 && r.n_prompt == 0 && r.limits.read_bps > 0) {
        r.of_limit = ts * double(r.weight_bytes_per_token) / r.limits.read_bps;
        r.limit_name = "bw";
    } else if (r.n_prompt > 0 && r.n_gen == 0 && r.limits.fma_flops > 0) {
        r.of_limit = ts * 2.0 * double(r.n_params) / r.limits.fma_flops;
        r.limit_name = "FMA";
    }
}

// Token source for the tests: BOS first when the model adds one, then ids
// uniform over the vocabulary from a fixed-seed generator.
struct token_source {
    std::mt19937_64 rng;
    int32_t n_vocab;
    int32_t bos = -1;
    int32_t next() { return static_cast<int32_t>(rng() % static_cast<uint64_t>(n_vocab)); }
    std::vector<int32_t> prompt(int n) {
        std::vector<int32_t> t(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) t[size_t(i)] = (i == 0 && bos >= 0) ? bos : next();
        return t;
    }
};

// Empties the cache, then fills it with `depth` tokens (a prompt: BOS
// first), untimed.
void start_at_depth(llm::session & s, token_source & src, int depth) {
    s.reset();
    if (depth > 0) s.decode(src.prompt(depth));
}

// n decodes of one token each (the first BOS on an empty cache).
void generate(llm::session & s, token_source & src, int n, bool first_bos) {
    int32_t tok = first_bos && src.bos >= 0 ? src.bos : src.next();
    for (int i = 0; i < n; ++i) {
        s.decode(std::span<const int32_t>(&tok, 1));
        tok = src.next();
    }
}

// One run of a test (nanoseconds): after start_at_depth, one decode of
// n_prompt tokens (BOS first on an empty cache), then n_gen decodes of one
// token (BOS first when nothing precedes them), timed together: ppP (n_gen
// 0), tgN (n_prompt 0) or ppP+tgN.
uint64_t run_once(llm::session & s, token_source & src, int n_prompt, int n_gen, int depth) {
    start_at_depth(s, src, depth);
    std::vector<int32_t> tokens = src.prompt(n_prompt);
    if (n_prompt > 0 && depth > 0 && src.bos >= 0) tokens[0] = src.next(); // BOS opened the depth prompt
    const auto t0 = clock_type::now();
    if (n_prompt > 0) s.decode(tokens);
    if (n_gen > 0) generate(s, src, n_gen, depth == 0 && n_prompt == 0);
    return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now() - t0).count());
}

// The whole numbers of a comma-separated list option `flag`, from every time
// it was given ("-p 8,16 -p 32": 8, 16, 32; spaces around an entry are
// allowed). Throws tessera::error naming the flag and the list for an empty
// entry ("8,,8", "8,", "") or one that is not a decimal int (or is out of
// int's range, named as 0 to INT_MAX: no list option takes a negative value,
// and each option's own check refuses one in int's range).
std::vector<int> int_list(const std::vector<std::string> & given, const char * flag) {
    std::vector<int> out;
    for (const std::string & list : given) {
        size_t at = 0;
        for (;;) {
            const size_t comma = list.find(',', at);
            const size_t stop = comma == std::string::npos ? list.size() : comma;
            std::string entry = list.substr(at, stop - at);
            const size_t b = entry.find_first_not_of(" \t");
            entry = b == std::string::npos ? "" : entry.substr(b, entry.find_last_not_of(" \t") - b + 1);
            if (entry.empty()) {
                throw error(fmt::format("{} '{}': empty entry in the comma-separated list", flag, list));
            }
            int v = 0;
            const auto [end, ec] = std::from_chars(entry.data(), entry.data() + entry.size(), v);
            if (ec == std::errc::result_out_of_range) {
                throw error(fmt::format("{} '{}': {} is out of range (0 to {})", flag, list, entry,
                                        std::numeric_limits<int>::max()));
            }
            if (ec != std::errc() || end != entry.data() + entry.size()) {
                throw error(fmt::format("{} '{}': '{}' is not a whole number", flag, list, entry));
            }
            out.push_back(v);
            if (comma == std::string::npos) break;
            at = comma + 1;
        }
    }
    return out;
}

// Every value of a comma-separated on/off option (-fa, --rp) is 0 or 1.
void need_on_off(const std::vector<int> & values, const char * flag) {
    for (int v : values) {
        if (v != 0 && v != 1) throw error(fmt::format("{} {}: expected 0 (off) or 1 (on)", flag, v));
    }
}

// Fills the parsed fields of `o` (lists, seed) from what was given and
// checks every option, before any model is loaded. Throws tessera::error
// naming the option.
void check_options(options & o) {
    check_device_option(o.device_given, o.device);
    o.n_prompt = int_list(o.lists.n_prompt, "-p");
    o.n_gen = int_list(o.lists.n_gen, "-n");
    o.n_depth = int_list(o.lists.n_depth, "-d");
    o.threads = int_list(o.lists.threads, "-t");
    o.flash_attn = int_list(o.lists.flash_attn, "-fa");
    o.repack = int_list(o.lists.repack, "--rp");
    for (const std::string & text : o.lists.prompt_gen) {
        const std::vector<int> v = int_list({text}, "-pg");
        if (v.size() != 2) {
            throw error(fmt::format("-pg '{}': expected two counts, prompt tokens and generated tokens (as in -pg 512,128)", text));
        }
        if (v[0] < 1 || v[1] < 1) {
            throw error(fmt::format("-pg '{}': both counts must be at least 1 (-p and -n run one kind alone)", text));
        }
        o.pg.push_back({v[0], v[1]});
    }
    o.seed = parse_seed(o.seed_text);
    if (o.output != "md" && o.output != "json" && o.output != "jsonl" && o.output != "csv") {
        throw error(fmt::format("-o '{}': expected md, json, jsonl or csv", o.output));
    }
    if (o.reps < 1) throw error(fmt::format("-r {}: need at least one repetition", o.reps));
    if (o.n_batch < 1) throw error(fmt::format("-b {}: batch size must be at least 1", o.n_batch));
    for (int p : o.n_prompt) {
        if (p < 0) throw error(fmt::format("-p {}: must not be negative", p));
    }
    for (int n : o.n_gen) {
        if (n < 0) throw error(fmt::format("-n {}: must not be negative", n));
    }
    for (int d : o.n_depth) {
        if (d < 0) throw error(fmt::format("-d {}: must not be negative", d));
    }
    for (int t : o.threads) {
        if (t < 0 || t > k_max_threads) throw error(fmt::format("-t {}: expected 0 (all cores) to {}", t, k_max_threads));
    }
    need_on_off(o.flash_attn, "-fa");
    need_on_off(o.repack, "--rp");
    const bool any = std::any_of(o.n_prompt.begin(), o.n_prompt.end(), [](int p) { return p > 0; }) ||
                     std::any_of(o.n_gen.begin(), o.n_gen.end(), [](int n) { return n > 0; }) || !o.pg.empty();
    if (!any) throw error("nothing to run: every -p and -n value is 0 and there is no -pg");
    const std::string kv = lower(o.kv_type); // f16 as the JSON (and llama-bench's -ctk) spells it
    if (kv != "f32" && kv != "f16") throw error(fmt::format("--kv-type '{}': expected F32 or F16", o.kv_type));
    o.kv_type = kv == "f32" ? "F32" : "F16";
}

// The error of a model that could not be benched, naming its file.
std::string model_error(const std::string & path, const std::string & what) {
    return what.find(path) != std::string::npos ? what : fmt::format("{}: {}", path, what);
}

int run_bench(options o) {
    check_options(o);
    std::vector<int> threads = o.threads;
    if (threads.empty()) threads.push_back(0);
    for (int & t : threads) { // 0: all hardware threads, as for run
        if (t == 0) t = int(std::max(1u, std::thread::hardware_concurrency()));
        warn_if_oversubscribed(t);
    }
    const int max_p = *std::max_element(o.n_prompt.begin(), o.n_prompt.end());
    const int max_n = *std::max_element(o.n_gen.begin(), o.n_gen.end());
    const int max_d = *std::max_element(o.n_depth.begin(), o.n_depth.end());
    int64_t max_pg = 0; // the longest -pg test (prompt and generated tokens)
    for (const prompt_gen & t : o.pg) max_pg = std::max(max_pg, int64_t{t.n_prompt} + t.n_gen);

    md_printer md;
    md.show_fa = !o.flash_attn.empty();
    md.show_rp = !o.repack.empty();
    md.show_limit = o.limits;
    std::map<int, machine_limits> limits; // --limits: by thread count, the largest measured
    std::map<int, bool> warned;           // --limits: a thread count's missing limit was reported
    for (int d : o.n_depth) { // the longest name the tests will have
        for (int p : o.n_prompt) md.w_test = std::max(md.w_test, int(test_name(p, 0, d).size()));
        for (int n : o.n_gen) md.w_test = std::max(md.w_test, int(test_name(0, n, d).size()));
        for (const prompt_gen & t : o.pg) md.w_test = std::max(md.w_test, int(test_name(t.n_prompt, t.n_gen, d).size()));
    }
    std::vector<int> fa_values = o.flash_attn; // -1: automatic
    if (fa_values.empty()) fa_values.push_back(-1);
    std::vector<int> rp_values = o.repack;
    if (rp_values.empty()) rp_values.push_back(1);
    json all = json::array();
    // A model that fails (missing file, not a model, a session it cannot
    // have) is reported on stderr and skipped: the others are still benched
    // and printed, and the exit code is 1.
    size_t n_failed = 0;
    bool csv_header_done = false;
    for (const std::string & path : o.models) try {
        std::error_code ec;
        if (!std::filesystem::is_regular_file(path, ec)) {
            throw error(fmt::format("{}: {}", path, std::filesystem::exists(path, ec) ? "not a regular file" : "no such file"));
        }
        auto m = llm::model::load(path);
        const llm::hparams & hp = m->hp();
        const uint64_t w_bytes = weight_bytes_per_token(*m); // --limits
        // The session's context holds the longest test: say which option asks for more than the model has.
        std::vector<std::pair<std::string, int64_t>> longest{{fmt::format("-p {}", max_p), max_p}, {fmt::format("-n {}", max_n), max_n}};
        for (const prompt_gen & t : o.pg) {
            const int64_t total = int64_t{t.n_prompt} + t.n_gen;
            longest.emplace_back(fmt::format("-pg {},{} ({} tokens)", t.n_prompt, t.n_gen, total), total);
        }
        for (const auto & [option, most] : longest) {
            if (uint64_t(most) > hp.n_ctx_train) {
                throw error(fmt::format("{}: {}: more than the model's context length of {} tokens", path, option, hp.n_ctx_train));
            }
            if (max_d > 0 && most > 0 && uint64_t(max_d) + uint64_t(most) > hp.n_ctx_train) {
                throw error(fmt::format("{}: -d {} with {}: {} tokens, more than the model's context length of {}", path, max_d,
                                        option, uint64_t(max_d) + uint64_t(most), hp.n_ctx_train));
            }
        }
        token_source src{std::mt19937_64(o.seed), int32_t(hp.n_vocab)};
        const bool add_bos = m->file().find_bool("tokenizer.ggml.add_bos_token").value_or(true);
        if (add_bos) {
            if (auto b = m->file().find_int("tokenizer.ggml.bos_token_id"); b && *b >= 0 && *b < int64_t(hp.n_vocab)) {
                src.bos = int32_t(*b);
            }
        }
        for (int nt : threads) for (int fa : fa_values) for (int rp : rp_values) {
            llm::session_params sp;
            sp.n_ctx = uint32_t(max_d + std::max<int64_t>({max_p, max_n, max_pg, 1})); // checked above: fits the model's context
            sp.n_batch = uint32_t(o.n_batch);
            sp.n_threads = nt;
            sp.device = o.device;
            sp.kv_type = type_from_name(o.kv_type);
            using fa_mode = llm::session_params::flash_attn_mode;
            sp.flash_attn = fa < 0 ? fa_mode::automatic : fa == 1 ? fa_mode::on : fa_mode::off;
            sp.repack = rp != 0;
            llm::session s(*m, sp);

            auto run_test = [&](int p, int n, int depth) {
                result r;
                r.filename = path;
                r.model_type = model_type(*m);
                r.backend = s.device_name();
                r.cpu_info = s.device_description();
                r.model_size = m->n_bytes();
                r.n_params = m->n_params();
                r.n_threads = nt;
                r.n_prompt = p;
                r.n_gen = n;
                r.n_depth = depth;
                r.n_batch = o.n_batch;
                r.kv_type = o.kv_type;
                r.flash_attn = s.flash_attn();
                r.repack = s.repack().n_repacked > 0;
                r.test_time = utc_now();
                if (o.limits) {
                    if (o.progress) fmt::print(stderr, "bench: {} threads {}: measuring the limits before\n", nt, test_name(r));
                    r.with_limits = true;
                    r.limits = measure_limits(nt, warned);
                    r.weight_bytes_per_token = w_bytes;
                }
                if (o.progress && !o.no_warmup) fmt::print(stderr, "bench: {} threads {} {}: warm-up\n", path, nt, test_name(r));
                if (!o.no_warmup) {
                    if (p > 0) run_once(s, src, p, 0, depth);
                    if (n > 0) run_once(s, src, 0, 1, depth);
                }
                for (int rep = 0; rep < o.reps; ++rep) {
                    if (o.progress) {
                        fmt::print(stderr, "bench: {} threads {} {}: repetition {}/{}{}\n", path, nt, test_name(r), rep + 1,
                                   o.reps, depth > 0 ? fmt::format(" (after {} tokens of depth, untimed)", depth) : "");
                    }
                    r.samples_ns.push_back(run_once(s, src, p, n, depth));
                }
                if (o.limits) {
                    if (o.progress) fmt::print(stderr, "bench: {} threads {}: measuring the limits after\n", nt, test_name(r));
                    r.limits = larger(r.limits, measure_limits(nt, warned)); // and just after
                    set_fraction(r);
                    machine_limits & l = limits[nt];
                    l = larger(l, r.limits);
                }
                const json j = to_json(r);
                if (o.output == "md") md.row(r);
                if (o.output == "jsonl") fmt::print("{}\n", dump(j, -1));
                if (o.output == "csv") {
                    if (!csv_header_done) fmt::print("{}\n", csv_line(j, true));
                    csv_header_done = true;
                    fmt::print("{}\n", csv_line(j, false));
                }
                if (o.output == "jsonl" || o.output == "csv") std::fflush(stdout);
                all.push_back(j);
            };
            for (int d : o.n_depth) {
                for (int p : o.n_prompt) {
                    if (p > 0) run_test(p, 0, d);
                }
                for (int n : o.n_gen) {
                    if (n > 0) run_test(0, n, d);
                }
                for (const prompt_gen & t : o.pg) run_test(t.n_prompt, t.n_gen, d);
            }
        }
    } catch (const std::exception & e) {
        ++n_failed;
        fmt::print(stderr, "error: {}\n", model_error(path, e.what()));
    }
    if (o.output == "json") fmt::print("{}\n", dump(all, 2));
    if (o.output == "md" && !limits.empty()) {
        fmt::print("\nlimits measured in this run, the largest per thread count (bench/machine_peaks.hpp):\n");
        for (const auto & [n, l] : limits) {
            fmt::print("  {}: F32 FMA peak {} ({}-bit), read bandwidth {}\n", threads_text(n),
                       l.fma_flops > 0 ? fmt::format("{:.1f} GFLOP/s", l.fma_flops / 1e9) : "not measured", l.fma_bits,
                       l.read_bps > 0 ? fmt::format("{:.1f} GB/s", l.read_bps / 1e9) : "not measured");
        }
    }
    if (n_failed > 0) {
        fmt::print(stderr, "error: {} of {} models failed (see above)\n", n_failed, o.models.size());
        return 1;
    }
    return 0;
}

} // namespace

command register_bench(CLI::App & app) {
    auto o = std::make_shared<options>();
    CLI::App * sub = app.add_subcommand("bench", "measure prompt processing and generation speed (tokens/s)");
    sub->add_option("-m,--model", o->models, "GGUF model file (repeat for several)")->required();
    // The list options are read as text and split by int_list (check_options).
    sub->add_option("-p,--n-prompt", o->lists.n_prompt, "prompt lengths for the pp tests (comma-separated; 0 = none)")
        ->type_name("INT")
        ->capture_default_str();
    sub->add_option("-n,--n-gen", o->lists.n_gen, "token counts for the tg tests (comma-separated; 0 = none)")
        ->type_name("INT")
        ->capture_default_str();
    sub->add_option("-d,--n-depth", o->lists.n_depth,
                    "tokens already in the cache when each test starts (comma-separated; filled untimed)")
        ->type_name("INT")
        ->capture_default_str();
    sub->add_option("-t,--threads", o->lists.threads,
                    "thread counts (comma-separated; 0 = all hardware threads, the default)")
        ->type_name("INT");
    sub->add_option("--pg", o->lists.prompt_gen, // also spelled -pg (tools/main.cpp)
                    "a combined test (also -pg): P prompt tokens then N generated, timed together, as P,N; repeat for several")
        ->type_name("P,N");
    sub->add_option("-r,--repetitions", o->reps, "timed repetitions of each test")->capture_default_str();
    sub->add_option("-b,--batch-size", o->n_batch, "micro-batch: most tokens per graph")->capture_default_str();
    sub->add_option("-o,--output", o->output, "output format: md (table), json, jsonl (a line a test) or csv")
        ->capture_default_str();
    CLI::Option * device = sub->add_option("--device", o->device, "device name (see `tessera devices`)");
    sub->add_option("--kv-type", o->kv_type, "KV cache type: F32 or F16 (either case)")->capture_default_str();
    sub->add_option("--flash-attn", o->lists.flash_attn, // also spelled -fa (tools/main.cpp)
                    "fused attention (also -fa): 0 (off) and/or 1 (on), comma-separated; default: on where the device supports it")
        ->type_name("INT");
    sub->add_option("--rp,--repack", o->lists.repack,
                    "repacked weight layout (CPU_REPACK): 0 (off) and/or 1 (on), comma-separated; default: on")
        ->type_name("INT");
    sub->add_option("--seed", o->seed_text, "seed of the random prompt tokens (0 to 2^64 - 1)")
        ->type_name("UINT64")
        ->capture_default_str();
    sub->add_flag("--no-warmup", o->no_warmup, "skip the untimed warm-up run of each test");
    sub->add_flag("--progress", o->progress, "print progress on stderr");
    sub->add_flag("--limits", o->limits,
                  "also measure this machine's F32 FMA peak and read bandwidth before and after each test and give "
                  "it as a fraction of its limit (tg: of the read bandwidth, pp: of the FMA peak)");
    return command{sub, [o, device]() {
                       o->device_given = device->count() > 0;
                       return run_bench(*o);
                   }};
}

} // namespace tessera::tools

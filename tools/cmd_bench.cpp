// tools/cmd_bench.cpp — `tessera bench`: prompt-processing (pp) and
// token-generation (tg) speed of GGUF models, reported like the reference's
// bench tool (llama.cpp tools/llama-bench: same test definitions, same
// options where tessera has the feature, same JSON field names, so one
// script can run and read both):
//   ppP: a fresh (empty) cache, one decode call of P random tokens (BOS first
//        when the model asks for it), split into graphs of min(-b, -ub)
//        tokens;
//   tgN: a fresh cache, N decode calls of one token each (BOS first, then
//        random tokens);
//   ppP+tgN (-pg P,N): a fresh cache, the pp test's decode of P tokens, then
//        the tg test's N decodes of one token, timed together: the speed of
//        answering a prompt;
//   with -d D > 0 ("pp512 @ d1024", "tg128 @ d1024"): the cache first holds
//        D tokens (one untimed decode of a random prompt, BOS first), and
//        the test's tokens (random, no BOS) follow them: speed at depth.
// Every list option takes comma-separated values, may be repeated, and
// takes the reference's ranges: "first-last" (step 1), "first-last+step",
// "first-last*mult". Each test runs for every combination of the lists.
// Each test runs once untimed (warm-up), then -r times timed; tokens/s of a
// repetition = tokens / seconds; the table shows mean ± sample standard
// deviation (n - 1) of those rates. Output (-o on stdout, and -oe on
// stderr as well): a markdown table (md), the reference's JSON array
// (json), JSON Lines (jsonl: one object a line, as each test ends), CSV
// (csv: a header of field names, then one row a test, every value
// double-quoted, without the samples arrays) or SQL (sql: CREATE TABLE
// llama_bench, then an INSERT a test, the same fields); tools/bench_report.hpp.
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
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "bench_report.hpp"
#include "commands.hpp"
#include "machine_peaks.hpp"
#include "tessera/core/error.hpp"
#include "tessera/gguf/writer.hpp"
#include "tessera/llm/file_type.hpp"
#include "tessera/llm/model.hpp"
#include "tessera/llm/session.hpp"

namespace tessera::tools {

namespace {

using namespace bench_report; // result, report, to_json, ...
using clock_type = std::chrono::steady_clock;

// The list options as given, one string per occurrence (CLI11's own ','
// delimiter silently drops empty entries: split_list checks them).
struct list_args {
    std::vector<std::string> n_prompt{"512"}, n_gen{"128"}, n_depth{"0"}, threads, flash_attn, repack;
    std::vector<std::string> n_batch{"2048"}, n_ubatch{"512"}; // the reference's defaults
    std::vector<std::string> cache_k, cache_v, n_gpu_layers;   // -ctk, -ctv, -ngl
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
    std::vector<int> flash_attn; // -fa values: 0 off, 1 on, -1 auto (the session's choice); empty = auto
    std::vector<int> repack;     // --rp values (0/1): repacked weight layout; empty = on
    std::vector<int> n_batch, n_ubatch; // -b, -ub: a graph holds min(b, ub) tokens
    std::vector<std::string> kv_types;  // "F16"/"F32", one per (-ctk, -ctv) pair (they must agree)
    std::vector<int> n_gpu_layers;      // -ngl: recorded only (see --help)
    int reps = 5;
    std::string output = "md";  // -o: a format of bench_report.hpp
    std::string output_err;     // -oe: the same on stderr as well ("" none)
    int delay = 0;              // --delay: seconds of sleep before each test
    std::string device;
    bool device_given = false; // --device was on the command line (an empty name is an error, not "the best")
    std::string kv_type = "F16"; // --kv-type: -ctk and -ctv when they are not given
    bool batch_given = false;      // -b or -ub was given: the table shows n_batch and n_ubatch
    bool cache_type_given = false; // -ctk or -ctv was given: the table shows type_k and type_v
    bool no_warmup = false;
    bool progress = false;
    std::string seed_text = "1234"; // --seed as given (parse_seed)
    uint64_t seed = 1234;
    bool limits = false; // --limits: measure the machine's limits, print fractions of them
};

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
    std::string size = n >= 1e9   ? fmt::format("{:.0f}B", n / 1e9)
                       : n >= 1e6 ? fmt::format("{:.0f}M", n / 1e6)
                                  : fmt::format("{:.0f}K", n / 1e3);
    return fmt::format("{} {} {}", m.hp().arch, size, m.type_description());
}

// Bytes of weights one decoded token reads: every weight tensor but the
// token embeddings (GET_ROWS reads one row of them), which count when the
// output matrix is tied to them.
uint64_t weight_bytes_per_token(const llm::model & m) {
    const bool tied = m.output == m.tok_embd;
    return m.n_bytes() - (m.tok_embd != nullptr && !tied ? nbytes(m.tok_embd) : 0);
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
            eprint("warning: --limits: this processor has no FMA/AVX2 loop to measure; its tests show n/a\n");
        } else if (l.read_bps == 0) {
            eprint("warning: --limits: no buffer of 128 MiB for the read bandwidth of {}; tg tests show n/a\n",
                       count_text(uint64_t(n), "thread"));
        } else if (buffer != size_t{512} << 20) {
            eprint("warning: --limits: the read bandwidth of {} measured on 128 MiB (512 MiB could not be had)\n",
                       count_text(uint64_t(n), "thread"));
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

// The entries of a list option `flag`, from every time it was given ("-p
// 8,16 -p 32": 8, 16, 32), spaces around an entry removed. Throws
// tessera::error naming the flag and the list for an empty entry ("8,,8",
// "8,", "").
struct list_entry {
    std::string text, list; // the entry, and the whole list it came in (for messages)
};
std::vector<list_entry> split_list(const std::vector<std::string> & given, const char * flag) {
    std::vector<list_entry> out;
    for (const std::string & list : given) {
        size_t at = 0;
        for (;;) {
            const size_t comma = list.find(',', at);
            const size_t stop = comma == std::string::npos ? list.size() : comma;
            std::string entry = list.substr(at, stop - at);
            const size_t b = entry.find_first_not_of(" \t");
            entry = b == std::string::npos ? "" : entry.substr(b, entry.find_last_not_of(" \t") - b + 1);
            if (entry.empty()) {
                throw option_error(fmt::format("{} '{}': empty entry in the comma-separated list", flag, list));
            }
            out.push_back({entry, list});
            if (comma == std::string::npos) break;
            at = comma + 1;
        }
    }
    return out;
}

// A decimal int (a sign allowed: each option checks its own range); one
// outside int's range is named as out of `lowest` to INT_MAX, the range of
// the option's values.
int whole_number(const std::string & text, const list_entry & e, const char * flag, int lowest) {
    int v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec == std::errc::result_out_of_range) {
        throw option_error(fmt::format("{} '{}': {} is out of range ({} to {})", flag, e.list, text, lowest,
                                       std::numeric_limits<int>::max()));
    }
    if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
        throw option_error(fmt::format("{} '{}': '{}' is not a whole number", flag, e.list, e.text));
    }
    return v;
}

// Most values one range entry may stand for.
constexpr int64_t k_max_range_values = 1024;
// Most tests one run may ask for (every model and test with every
// combination of the list options; check_options).
constexpr int64_t k_max_tests = 100000;

// The whole numbers of a list option (split_list), each entry a decimal
// int or a range as the reference writes them: "first-last" (every value),
// "first-last+step" (first, first + step, ... up to last) or
// "first-last*mult" (first, first * mult, ... up to last). Throws
// tessera::error naming the flag and the list for an entry that is none
// of these, a value out of int's range (named as `lowest` to INT_MAX:
// `lowest` is the smallest value the option takes, -1 for -ngl and 0 for
// the others, whose own checks refuse the values below it), a range that
// runs backwards, a step below 1, a multiplier below 2 or from 0, or more
// than k_max_range_values values.
std::vector<int> int_list(const std::vector<std::string> & given, const char * flag, int lowest = 0) {
    std::vector<int> out;
    for (const list_entry & e : split_list(given, flag)) {
        const size_t dash = e.text.find('-', 1); // a leading '-' is a sign
        if (dash == std::string::npos) {
            out.push_back(whole_number(e.text, e, flag, lowest));
            continue;
        }
        const size_t op = e.text.find_first_of("+*", dash + 1);
        const int first = whole_number(e.text.substr(0, dash), e, flag, lowest);
        const int last = whole_number(e.text.substr(dash + 1, op == std::string::npos ? std::string::npos : op - dash - 1), e, flag, lowest);
        const bool times = op != std::string::npos && e.text[op] == '*';
        const int step = op == std::string::npos ? 1 : whole_number(e.text.substr(op + 1), e, flag, lowest);
        const std::string range = fmt::format("{} '{}': range '{}'", flag, e.list, e.text);
        if (first > last) throw option_error(fmt::format("{}: runs backwards ({} is above {})", range, first, last));
        if (!times && step < 1) throw option_error(fmt::format("{}: the step must be at least 1", range));
        if (times && (step < 2 || first < 1)) throw option_error(fmt::format("{}: needs a multiplier of 2 or more and a first value of 1 or more", range));
        int64_t n = 0;
        for (int64_t v = first; v <= last; v = times ? v * step : v + step) {
            if (++n > k_max_range_values) throw option_error(fmt::format("{}: more than {} values", range, k_max_range_values));
            out.push_back(int(v));
        }
    }
    return out;
}

// -fa's values: 0, 1, off, on or auto (either case), as 0, 1 and -1.
std::vector<int> flash_attn_list(const std::vector<std::string> & given) {
    std::vector<int> out;
    for (const list_entry & e : split_list(given, "-fa")) {
        const std::string v = lower(e.text);
        if (v == "0" || v == "off") out.push_back(0);
        else if (v == "1" || v == "on") out.push_back(1);
        else if (v == "auto") out.push_back(-1);
        else throw option_error(fmt::format("-fa '{}': '{}' is not 0, 1, off, on or auto", e.list, e.text));
    }
    return out;
}

// The KV cache type of each entry of -ctk or -ctv (or --kv-type): f16 or
// f32, either case (the reference writes them in lower case); other cache
// types (q8_0, q4_0, bf16, ...) are named as ones tessera's cache lacks.
std::vector<std::string> kv_type_list(const std::vector<std::string> & given, const char * flag) {
    std::vector<std::string> out;
    for (const list_entry & e : split_list(given, flag)) {
        const std::string v = lower(e.text);
        if (v != "f16" && v != "f32") {
            throw option_error(fmt::format("{} '{}': cache type '{}' is not one tessera has (f16 or f32)", flag, e.list, e.text));
        }
        out.push_back(v == "f16" ? "F16" : "F32");
    }
    return out;
}

// Every value of an on/off option (--rp) is 0 or 1.
void need_on_off(const std::vector<int> & values, const char * flag) {
    for (int v : values) {
        if (v != 0 && v != 1) throw option_error(fmt::format("{} {}: expected 0 (off) or 1 (on)", flag, v));
    }
}

// Every value of `values` (from option `flag`) is at least `least`.
void need_at_least(const std::vector<int> & values, int least, const char * flag, const char * what) {
    for (int v : values) {
        if (v < least) throw option_error(fmt::format("{} {}: {}", flag, v, what));
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
    o.flash_attn = flash_attn_list(o.lists.flash_attn);
    o.repack = int_list(o.lists.repack, "-rp");
    o.n_batch = int_list(o.lists.n_batch, "-b");
    o.n_ubatch = int_list(o.lists.n_ubatch, "-ub");
    o.n_gpu_layers = int_list(o.lists.n_gpu_layers, "-ngl", -1);
    for (const std::string & text : o.lists.prompt_gen) {
        const std::vector<int> v = int_list({text}, "-pg");
        if (v.size() != 2) {
            throw option_error(fmt::format("-pg '{}': expected two counts, prompt tokens and generated tokens (as in -pg 512,128)", text));
        }
        if (v[0] < 1 || v[1] < 1) {
            throw option_error(fmt::format("-pg '{}': both counts must be at least 1 (-p and -n run one kind alone)", text));
        }
        o.pg.push_back({v[0], v[1]});
    }
    o.seed = parse_seed(o.seed_text);
    // Either case, as --kv-type and -fa.
    if (!is_format(lower(o.output))) throw option_error(fmt::format("-o '{}': expected {}", o.output, k_formats));
    if (!o.output_err.empty() && !is_format(lower(o.output_err))) {
        throw option_error(fmt::format("-oe '{}': expected {}", o.output_err, k_formats));
    }
    o.output = lower(o.output);
    o.output_err = lower(o.output_err);
    need_at_least(o.n_batch, 1, "-b", "batch size must be at least 1");
    need_at_least(o.n_ubatch, 1, "-ub", "micro-batch size must be at least 1");
    need_at_least(o.n_gpu_layers, -1, "-ngl", "expected -1 or more");
    need_at_least(o.n_prompt, 0, "-p", "must not be negative");
    need_at_least(o.n_gen, 0, "-n", "must not be negative");
    need_at_least(o.n_depth, 0, "-d", "must not be negative");
    for (int t : o.threads) {
        if (t < 0 || t > k_max_threads) throw option_error(fmt::format("-t {}: expected 0 (all cores) to {}", t, k_max_threads));
    }
    need_on_off(o.repack, "-rp");
    const bool any = std::any_of(o.n_prompt.begin(), o.n_prompt.end(), [](int p) { return p > 0; }) ||
                     std::any_of(o.n_gen.begin(), o.n_gen.end(), [](int n) { return n > 0; }) || !o.pg.empty();
    if (!any) throw option_error("nothing to run: every -p and -n value is 0 and there is no -pg");
    // -ctk and -ctv default to --kv-type, or to each other when one is given;
    // tessera's cache has one type for K and V, so of their combinations
    // (the reference runs every -ctk with every -ctv) those of two types are
    // skipped with a note, and an error only when none is left.
    const std::vector<std::string> kv = kv_type_list({o.kv_type}, "--kv-type");
    if (kv.size() != 1) throw option_error(fmt::format("--kv-type '{}': expected one type, F32 or F16", o.kv_type));
    const bool k_given = !o.lists.cache_k.empty(), v_given = !o.lists.cache_v.empty();
    const std::vector<std::string> ks = k_given ? kv_type_list(o.lists.cache_k, "-ctk") : v_given ? kv_type_list(o.lists.cache_v, "-ctv") : kv;
    const std::vector<std::string> vs = v_given ? kv_type_list(o.lists.cache_v, "-ctv") : ks;
    std::vector<std::string> skipped;
    for (const std::string & k : ks) {
        for (const std::string & v : vs) {
            if (k != v) {
                skipped.push_back(fmt::format("-ctk {} with -ctv {}", lower(k), lower(v)));
            } else if (std::find(o.kv_types.begin(), o.kv_types.end(), k) == o.kv_types.end()) {
                o.kv_types.push_back(k);
            }
        }
    }
    if (o.kv_types.empty()) {
        throw option_error(fmt::format("{}: tessera's KV cache holds K and V in one type; give both the same",
                                fmt::join(skipped, ", ")));
    }
    if (!skipped.empty()) {
        eprint("note: skipped {}: tessera's KV cache holds K and V in one type\n", fmt::join(skipped, ", "));
    }
    // Every test runs for every combination of the lists: their product is
    // bounded (each list alone is, by k_max_range_values, but six lists of
    // 1024 asked for 2e9 tests, built in memory before the first ran).
    std::vector<std::pair<std::string, size_t>> factors{{"-m", o.models.size()}};
    const auto add = [&](const char * flag, size_t n) {
        if (n > 1) factors.emplace_back(flag, n);
    };
    size_t per_depth = o.pg.size();
    for (int p : o.n_prompt) per_depth += p > 0 ? 1 : 0;
    for (int n : o.n_gen) per_depth += n > 0 ? 1 : 0;
    add("-p/-n/-pg", per_depth);
    add("-d", o.n_depth.size());
    add("-t", o.threads.size());
    add("-fa", o.flash_attn.size());
    add("-rp", o.repack.size());
    add("-b", o.n_batch.size());
    add("-ub", o.n_ubatch.size());
    add("-ctk/-ctv", o.kv_types.size());
    add("-ngl", o.n_gpu_layers.size());
    double total = 1;
    std::vector<std::string> terms;
    for (const auto & [flag, n] : factors) {
        total *= double(n);
        terms.push_back(fmt::format("{} {}", n, flag));
    }
    if (total > double(k_max_tests)) {
        throw option_error(fmt::format("the options ask for {:.0f} tests ({}), more than {} in one run", total,
                                       fmt::join(terms, " x "), k_max_tests));
    }
}

// The error of a model that could not be benched, naming its file.
std::string model_error(const std::string & path, const std::string & what) {
    const std::string shown = printable_utf8(path); // (as the library's messages show it)
    return what.find(shown) != std::string::npos ? what : fmt::format("{}: {}", shown, what);
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

    // Columns for the options given (and so possibly varied), between threads and test.
    std::vector<md_column> columns;
    const auto on_off = [](bool v) { return std::string(v ? "1" : "0"); };
    if (!o.flash_attn.empty()) columns.push_back({"fa", [on_off](const result & r) { return on_off(r.flash_attn); }});
    if (!o.repack.empty()) columns.push_back({"rp", [on_off](const result & r) { return on_off(r.repack); }});
    if (o.batch_given) {
        columns.push_back({"n_batch", [](const result & r) { return std::to_string(r.n_batch); }});
        columns.push_back({"n_ubatch", [](const result & r) { return std::to_string(r.n_ubatch); }});
    }
    if (o.cache_type_given) {
        columns.push_back({"type_k", [](const result & r) { return lower(r.kv_type); }});
        columns.push_back({"type_v", [](const result & r) { return lower(r.kv_type); }});
    }
    if (!o.n_gpu_layers.empty()) columns.push_back({"ngl", [](const result & r) { return std::to_string(r.n_gpu_layers); }});
    int w_test = 12; // widened to the longest test name ("tg128 @ d1024")
    for (int d : o.n_depth) {
        for (int p : o.n_prompt) w_test = std::max(w_test, int(test_name(p, 0, d).size()));
        for (int n : o.n_gen) w_test = std::max(w_test, int(test_name(0, n, d).size()));
        for (const prompt_gen & t : o.pg) w_test = std::max(w_test, int(test_name(t.n_prompt, t.n_gen, d).size()));
    }
    std::vector<report> reports{report(o.output, stdout, columns, o.limits, w_test)};
    if (!o.output_err.empty()) reports.emplace_back(o.output_err, stderr, columns, o.limits, w_test);
    std::map<int, machine_limits> limits; // --limits: by thread count, the largest measured
    std::map<int, bool> warned;           // --limits: a thread count's missing limit was reported
    // Every combination of the list options, in the reference's order.
    struct config {
        int threads, fa, rp, n_batch, n_ubatch, n_gpu_layers;
        std::string kv_type;
    };
    std::vector<config> configs;
    const std::vector<int> fa_values = o.flash_attn.empty() ? std::vector<int>{-1} : o.flash_attn; // -1: automatic
    const std::vector<int> rp_values = o.repack.empty() ? std::vector<int>{1} : o.repack;
    const std::vector<int> ngl_values = o.n_gpu_layers.empty() ? std::vector<int>{0} : o.n_gpu_layers;
    for (int b : o.n_batch) for (int ub : o.n_ubatch) for (const std::string & kv : o.kv_types) for (int ngl : ngl_values) {
        for (int nt : threads) for (int fa : fa_values) for (int rp : rp_values) configs.push_back({nt, fa, rp, b, ub, ngl, kv});
    }
    json all = json::array();
    // A model that fails (missing file, not a model, a session it cannot
    // have) is reported on stderr and skipped: the others are still benched
    // and printed, and the exit code is 1.
    size_t n_failed = 0;
    bool ngl_noted = false;
    for (const std::string & path : o.models) try {
        std::error_code ec;
        // (An empty path is llm::model::load's to refuse: "gguf: the path is empty".)
        if (!path.empty() && !std::filesystem::is_regular_file(path, ec)) {
            const std::string why = gguf::lookup_failure(path);
            throw error(fmt::format("{}: {}", printable_utf8(path), why.empty() ? "not a regular file" : why));
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
        for (const config & c : configs) {
            const int nt = c.threads;
            llm::session_params sp;
            sp.n_ctx = uint32_t(max_d + std::max<int64_t>({max_p, max_n, max_pg, 1})); // checked above: fits the model's context
            sp.n_batch = uint32_t(std::min(c.n_batch, c.n_ubatch));
            sp.n_threads = nt;
            sp.device = o.device;
            sp.kv_type = type_from_name(c.kv_type);
            using fa_mode = llm::session_params::flash_attn_mode;
            sp.flash_attn = c.fa < 0 ? fa_mode::automatic : c.fa == 1 ? fa_mode::on : fa_mode::off;
            sp.repack = c.rp != 0;
            // bench's own options in a refusal of a context the memory cannot hold.
            sp.advice.context = "a shorter context (smaller -p, -n, -pg or -d: the context holds -d plus the longest test)";
            sp.advice.kv_f16 = "-ctk f16";
            sp.advice.batch = "a smaller batch (-b or -ub)";
            llm::session s(*m, sp);
            if (c.n_gpu_layers != 0 && !ngl_noted) {
                ngl_noted = true;
                eprint("note: -ngl {}: tessera runs every layer on the bench's device ({}); n_gpu_layers is only recorded\n",
                           c.n_gpu_layers, s.device_name());
            }

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
                r.n_batch = c.n_batch;
                r.n_ubatch = c.n_ubatch;
                r.n_gpu_layers = c.n_gpu_layers;
                r.kv_type = c.kv_type;
                r.flash_attn = s.flash_attn();
                r.repack = s.repack().n_repacked > 0;
                r.test_time = utc_now();
                // A combined test (-pg) has no limit to compare with: its
                // record gets the limits measured so far, without measuring.
                const bool measure = o.limits && !(p > 0 && n > 0);
                if (o.limits) {
                    r.with_limits = true;
                    r.weight_bytes_per_token = w_bytes;
                    if (const auto it = limits.find(nt); it != limits.end()) r.limits = it->second;
                }
                if (measure) {
                    if (o.progress) eprint("bench: {} {}: measuring the limits before\n", count_text(uint64_t(nt), "thread"), test_name(r));
                    r.limits = measure_limits(nt, warned);
                }
                if (o.progress && !o.no_warmup) eprint("bench: {} {} {}: warm-up\n", printable_utf8(path), count_text(uint64_t(nt), "thread"), test_name(r));
                if (!o.no_warmup) {
                    if (p > 0) run_once(s, src, p, 0, depth);
                    if (n > 0) run_once(s, src, 0, 1, depth);
                }
                for (int rep = 0; rep < o.reps; ++rep) {
                    if (o.progress) {
                        eprint("bench: {} {} {}: repetition {}/{}{}\n", printable_utf8(path), count_text(uint64_t(nt), "thread"), test_name(r), rep + 1,
                                   o.reps, depth > 0 ? fmt::format(" (after {} tokens of depth, untimed)", depth) : "");
                    }
                    r.samples_ns.push_back(run_once(s, src, p, n, depth));
                }
                if (measure) {
                    if (o.progress) eprint("bench: {} {}: measuring the limits after\n", count_text(uint64_t(nt), "thread"), test_name(r));
                    r.limits = larger(r.limits, measure_limits(nt, warned)); // and just after
                    set_fraction(r);
                    machine_limits & l = limits[nt];
                    l = larger(l, r.limits);
                }
                const json j = to_json(r);
                for (report & out : reports) out.add(r, j);
                all.push_back(j);
            };
            // --delay: a pause before each test (the reference's, to let the machine cool down).
            const auto test = [&](int p, int n, int depth) {
                if (o.delay > 0) std::this_thread::sleep_for(std::chrono::seconds(o.delay));
                run_test(p, n, depth);
            };
            for (int d : o.n_depth) {
                for (int p : o.n_prompt) {
                    if (p > 0) test(p, 0, d);
                }
                for (int n : o.n_gen) {
                    if (n > 0) test(0, n, d);
                }
                for (const prompt_gen & t : o.pg) test(t.n_prompt, t.n_gen, d);
            }
        }
    } catch (const std::exception & e) {
        // Results that cannot be written (output_error, or fmt::print's
        // system_error, which main words) end the bench: the other models'
        // would be lost too. Any other error is the model's.
        const bool write_failed = dynamic_cast<const output_error *>(&e) != nullptr ||
                                  (dynamic_cast<const std::system_error *>(&e) != nullptr &&
                                   std::string_view(e.what()).starts_with("cannot write to file"));
        if (write_failed) throw;
        ++n_failed;
        eprint("error: {}\n", model_error(path, e.what()));
    }
    for (report & out : reports) {
        out.finish(all);
        if (limits.empty()) continue;
        out.md_note("\nlimits measured in this run, the largest per thread count (bench/machine_peaks.hpp):");
        for (const auto & [n, l] : limits) {
            out.md_note(fmt::format("  {}: F32 FMA peak {} ({}-bit), read bandwidth {}", count_text(uint64_t(n), "thread"),
                                    l.fma_flops > 0 ? fmt::format("{:.1f} GFLOP/s", l.fma_flops / 1e9) : "not measured",
                                    l.fma_bits, l.read_bps > 0 ? fmt::format("{:.1f} GB/s", l.read_bps / 1e9) : "not measured"));
        }
    }
    if (n_failed > 0) {
        eprint("error: {} of {} models failed (see above)\n", n_failed, o.models.size());
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
    sub->add_option("-r,--repetitions", o->reps, "timed repetitions of each test")
        ->transform(k_whole_number)
        ->check(in_range(1, 1000000))
        ->capture_default_str();
    CLI::Option * batch = sub->add_option("-b,--batch-size", o->lists.n_batch,
                                          "logical batch sizes (comma-separated); a graph holds min(-b, -ub) tokens")
                              ->type_name("INT")
                              ->capture_default_str();
    CLI::Option * ubatch = sub->add_option("--ubatch-size", o->lists.n_ubatch, // also spelled -ub (tools/main.cpp)
                                           "micro-batch sizes (also -ub; comma-separated): most prompt tokens per graph")
                               ->type_name("INT")
                               ->capture_default_str();
    sub->add_option("-o,--output", o->output, "output format: md (table), json, jsonl (a line a test), csv or sql")
        ->capture_default_str();
    sub->add_option("--output-err", o->output_err, "also write the results to stderr in this format (also -oe)")
        ->type_name("FORMAT");
    sub->add_option("--delay", o->delay, "seconds to wait before each test")
        ->transform(k_whole_number)
        ->check(in_range(0, 86400))
        ->capture_default_str();
    CLI::Option * device = sub->add_option("--device", o->device, "device name (see `tessera devices`)");
    sub->add_option("--kv-type", o->kv_type, "KV cache type of K and V: F32 or F16 (either case)")->capture_default_str();
    CLI::Option * ctk = sub->add_option("--cache-type-k", o->lists.cache_k, // also spelled -ctk (tools/main.cpp)
                                        "K cache types (also -ctk; comma-separated): f16 or f32; default: -ctv's, else --kv-type. "
                                        "tessera's cache holds K and V in one type: pairs of two types are skipped")
                            ->type_name("TYPE");
    CLI::Option * ctv = sub->add_option("--cache-type-v", o->lists.cache_v, // also spelled -ctv (tools/main.cpp)
                                        "V cache types (also -ctv; comma-separated): f16 or f32; default: -ctk's")
                            ->type_name("TYPE");
    sub->add_option("--n-gpu-layers", o->lists.n_gpu_layers, // also spelled -ngl (tools/main.cpp)
                    "accepted for the reference's scripts (also -ngl; layer counts, comma-separated: -1, the reference's "
                    "default, or more) and recorded as n_gpu_layers; the device (--device) runs every layer")
        ->type_name("INT");
    sub->add_option("--flash-attn", o->lists.flash_attn, // also spelled -fa (tools/main.cpp)
                    "fused attention (also -fa): 0/off, 1/on or auto, comma-separated; default: auto (on where the device "
                    "supports it)")
        ->type_name("MODE");
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
    return command{sub, [o, device, batch, ubatch, ctk, ctv]() {
                       o->device_given = device->count() > 0;
                       o->batch_given = batch->count() > 0 || ubatch->count() > 0;
                       o->cache_type_given = ctk->count() > 0 || ctv->count() > 0;
                       return run_bench(*o);
                   }};
}

} // namespace tessera::tools

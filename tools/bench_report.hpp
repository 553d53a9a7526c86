// tools/bench_report.hpp — what `tessera bench` measured (one record per
// test) and the formats it is written in: a markdown table (md), the
// reference bench tool's JSON array (json), JSON Lines (jsonl), CSV (csv)
// and SQL (sql: CREATE TABLE llama_bench, then one INSERT per test), with the field
// names of llama.cpp's llama-bench so that one script reads both.
// Internal to the `tessera` program (tools/cmd_bench.cpp).
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/core/error.hpp"

namespace tessera::tools::bench_report {

using json = nlohmann::ordered_json;

// The machine's limits for one thread count (--limits); 0 = not measured
// (the processor lacks the instructions, or the buffer could not be had).
struct machine_limits {
    double fma_flops = 0; // F32 FMA FLOP/s
    int fma_bits = 0;     // of these vectors
    double read_bps = 0;  // streaming read bytes/s
};

// One finished test.
struct result {
    std::string filename, model_type, backend, cpu_info;
    uint64_t model_size = 0;
    int64_t n_params = 0;
    int n_threads = 0, n_prompt = 0, n_gen = 0, n_depth = 0;
    int n_batch = 0, n_ubatch = 0; // -b and -ub as given (the graphs hold min of the two tokens)
    int n_gpu_layers = 0;          // -ngl as given (recorded only: the bench's device runs every layer)
    std::string kv_type, test_time; // kv_type: "F16" or "F32", for K and V alike
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
    // Tokens/s of each repetition: n_tokens / seconds.
    std::vector<double> samples_ts() const;
};

// Mean, and sample standard deviation (n - 1; 0 for fewer than 2 values).
double mean(const std::vector<double> & v);
double stddev(const std::vector<double> & v);

// "pp512", "tg128", "pp512+tg128", "tg128 @ d1024": the reference's test names.
std::string test_name(int n_prompt, int n_gen, int n_depth);
std::string test_name(const result & r);

// The reference's JSON object of a test (plus, with --limits, this
// project's weight_bytes_per_token, fma_peak_flops, fma_peak_bits,
// read_bw_bytes_per_s, of_limit and limit).
json to_json(const result & r);

// JSON text of j; bytes of strings that are not UTF-8 (a model path from
// the command line) are replaced by U+FFFD rather than failing the output.
std::string dump(const json & j, int indent);

// The output formats, for -o and -oe: "md, json, jsonl, csv or sql".
bool is_format(const std::string & name);
inline constexpr const char * k_formats = "md, json, jsonl, csv or sql";

// A markdown column shown between "threads" and "test" only when its
// option was given (fa, rp, n_batch, n_ubatch, type_k, type_v, ngl).
struct md_column {
    std::string title;
    std::function<std::string(const result &)> value;
};

// A failed write of the results (a full disk, a closed pipe with SIGPIPE
// ignored): the bench stops there rather than run on with its output lost.
struct output_error : error {
    using error::error;
};

// The results written in one format to one stream (-o to stdout, -oe to
// stderr): md, jsonl, csv and sql print each test as it ends (md and csv
// with their header before the first, sql its CREATE TABLE), json the
// whole array at finish(). add() and finish() throw output_error naming
// the stream and the system's reason when what they wrote did not all
// reach it.
class report {
public:
    report(std::string format, std::FILE * out, std::vector<md_column> columns, bool show_limit, int w_test);
    void add(const result & r, const json & j);
    void finish(const json & all);
    // A line under the markdown table (md only; nothing in other formats).
    void md_note(const std::string & line);
    const std::string & format() const { return format_; }

private:
    void md_row(const result & r);
    void flush_checked();
    std::string format_;
    std::FILE * out_;
    std::vector<md_column> columns_;
    bool show_limit_;
    int w_test_;
    bool header_done_ = false;
};

} // namespace tessera::tools::bench_report

// tools/bench_report.cpp — `tessera bench`'s output formats (bench_report.hpp).
#include "bench_report.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <string_view>
#include <utility>

#include <fmt/core.h>

#include "build_info.hpp"
#include "commands.hpp"

namespace tessera::tools::bench_report {

namespace {

std::string params_text(int64_t n) {
    if (n >= 1000000000) return fmt::format("{:.2f} B", double(n) / 1e9);
    return fmt::format("{:.2f} M", double(n) / 1e6);
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

// An SQL literal (SQL-92): a string in single quotes, quotes inside
// doubled; true/false as 1/0; numbers as JSON writes them.
std::string sql_value(const json & v) {
    if (v.is_boolean()) return v.get<bool>() ? "1" : "0";
    if (!v.is_string()) return v.dump();
    std::string out = "'";
    for (char c : v.get<std::string>()) {
        if (c == '\'') out += '\'';
        out += c;
    }
    return out + "'";
}

// A column name: as the JSON field, in double quotes (an SQL-92 delimited
// identifier) where the field is a reserved word of SQL, as --limits's
// `limit` is (unquoted, SQLite and PostgreSQL refuse the statement).
std::string sql_name(const std::string & key) {
    static constexpr std::string_view k_reserved[] = {"limit", "order", "group", "select", "from", "where", "table", "index", "key"};
    for (std::string_view w : k_reserved) {
        if (key == w) return '"' + key + '"';
    }
    return key;
}

// CREATE TABLE llama_bench (the reference's table name) with a column per field of j that is not an array
// (TEXT, INTEGER or REAL by the field's JSON type), in j's order.
std::string sql_create(const json & j) {
    std::string s = "CREATE TABLE IF NOT EXISTS llama_bench (\n";
    bool first = true;
    for (const auto & [key, value] : j.items()) {
        if (value.is_array()) continue;
        const char * type = value.is_string() ? "TEXT" : value.is_number_float() ? "REAL" : "INTEGER";
        s += fmt::format("{}  {} {}", first ? "" : ",\n", sql_name(key), type);
        first = false;
    }
    return s + "\n);\n";
}

// One INSERT INTO llama_bench of j's fields that are not arrays.
std::string sql_insert(const json & j) {
    std::string names, values;
    for (const auto & [key, value] : j.items()) {
        if (value.is_array()) continue;
        if (!names.empty()) {
            names += ", ";
            values += ", ";
        }
        names += sql_name(key);
        values += sql_value(value);
    }
    return fmt::format("INSERT INTO llama_bench ({}) VALUES ({});", names, values);
}

constexpr int w_model = 24, w_size = 10, w_params = 10, w_backend = 7, w_threads = 7, w_ts = 20;

} // namespace

std::vector<double> result::samples_ts() const {
    std::vector<double> ts;
    for (uint64_t ns : samples_ns) ts.push_back(1e9 * n_tokens() / double(ns));
    return ts;
}

double mean(const std::vector<double> & v) {
    if (v.empty()) return 0.0;
    double s = 0.0;
    for (double x : v) s += x;
    return s / double(v.size());
}

double stddev(const std::vector<double> & v) {
    if (v.size() < 2) return 0.0;
    const double m = mean(v);
    double s = 0.0;
    for (double x : v) s += (x - m) * (x - m);
    return std::sqrt(s / double(v.size() - 1));
}

std::string test_name(int n_prompt, int n_gen, int n_depth) {
    const std::string at = n_depth > 0 ? fmt::format(" @ d{}", n_depth) : "";
    if (n_gen == 0) return fmt::format("pp{}{}", n_prompt, at);
    if (n_prompt == 0) return fmt::format("tg{}{}", n_gen, at);
    return fmt::format("pp{}+tg{}{}", n_prompt, n_gen, at);
}

std::string test_name(const result & r) { return test_name(r.n_prompt, r.n_gen, r.n_depth); }

json to_json(const result & r) {
    const auto ts = r.samples_ts();
    const std::vector<double> ns(r.samples_ns.begin(), r.samples_ns.end());
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
    j["n_ubatch"] = r.n_ubatch;
    j["n_threads"] = r.n_threads;
    j["type_k"] = lower(r.kv_type);
    j["type_v"] = lower(r.kv_type);
    j["flash_attn"] = r.flash_attn;
    j["repack"] = r.repack;
    j["n_gpu_layers"] = r.n_gpu_layers;
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

std::string dump(const json & j, int indent) {
    return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

bool is_format(const std::string & name) {
    return name == "md" || name == "json" || name == "jsonl" || name == "csv" || name == "sql";
}

report::report(std::string format, std::FILE * out, std::vector<md_column> columns, bool show_limit, int w_test)
    : format_(std::move(format)), out_(out), columns_(std::move(columns)), show_limit_(show_limit), w_test_(w_test) {}

void report::add(const result & r, const json & j) {
    if (format_ == "md") md_row(r);
    if (format_ == "jsonl") fmt::print(out_, "{}\n", dump(j, -1));
    if (format_ == "csv") {
        if (!header_done_) fmt::print(out_, "{}\n", csv_line(j, true));
        fmt::print(out_, "{}\n", csv_line(j, false));
    }
    if (format_ == "sql") {
        if (!header_done_) fmt::print(out_, "{}\n", sql_create(j));
        fmt::print(out_, "{}\n", sql_insert(j));
    }
    header_done_ = true;
    flush_checked();
}

void report::finish(const json & all) {
    if (format_ == "json") fmt::print(out_, "{}\n", dump(all, 2));
    flush_checked();
}

void report::flush_checked() {
    if (std::fflush(out_) != 0 || std::ferror(out_) != 0) {
        throw output_error(fmt::format("could not write the output to {}: {}", out_ == stderr ? "stderr" : "stdout",
                                       std::strerror(errno)));
    }
}

void report::md_note(const std::string & line) {
    if (format_ == "md") fmt::print(out_, "{}\n", line);
}

// The header comes with the first row: a model refused before any test
// ran (a missing file, a context too short) leaves no table.
void report::md_row(const result & r) {
    std::string head, rule, cells;
    for (const md_column & c : columns_) {
        const int w = std::max<int>(2, int(c.title.size()));
        head += fmt::format(" {:>{}} |", c.title, w);
        rule += fmt::format(" {:->{}}: |", "", w - 1);
        cells += fmt::format(" {:>{}} |", c.value(r), w);
    }
    if (!header_done_) {
        fmt::print(out_, "| {:<{}} | {:>{}} | {:>{}} | {:<{}} | {:>{}} |{} {:>{}} | {:>{}} |{}\n", "model", w_model, "size", w_size,
                   "params", w_params, "backend", w_backend, "threads", w_threads, head, "test", w_test_, "t/s", w_ts,
                   show_limit_ ? "   of limit |" : "");
        fmt::print(out_, "| {:-<{}} | {:->{}}: | {:->{}}: | {:-<{}} | {:->{}}: |{} {:->{}}: | {:->{}}: |{}\n", "", w_model, "",
                   w_size - 1, "", w_params - 1, "", w_backend, "", w_threads - 1, rule, "", w_test_ - 1, "", w_ts - 1,
                   show_limit_ ? " ---------: |" : "");
    }
    const auto ts = r.samples_ts();
    // Two decimals; two significant digits below 0.1 (an oversubscribed run).
    const std::string limit = r.of_limit <= 0     ? "n/a"
                              : r.of_limit < 0.1 ? fmt::format("{:.2g} {}", r.of_limit, r.limit_name)
                                                 : fmt::format("{:.2f} {}", r.of_limit, r.limit_name);
    fmt::print(out_, "| {:<{}} | {:>{}} | {:>{}} | {:<{}} | {:>{}} |{} {:>{}} | {:>{}} |{}\n", r.model_type, w_model,
               size_text(r.model_size), w_size, params_text(r.n_params), w_params, r.backend, w_backend, r.n_threads, w_threads,
               cells, test_name(r), w_test_, fmt::format("{:.2f} ± {:.2f}", mean(ts), stddev(ts)), w_ts,
               show_limit_ ? fmt::format(" {:>10} |", limit) : "");
}

} // namespace tessera::tools::bench_report

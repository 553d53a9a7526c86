// tools/cmd_quantize.cpp — `tessera quantize IN.gguf OUT.gguf TYPE`: converts
// a model's 2-D weights to F32, F16, BF16, Q8_0 or Q4_0 (llm::quantize_file),
// printing one progress line per tensor on stderr.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <string>

#include <fmt/core.h>

#include "commands.hpp"
#include "tessera/core/error.hpp"
#include "tessera/llm/quantize.hpp"

namespace tessera::tools {

namespace {

constexpr double mib = 1024.0 * 1024.0;

// "[2048, 32000]" for the tensor's dimensions (trailing 1s of 1-D/2-D shapes dropped).
std::string shape_text(const int64_t * ne) {
    int n = 4;
    while (n > 1 && ne[n - 1] == 1) --n;
    std::string s = "[";
    for (int i = 0; i < n; ++i) s += fmt::format("{}{}", i ? ", " : "", ne[i]);
    return s + "]";
}

// Target type from a case-insensitive name; throws listing the choices.
type parse_target(const std::string & name) {
    std::string up = name;
    std::transform(up.begin(), up.end(), up.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    for (type t : {TSR_TYPE_F32, TSR_TYPE_F16, TSR_TYPE_BF16, TSR_TYPE_Q8_0, TSR_TYPE_Q4_0}) {
        if (up == type_name(t) && llm::is_quantize_target(t)) return t;
    }
    throw error(fmt::format("unknown or unsupported quantization type '{}' (supported: F32, F16, BF16, Q8_0, Q4_0)",
                            name));
}

struct options {
    std::string in, out, type;
    bool allow_requantize = false;
    bool quiet = false;
};

int run_quantize(const options & o) {
    llm::quantize_params p;
    p.target = parse_target(o.type);
    p.allow_requantize = o.allow_requantize;
    if (!o.quiet) {
        p.progress = [](const llm::quantize_progress & pr) {
            const int w = static_cast<int>(fmt::format("{}", pr.count).size());
            fmt::print(stderr, "[{:>{}}/{}] {:<32} {:>5} -> {:<5} {:<16} {:9.2f} MiB -> {:9.2f} MiB\n", pr.index + 1, w,
                       pr.count, pr.name, type_name(pr.from), type_name(pr.to), shape_text(pr.ne),
                       double(pr.bytes_in) / mib, double(pr.bytes_out) / mib);
        };
    }
    const auto t0 = std::chrono::steady_clock::now();
    const llm::quantize_result r = llm::quantize_file(o.in, o.out, p);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fmt::print(stderr, "{}: {} of {} tensors converted to {}; tensor data {:.2f} MiB -> {:.2f} MiB; {:.1f} s\n", o.out,
               r.n_converted, r.n_tensors, type_name(p.target), double(r.bytes_in) / mib, double(r.bytes_out) / mib, s);
    return 0;
}

} // namespace

command register_quantize(CLI::App & app) {
    auto o = std::make_shared<options>();
    CLI::App * sub = app.add_subcommand(
        "quantize", "convert a GGUF model's 2-D weights to another type (F32, F16, BF16, Q8_0, Q4_0)");
    sub->add_option("IN", o->in, "input GGUF model")->required();
    sub->add_option("OUT", o->out, "output GGUF file (written atomically)")->required();
    sub->add_option("TYPE", o->type, "target type: F32, F16, BF16, Q8_0 or Q4_0")->required();
    sub->add_flag("--allow-requantize", o->allow_requantize,
                  "also convert tensors that are already block-quantized (loses accuracy)");
    sub->add_flag("-q,--quiet", o->quiet, "no per-tensor progress lines");
    return command{sub, [o]() { return run_quantize(*o); }};
}

} // namespace tessera::tools

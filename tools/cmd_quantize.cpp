// tools/cmd_quantize.cpp — `tessera quantize IN.gguf OUT.gguf TYPE`: converts
// a model's weight matrices (llm::is_weight_matrix: 2-D once trailing 1s are
// dropped, a name ending in "weight"; of a float or block-quantized type) to
// F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K or the mixes
// Q4_K_S, Q4_K_M, Q5_K_S and Q5_K_M (llm::quantize_file; per-tensor rule and
// fallbacks in tessera/llm/file_type.hpp), copying every other tensor
// unchanged, printing one progress line per tensor on stderr; a tensor whose
// type fell back (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0: ne[0] not a
// multiple of 256) says so at the end of its line.
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

// "[2048, 32000]" for the tensor's dimensions, trailing 1s dropped (a norm
// stored as [64, 1] shows as [64], the rank the conversion rule counts).
std::string shape_text(const int64_t * ne) {
    int n = 4;
    while (n > 1 && ne[n - 1] == 1) --n;
    std::string s = "[";
    for (int i = 0; i < n; ++i) s += fmt::format("{}{}", i ? ", " : "", ne[i]);
    return s + "]";
}

struct options {
    std::string in, out, type;
    bool allow_requantize = false;
    bool quiet = false;
};

int run_quantize(const options & o) {
    llm::quantize_params p;
    p.target = llm::parse_file_type(o.type);
    p.allow_requantize = o.allow_requantize;
    if (!o.quiet) {
        p.progress = [](const llm::quantize_progress & pr) {
            const int w = static_cast<int>(fmt::format("{}", pr.count).size());
            std::string note;
            if (pr.wanted != pr.to) {
                note = fmt::format("  ({}: {} needs ne[0] % {} == 0)", pr.from == pr.to ? "kept" : "fallback",
                                   type_name(pr.wanted), get_type_traits(pr.wanted).block_size);
            }
            eprint("[{:>{}}/{}] {:<32} {:>5} -> {:<5} {:<16} {:9.2f} MiB -> {:9.2f} MiB{}\n", pr.index + 1, w,
                       pr.count, pr.name, type_name(pr.from), type_name(pr.to), shape_text(pr.ne),
                       double(pr.bytes_in) / mib, double(pr.bytes_out) / mib, note);
        };
    }
    const auto t0 = std::chrono::steady_clock::now();
    const llm::quantize_result r = llm::quantize_file(o.in, o.out, p);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // "(10 Q4_K, 3 Q6_K, 2 Q5_0)" when the tensors got more than one type;
    // "(all 32 as Q8_0)" when they all got one other than the target's name
    // (Q6_K of a model whose rows are 64 long: every tensor falls back).
    std::string mix;
    if (r.n_by_type.size() > 1) {
        for (const auto & [t, n] : r.n_by_type) mix += fmt::format("{}{} {}", mix.empty() ? " (" : ", ", n, type_name(t));
        mix += ")";
    } else if (r.n_by_type.size() == 1 && type_name(r.n_by_type.front().first) != llm::file_type_name(p.target)) {
        mix = fmt::format(" (all {} as {})", r.n_by_type.front().second, type_name(r.n_by_type.front().first));
    }
    eprint("{}: {} of {} tensors converted to {}{}; tensor data {:.2f} MiB -> {:.2f} MiB; {:.1f} s\n", printable_utf8(o.out),
               r.n_converted, r.n_tensors, llm::file_type_name(p.target), mix, double(r.bytes_in) / mib,
               double(r.bytes_out) / mib, s);
    if (r.n_converted == 0) {
        eprint("warning: {}: no tensor was converted to {} (none of {}'s tensors is a weight matrix the type "
                           "applies to, or they have it already); general.file_type is kept from the input\n",
                   printable_utf8(o.out), llm::file_type_name(p.target), printable_utf8(o.in));
    }
    return 0;
}

} // namespace

command register_quantize(CLI::App & app) {
    auto o = std::make_shared<options>();
    CLI::App * sub = app.add_subcommand(
        "quantize", "convert a GGUF model's weight matrices to another type or mix (" + llm::quantize_target_names() + ")");
    sub->add_option("IN", o->in, "input GGUF model")->required();
    sub->add_option("OUT", o->out, "output GGUF file (written atomically)")->required();
    sub->add_option("TYPE", o->type,
                    "target: " + llm::quantize_target_names() +
                        " (Q4_K_M: output, and attn_v/ffn_down of some layers, Q6_K, the rest Q4_K; Q4_K_S: output "
                        "Q6_K, the rest Q4_K; Q5_K_M, Q5_K_S: the same with Q5_K; Q4_K/Q5_K/Q6_K fall back to "
                        "Q5_0/Q5_1/Q8_0 where ne[0] % 256 != 0)")
        ->required();
    sub->add_flag("--allow-requantize", o->allow_requantize,
                  "also convert tensors that are already block-quantized (loses accuracy)");
    sub->add_flag("-q,--quiet", o->quiet, "no per-tensor progress lines");
    return command{sub, [o]() { return run_quantize(*o); }};
}

} // namespace tessera::tools

// tools/cmd_synth.cpp — `tessera gguf synth --preset 1b|135m|tiny --type T
// --vocab VOCAB.gguf -o FILE [--seed S]`: writes a random-weight Llama model
// (llm::synth_model; the value generator is documented in tessera/llm/synth.hpp).
// T: F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q4_K_S, Q4_K_M,
// Q5_K_S or Q5_K_M (case-insensitive; per-tensor rule and fallbacks in
// tessera/llm/file_type.hpp).
#include <chrono>
#include <cstdio>
#include <string>

#include <unistd.h>

#include <fmt/core.h>

#include "commands.hpp"
#include "tessera/core/error.hpp"
#include "tessera/core/printable.hpp"
#include "tessera/llm/quantize.hpp"
#include "tessera/gguf/reader.hpp"
#include "tessera/llm/synth.hpp"
#include "tessera/llm/tokenizer.hpp"

namespace tessera::tools {

namespace {

struct options {
    std::string preset;
    std::string type = "F16";
    std::string vocab;
    std::string out;
    std::string seed = "1"; // --seed as given (parse_seed)
    bool quiet = false;
    bool llama31_rope = false;
    uint32_t head_dim = 0;
};

int run_synth(const options & o) {
    llm::file_type t;
    try {
        t = llm::parse_file_type(o.type);
    } catch (const error &) {
        throw option_error(fmt::format("--type '{}' is not supported ({})", printable_utf8(o.type, 64), llm::quantize_target_names()));
    }
    llm::synth_params p;
    p.shape = llm::synth_preset(lower(o.preset)); // case-insensitive, as --type
    p.wtype = t;
    p.vocab = o.vocab;
    p.seed = parse_seed(o.seed);
    p.llama31_rope = o.llama31_rope;
    p.shape.head_dim = o.head_dim;
    if (!o.quiet) {
        // A terminal gets one line rewritten in place, a file or pipe one line per tensor.
        const bool tty = ::isatty(STDERR_FILENO) != 0;
        p.progress = [tty](size_t i, size_t n, std::string_view name) {
            if (tty) {
                eprint("\r[{}/{}] {:<40}", i + 1, n, name);
                if (i + 1 == n) eprint("\n");
            } else {
                eprint("[{}/{}] {}\n", i + 1, n, name);
            }
        };
    }
    // The file the name leads to, for its size after the write: a link
    // such as /dev/stdout (to /proc/self/fd/1) keeps naming the replaced file.
    std::error_code ec;
    std::filesystem::path written = std::filesystem::weakly_canonical(o.out, ec);
    if (ec) written = o.out;
    const auto t0 = std::chrono::steady_clock::now();
    const std::string kind = llm::synth_model(p, o.out);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto size = std::filesystem::file_size(written, ec);
    eprint("{}: synth-{} {} (n_embd {}, {} layers, {} heads, {} kv heads, n_ff {}), seed {}, {:.2f} MiB, {:.1f} s\n",
               printable_utf8(o.out), p.shape.name, llm::file_type_name(t), p.shape.n_embd, p.shape.n_layer, p.shape.n_head, p.shape.n_head_kv,
               p.shape.n_ff, p.seed, double(ec ? 0 : size) / (1024.0 * 1024.0), s);
    // The tokenizer is copied whatever it is; say when `tessera run` cannot use it
    // (bench can: it feeds token ids and never tokenizes).
    try {
        (void)llm::tokenizer::from_gguf(gguf::reader(written)); // (o.out as /dev/stdout names the replaced file)
    } catch (const error & e) {
        eprint("warning: {}: tokenizer model '{}' copied from {}: tessera run and tokenize cannot read it "
               "({}); the file is for runtimes that can\n",
               printable_utf8(o.out), tessera::printable(kind), printable_utf8(o.vocab), e.what());
    }
    return 0;
}

} // namespace

command add_gguf_synth(CLI::App & gguf_sub) {
    auto o = std::make_shared<options>();
    CLI::App * sub = gguf_sub.add_subcommand("synth", "write a random-weight Llama model of a preset shape");
    sub->add_option("--preset", o->preset, "shape: 1b (TinyLlama-1.1B), 135m (SmolLM-135M) or tiny (tests)")
        ->required();
    sub->add_option("--type", o->type,
                    "type of the 2-D weights: " + llm::quantize_target_names() +
                        " (the mixes and their fallbacks as in `tessera quantize`)")
        ->capture_default_str();
    sub->add_option("--vocab", o->vocab, "vocabulary-only GGUF whose tokenizer.* keys are copied")->required();
    sub->add_option("-o,--output", o->out, "output GGUF file (written atomically)")->required();
    sub->add_option("--seed", o->seed, "seed of the weight generator (0 to 2^64 - 1)")
        ->type_name("UINT64")
        ->capture_default_str();
    sub->add_flag("-q,--quiet", o->quiet, "no per-tensor progress lines");
    sub->add_flag("--llama31-rope", o->llama31_rope,
                  "also write rope_freqs.weight with Llama 3.1's RoPE scaling (factor 8, low/high-frequency factors "
                  "1 and 4, original context 8192)");
    sub->add_option("--head-dim", o->head_dim,
                    "head size (written as attention.key_length and value_length; default n_embd / n_head), e.g. "
                    "a head narrower than n_embd / n_head as in Mistral Nemo")
        ->transform(k_whole_number)
        ->check(in_range(2u, 4096u));
    return command{sub, [o]() { return run_synth(*o); }};
}

} // namespace tessera::tools

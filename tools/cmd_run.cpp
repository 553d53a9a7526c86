// tools/cmd_run.cpp — `tessera run` (text generation) and `tessera tokenize`.
#include <algorithm>
#include <chrono>
#include <exception>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "commands.hpp"
#include "session_options.hpp"
#include "tokenize_step.hpp"
#include "tessera/core/error.hpp"
#include "tessera/gguf/reader.hpp"
#include "tessera/llm/model.hpp"
#include "tessera/llm/sampler.hpp"
#include "tessera/llm/session.hpp"
#include "tessera/llm/tokenizer.hpp"

namespace tessera::tools {

namespace {

using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t0) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

// Writes s to stdout at once (the text as it is generated). Throws
// tessera::error when stdout fails (a full disk, a closed pipe with SIGPIPE
// ignored), so generation stops there rather than run on with its output lost.
void write_out(const std::string & s) {
    if (s.empty()) return;
    const size_t put = std::fwrite(s.data(), 1, s.size(), stdout);
    if (std::fflush(stdout) != 0 || put != s.size() || std::ferror(stdout) != 0) {
        throw error(fmt::format("could not write the output to stdout: {}", std::strerror(errno)));
    }
}

// The load-time line saying where the weight matrices went, e.g.
// "repack: 154 of 155 weight matrices in CPU_REPACK (1.02 GiB)".
std::string repack_text(const llm::session & s) {
    const llm::repack_summary r = s.repack();
    std::string why;
    if (!r.requested) {
        why = "--repack off";
    } else if (!r.available) {
        why = fmt::format("device {} has no CPU_REPACK buffer type", s.device_name());
    } else {
        why = size_text(r.bytes);
    }
    return fmt::format("repack: {} of {} weight matrices in CPU_REPACK ({})", r.n_repacked, r.n_matrices, why);
}

// The length of the well-formed UTF-8 character at s[i] (2 to 4 bytes: a
// lead byte C2..F4 and its continuation bytes 80..BF; RFC 3629), or 0.
size_t utf8_char_at(std::string_view s, size_t i) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t need = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (need == 0 || i + need > s.size()) return 0;
    // The second byte's narrower ranges: no overlong forms, no surrogates, nothing above U+10FFFF.
    const auto c1 = static_cast<unsigned char>(s[i + 1]);
    if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) || (c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 > 0x8F)) return 0;
    for (size_t k = 1; k < need; ++k) {
        if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
    }
    return need;
}

// A piece for `tokenize --pieces`, shown between single quotes: the quote,
// the backslash, newline, tab and the other control bytes escaped (\', \\,
// \n, \t, \xNN), so every id stays on one line, and so is every byte that
// is not part of a UTF-8 character (a byte-fallback piece such as <0xFF>),
// so the line stays valid UTF-8; UTF-8 text as it is.
std::string quoted_piece(std::string_view piece) {
    std::string out;
    for (size_t i = 0; i < piece.size(); ++i) {
        const char ch = piece[i];
        const auto c = static_cast<unsigned char>(ch);
        if (c == '\'' || c == '\\') {
            out += '\\';
            out += ch;
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c < 0x20 || c == 0x7f) {
            out += fmt::format("\\x{:02x}", c);
        } else if (c < 0x80) {
            out += ch;
        } else if (const size_t n = utf8_char_at(piece, i); n > 0) {
            out.append(piece.substr(i, n));
            i += n - 1;
        } else {
            out += fmt::format("\\x{:02x}", c);
        }
    }
    return out;
}

// s.decode(tokens), its errors prefixed with `where` (which step failed).
std::span<const float> decode_at(llm::session & s, std::span<const llm::token_id> tokens, const std::string & where) {
    try {
        return s.decode(tokens);
    } catch (const error & e) {
        throw error(fmt::format("{}: {}", where, e.what()));
    }
}

struct run_options {
    std::string model_path;
    std::string prompt;
    std::string prompt_file; // -f: the prompt read from this file ("-": standard input)
    bool prompt_from_file = false; // -f was given (also as -f '': refused, not read as no -f)
    int n_predict = 128;
    int n_ctx = 0;
    std::string seed = "0";    // --seed as given (parse_seed)
    session_options so;        // -t, -b, --device, --kv-type, --repack, --flash-attn
    llm::sampler_params sp;
};

int run_generate(run_options o) {
    const llm::session_params ps = o.so.params(uint32_t(o.n_ctx));
    o.sp.seed = parse_seed(o.seed);
    if (o.prompt_from_file) o.prompt = read_text_file(o.prompt_file, "-f");
    const auto t_load = clock_type::now();
    auto m = llm::model::load(o.model_path);
    const llm::tokenizer tok = llm::tokenizer::from_gguf(m->file());
    llm::session s(*m, ps);
    const double load_ms = ms_since(t_load);

    const llm::hparams & hp = m->hp();
    eprint("model: {} ({}), {} layers, n_embd {}, {} heads ({} kv), head size {}, vocab {}, context {}\n",
               printable_utf8(o.model_path), hp.arch, hp.n_layer, hp.n_embd, hp.n_head, hp.n_head_kv, hp.head_dim(), hp.n_vocab,
               hp.n_ctx_train);
    // The file type ("Q5_K - Medium"), and the type most weights have when
    // that differs (a Q5_K_M file of short rows is mostly Q5_1).
    std::string type_text = m->type_description();
    if (const std::string most = m->type_summary(); most != type_text) type_text += fmt::format(" (most weights {})", most);
    eprint("model: {:.2f} M parameters, type {}, {:.2f} MiB\n", double(m->n_params()) / 1e6, type_text,
               double(m->n_bytes()) / (1024.0 * 1024.0));
    const uint64_t n_batch = std::min<uint64_t>(uint64_t(o.so.n_batch), s.n_ctx()); // as the session uses it
    eprint("device: {} ({}), {}, context {}, batch {}, KV cache {}, flash attention {}\n", s.device_name(),
           s.device_description(), count_text(s.n_threads(), "thread"), s.n_ctx(), n_batch, o.so.kv_type,
           s.flash_attn() ? "on" : "off");
    eprint("{}\n", repack_text(s));
    eprint("load time: {:.1f} ms\n", load_ms);

    const std::string input = o.prompt_from_file ? fmt::format("-f '{}'", o.prompt_file) : std::string("-p");
    const std::vector<llm::token_id> prompt_ids =
        tokenize_step(input, o.prompt, tokenize_bytes_per_byte(tok.kind()), llm::physical_memory_bytes(),
                      [&] { return tok.encode(o.prompt, true, true); });
    if (prompt_ids.empty()) throw error("the prompt gives no tokens and the model adds no BOS");
    if (prompt_ids.size() > s.n_ctx()) {
        const std::string hint = s.n_ctx() < hp.n_ctx_train && prompt_ids.size() <= hp.n_ctx_train
                                     ? fmt::format("raise it with -c, up to the model's {}", hp.n_ctx_train)
                                     : fmt::format("the model's own context is {}; shorten the prompt", hp.n_ctx_train);
        throw error(fmt::format("the prompt has {}, more than the context size {} ({})",
                                count_text(prompt_ids.size(), "token"), s.n_ctx(), hint));
    }
    write_out(o.prompt);
    // An error from here on ends the text's line first, so that its
    // message starts a line of its own on a terminal.
    struct end_line_on_error {
        bool armed = true; // the line is still open
        ~end_line_on_error() {
            if (armed && std::uncaught_exceptions() > 0) eprint("\n");
        }
    } end_line;

    llm::sampler smp(o.sp);
    for (llm::token_id id : prompt_ids) smp.accept(id);
    llm::stream_decoder out(tok);

    const auto t_pp = clock_type::now();
    std::span<const float> logits =
        decode_at(s, prompt_ids, fmt::format("after the prompt ({})", count_text(prompt_ids.size(), "token")));
    const double pp_ms = ms_since(t_pp);

    int n_gen = 0;
    bool context_full = false;
    const auto t_tg = clock_type::now();
    while (n_gen < o.n_predict) {
        const llm::token_id id = smp.sample(logits);
        smp.accept(id);
        ++n_gen;
        if (tok.is_eog(id)) break;
        write_out(out.push(id));
        if (n_gen == o.n_predict) break;
        if (s.n_past() >= s.n_ctx()) {
            context_full = true;
            break;
        }
        logits = decode_at(s, std::span<const llm::token_id>(&id, 1), fmt::format("after generated token {}", n_gen));
    }
    write_out(out.finish());
    const double tg_ms = ms_since(t_tg);
    eprint("\n");
    end_line.armed = false;
    eprint("prompt: {} in {:.1f} ms, {:.2f} tokens/s\n", count_text(prompt_ids.size(), "token"), pp_ms,
               pp_ms > 0 ? 1000.0 * double(prompt_ids.size()) / pp_ms : 0.0);
    // The first generated token comes from the prompt's logits: the rate
    // counts the n_gen - 1 decode steps after it.
    if (n_gen > 1 && tg_ms > 0) {
        eprint("generation: {} in {:.1f} ms, {:.2f} tokens/s\n", count_text(n_gen, "token"), tg_ms,
                   1000.0 * double(n_gen - 1) / tg_ms);
    } else {
        eprint("generation: {} in {:.1f} ms\n", count_text(n_gen, "token"), tg_ms);
    }
    if (context_full) {
        const std::string hint = s.n_ctx() < hp.n_ctx_train ? fmt::format("raise it with -c, up to the model's {}", hp.n_ctx_train)
                                                             : std::string("the model's own context length");
        throw error(fmt::format("the context of {} is full after {} ({})", count_text(s.n_ctx(), "token"),
                                count_text(n_gen, "generated token"), hint));
    }
    return 0;
}

} // namespace

command register_run(CLI::App & app) {
    auto o = std::make_shared<run_options>();
    CLI::App * sub = app.add_subcommand("run", "generate text from a GGUF Llama model");
    sub->add_option("-m,--model", o->model_path, "GGUF model file")->required();
    CLI::Option * prompt =
        sub->add_option("-p,--prompt", o->prompt, "prompt text (UTF-8); without -p or -f the text starts from BOS alone");
    CLI::Option * file =
        sub->add_option("-f,--file", o->prompt_file, "read the prompt from this file (- for standard input)")->excludes(prompt);
    sub->add_option("-n,--n-predict", o->n_predict, "most tokens to generate")
        ->transform(k_whole_number)
        ->check(in_range(0, 1 << 24))
        ->capture_default_str();
    sub->add_option("-c,--ctx-size", o->n_ctx, "context size in tokens (0 = the model's, at most 4096)")
        ->transform(k_whole_number)
        ->check(in_range(0, 1 << 24))
        ->capture_default_str();
    sub->add_option("--temp", o->sp.temperature, "temperature (0 = greedy)")
        ->check(k_finite_number)
        ->check(in_range(0.0f, 100.0f))
        ->capture_default_str();
    sub->add_option("--top-k", o->sp.top_k, "top-k (0 = off)")
        ->transform(k_whole_number)
        ->check(in_range(0, 1 << 24))
        ->capture_default_str();
    sub->add_option("--top-p", o->sp.top_p, "top-p (1 = off)")
        ->check(k_finite_number)
        ->check(in_range(0.0f, 1.0f))
        ->capture_default_str();
    sub->add_option("--min-p", o->sp.min_p, "min-p (0 = off)")
        ->check(k_finite_number)
        ->check(in_range(0.0f, 1.0f))
        ->capture_default_str();
    sub->add_option("--repeat-penalty", o->sp.repeat_penalty, "repetition penalty (1 = off)")
        ->check(k_finite_number)
        ->check(in_range(0.01f, 100.0f))
        ->capture_default_str();
    sub->add_option("--repeat-last-n", o->sp.repeat_last_n, "tokens of history for the penalty")
        ->transform(k_whole_number)
        ->check(in_range(0, 1 << 20))
        ->capture_default_str();
    sub->add_option("--seed", o->seed,
                    "random seed for sampling (0 to 2^64 - 1); fixed, not random, when not given: the same options give the same text")
        ->type_name("UINT64")
        ->capture_default_str();
    o->so.add_to(sub);
    return {sub, [o, file] {
                o->prompt_from_file = file->count() > 0;
                return run_generate(*o);
            }};
}

command register_tokenize(CLI::App & app) {
    struct options {
        std::string model_path;
        std::string text;
        std::string text_file; // -f: the text read from this file ("-": standard input)
        bool pieces = false;
        bool no_bos = false;
    };
    auto o = std::make_shared<options>();
    CLI::App * sub = app.add_subcommand("tokenize", "print the token ids of a text");
    sub->add_option("-m,--model", o->model_path, "GGUF model or vocab file")->required();
    CLI::Option * text = sub->add_option("-p,--prompt", o->text, "text to tokenize (UTF-8)");
    CLI::Option * file = sub->add_option("-f,--file", o->text_file, "read the text from this file (- for standard input)");
    text->excludes(file);
    sub->add_flag("--pieces", o->pieces, "print each id with its piece");
    sub->add_flag("--no-bos", o->no_bos, "do not add the special tokens the model asks for");
    return {sub, [o, text, file] {
                if (text->count() == 0 && file->count() == 0) throw error("tokenize: give the text with -p or -f");
                if (file->count() > 0) o->text = read_text_file(o->text_file, "-f");
                const gguf::reader r(o->model_path);
                const llm::tokenizer tok = llm::tokenizer::from_gguf(r);
                const std::string input = file->count() > 0 ? fmt::format("-f '{}'", o->text_file) : std::string("-p");
                const std::vector<llm::token_id> ids =
                    tokenize_step(input, o->text, tokenize_bytes_per_byte(tok.kind()), llm::physical_memory_bytes(),
                                  [&] { return tok.encode(o->text, !o->no_bos, true); });
                // Written in blocks of about 64 KiB: a long text's ids as one
                // string would take more memory than tokenizing it.
                std::string line;
                for (size_t i = 0; i < ids.size(); ++i) {
                    if (i) line += o->pieces ? "\n" : " ";
                    if (o->pieces) {
                        line += fmt::format("{} '{}'", ids[i], quoted_piece(tok.token_to_piece(ids[i], true)));
                    } else {
                        line += std::to_string(ids[i]);
                    }
                    if (line.size() >= (size_t(64) << 10)) {
                        write_out(line);
                        line.clear();
                    }
                }
                line += "\n";
                write_out(line);
                return 0;
            }};
}

} // namespace tessera::tools

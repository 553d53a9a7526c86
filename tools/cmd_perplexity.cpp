// tools/cmd_perplexity.cpp — `tessera perplexity`: a model's perplexity on
// a text file (llm::perplexity), printed as llama.cpp's perplexity tool
// prints it, so scripts that read one read the other.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "commands.hpp"
#include "session_options.hpp"
#include "tokenize_step.hpp"
#include "tessera/core/error.hpp"
#include "tessera/llm/model.hpp"
#include "tessera/llm/perplexity.hpp"
#include "tessera/llm/session.hpp"
#include "tessera/llm/tokenizer.hpp"

namespace tessera::tools {

namespace {

// Writes to stdout now (the running estimates show while the next chunk runs).
void print_now(const std::string & s) {
    if (std::fwrite(s.data(), 1, s.size(), stdout) != s.size() || std::fflush(stdout) != 0) {
        throw error(fmt::format("could not write the output to stdout: {}", std::strerror(errno)));
    }
}

struct perplexity_options {
    std::string model_path;
    std::string text_path;
    int n_chunk = 512;
    int64_t max_chunks = 0;
    session_options so;
};

int run_perplexity(const perplexity_options & o) {
    const llm::session_params ps = o.so.params(uint32_t(o.n_chunk));
    const std::string text = read_text_file(o.text_path, "-f");
    auto m = llm::model::load(o.model_path);
    const llm::tokenizer tok = llm::tokenizer::from_gguf(m->file());
    // Special-token text in the file ("</s>") is plain text, as the
    // reference tool reads it (parse_special off): a text that quotes such
    // tokens is scored on the same tokens there and here.
    const std::vector<llm::token_id> tokens =
        tokenize_step(fmt::format("-f '{}'", o.text_path), text, tokenize_bytes_per_byte(tok.kind()),
                      llm::physical_memory_bytes(), [&] { return tok.encode(text, true, false); });
    if (uint64_t(o.n_chunk) > m->hp().n_ctx_train) {
        throw error(fmt::format("-c {}: longer than the model's context of {}", o.n_chunk, m->hp().n_ctx_train));
    }
    if (tokens.size() < size_t(o.n_chunk)) {
        // The count checked includes the special tokens the model adds
        // (BOS): said apart, so an empty text has 0 tokens, not 1.
        const size_t n_text = tok.encode(text, false, false).size();
        std::string with;
        if (tokens.size() > n_text) {
            const bool bos_alone = tokens.size() == n_text + 1 && tokens.front() == tok.bos_id();
            with = fmt::format(" ({} with {})", tokens.size(), bos_alone ? "BOS" : "the special tokens the model adds");
        }
        throw error(fmt::format("-f '{}': the text has {}{}, fewer than one chunk of {} (-c); use a smaller -c or a "
                                "longer text",
                                printable_utf8(o.text_path), count_text(n_text, "token"), with, o.n_chunk));
    }
    llm::session s(*m, ps);
    uint64_t n_chunks = tokens.size() / size_t(o.n_chunk);
    if (o.max_chunks != 0) n_chunks = std::min(n_chunks, uint64_t(o.max_chunks));
    eprint("perplexity: {}, {} of {} ({} scored per chunk), {}, {}, KV cache {}, flash attention {}\n",
           count_text(tokens.size(), "token"), count_text(n_chunks, "chunk"), o.n_chunk, o.n_chunk - 1 - o.n_chunk / 2,
           s.device_name(), count_text(uint64_t(s.n_threads()), "thread"), o.so.kv_type, s.flash_attn() ? "on" : "off");
    llm::perplexity_params pp;
    pp.n_chunk_tokens = uint32_t(o.n_chunk);
    pp.max_chunks = uint64_t(o.max_chunks);
    const llm::perplexity_totals t =
        llm::perplexity(s, tok, tokens, pp, [](uint64_t c, uint64_t, const llm::perplexity_totals & sofar) {
            print_now(fmt::format("[{}]{:.4f},", c + 1, sofar.ppl()));
        });
    print_now(fmt::format("\nFinal estimate: PPL = {:.4f} +/- {:.5f}\n", t.ppl(), t.ppl_stderr()));
    return 0;
}

} // namespace

command register_perplexity(CLI::App & app) {
    auto o = std::make_shared<perplexity_options>();
    CLI::App * sub = app.add_subcommand("perplexity", "a model's perplexity on a text file (chunks scored as llama.cpp's perplexity tool does)");
    sub->add_option("-m,--model", o->model_path, "GGUF model file")->required();
    sub->add_option("-f,--file", o->text_path, "text file (UTF-8; - for standard input)")->required();
    sub->add_option("-c,--ctx-size", o->n_chunk, "tokens per chunk (each evaluated from an empty cache; its second half is scored)")
        ->transform(k_whole_number)
        ->check(in_range(4, 1 << 20))
        ->capture_default_str();
    sub->add_option("--chunks", o->max_chunks, "most chunks to score (0 = all)")
        ->transform(k_whole_number)
        ->check(in_range(int64_t{0}, std::numeric_limits<int64_t>::max()))
        ->capture_default_str();
    o->so.add_to(sub);
    return {sub, [o] { return run_perplexity(*o); }};
}

} // namespace tessera::tools

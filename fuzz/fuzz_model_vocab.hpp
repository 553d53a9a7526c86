// fuzz/fuzz_model_vocab.hpp — the 16-token vocabulary of fuzz_model's synth
// models (fuzz_model_seeds and fuzz_model's structure-aware mutator).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tessera/gguf/writer.hpp"

namespace tessera::fuzz {

// Writes a vocabulary-only GGUF to `path`: an SPM-style "llama" tokenizer of
// 16 tokens (unknown, BOS, EOS, byte tokens and a few pieces) for
// llm::synth_model to copy.
inline void write_micro_vocab(const std::filesystem::path & path) {
    std::vector<std::string> tokens{"<unk>", "<s>", "</s>"};
    std::vector<float> scores{0, 0, 0};
    std::vector<int32_t> types{2, 3, 3};
    for (const char * t : {"\xe2\x96\x81", "a", "b", "c", "\xe2\x96\x81" "a", "ab", "ba", "abc", "<0x0A>", "<0x20>",
                           "d", "e", "<0x41>"}) {
        tokens.emplace_back(t);
        scores.push_back(-float(tokens.size()));
        types.push_back(std::string(t).starts_with("<0x") ? 6 : 1);
    }
    gguf::writer w;
    w.set_string("tokenizer.ggml.model", "llama");
    w.set("tokenizer.ggml.tokens", gguf::value::array_string(tokens));
    w.set("tokenizer.ggml.scores", gguf::value::array_f32(scores));
    w.set("tokenizer.ggml.token_type", gguf::value::array_i32(types));
    w.set_u32("tokenizer.ggml.bos_token_id", 1);
    w.set_u32("tokenizer.ggml.eos_token_id", 2);
    w.write(path);
}

} // namespace tessera::fuzz

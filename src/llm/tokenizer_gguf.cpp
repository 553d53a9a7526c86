// tokenizer_gguf.cpp — building a tokenizer from GGUF tokenizer metadata
// (keys as written by the GGUF converters; see tokenizer.hpp for the list).
#include <fmt/format.h>

#include "tessera/core/error.hpp"
#include "tessera/core/printable.hpp"
#include "tessera/gguf/reader.hpp"
#include "pretokenizer.hpp"
#include "tessera/llm/tokenizer.hpp"

namespace tessera::llm {

namespace {

constexpr const char * k_model = "tokenizer.ggml.model";
constexpr const char * k_tokens = "tokenizer.ggml.tokens";
constexpr const char * k_scores = "tokenizer.ggml.scores";
constexpr const char * k_types = "tokenizer.ggml.token_type";
constexpr const char * k_merges = "tokenizer.ggml.merges";
constexpr const char * k_pre = "tokenizer.ggml.pre";

// A special token id: absent key -> `fallback` (absent too when the
// vocabulary is too small for it); 0xFFFFFFFF or a negative
// value -> absent (-1); otherwise must lie inside the vocabulary.
token_id read_special_id(const gguf::reader & r, const char * key, token_id fallback, size_t n_vocab) {
    const std::optional<int64_t> v = r.find_int(key);
    if (!v) {
        return fallback >= 0 && static_cast<size_t>(fallback) < n_vocab ? fallback : -1;
    }
    if (*v < 0 || *v == 0xFFFFFFFFll) {
        return -1;
    }
    if (static_cast<uint64_t>(*v) >= n_vocab) {
        throw error(fmt::format("tokenizer: {}: {} = {} is outside the vocabulary [0, {})", r.name(), key, *v,
                                n_vocab));
    }
    return static_cast<token_id>(*v);
}

} // namespace

tokenizer tokenizer::from_gguf(const gguf::reader & r) {
    const std::string_view model = r.get_string(k_model);
    vocab_data v;
    if (model == "llama") {
        v.kind = vocab_kind::spm;
    } else if (model == "gpt2") {
        v.kind = vocab_kind::bpe;
    } else {
        throw error(fmt::format("tokenizer: {}: unsupported tokenizer model '{}' ({}); supported: 'llama' "
                                "(SentencePiece), 'gpt2' (byte-level BPE)",
                                r.name(), tessera::printable(model), k_model));
    }
    const bool bpe = v.kind == vocab_kind::bpe;

    const std::vector<std::string_view> tokens = r.get_array_string(k_tokens);
    const size_t n = tokens.size();
    if (n == 0) {
        throw error(fmt::format("tokenizer: {}: {} is empty", r.name(), k_tokens));
    }
    v.tokens.assign(tokens.begin(), tokens.end());

    if (!bpe || r.find_key(k_scores) != nullptr) {
        v.scores = r.get_array_f32(k_scores);
        if (v.scores.size() != n) {
            throw error(fmt::format("tokenizer: {}: {} has {} entries but {} has {}", r.name(), k_scores,
                                    v.scores.size(), k_tokens, n));
        }
    }

    if (!bpe || r.find_key(k_types) != nullptr) {
        const gguf::value & types = r.get(k_types);
        std::vector<int32_t> raw_types;
        if (types.is_array() && types.array_type() == gguf::value_type::UINT32) {
            for (const uint32_t t : types.as_u32_array()) {
                raw_types.push_back(t > 0x7FFFFFFFu ? -1 : static_cast<int32_t>(t));
            }
        } else {
            raw_types = r.get_array_i32(k_types); // throws naming the key for any other type
        }
        if (raw_types.size() != n) {
            throw error(fmt::format("tokenizer: {}: {} has {} entries but {} has {}", r.name(), k_types,
                                    raw_types.size(), k_tokens, n));
        }
        v.types.reserve(n);
        for (size_t i = 0; i < n; ++i) {
            if (raw_types[i] < 1 || raw_types[i] > 6) {
                throw error(fmt::format("tokenizer: {}: {}[{}] = {} is not a token type (1..6)", r.name(), k_types,
                                        i, raw_types[i]));
            }
            v.types.push_back(static_cast<token_type>(raw_types[i]));
        }
    } else {
        v.types.assign(n, token_type::normal);
    }

    if (bpe) {
        const std::vector<std::string_view> merges = r.get_array_string(k_merges);
        v.merges.assign(merges.begin(), merges.end());
        const std::optional<std::string_view> pre = r.find_string(k_pre);
        // An empty name counts as none, as in the reference.
        const std::optional<pre_tokenizer> kind =
            pre_tokenizer_from_name(pre.value_or("").empty() ? std::string_view("default") : *pre);
        if (!kind) {
            throw error(fmt::format("tokenizer: {}: unsupported pre-tokenizer '{}' ({}); supported: {}", r.name(),
                                    tessera::printable(*pre), k_pre, pre_tokenizer_names()));
        }
        v.pre = *kind;
    }

    // The reference's defaults: SentencePiece 1/2/0; BPE 11/11/none.
    v.bos_id = read_special_id(r, "tokenizer.ggml.bos_token_id", bpe ? 11 : 1, n);
    v.eos_id = read_special_id(r, "tokenizer.ggml.eos_token_id", bpe ? 11 : 2, n);
    v.unk_id = read_special_id(r, "tokenizer.ggml.unknown_token_id", bpe ? -1 : 0, n);
    v.eot_id = read_special_id(r, "tokenizer.ggml.eot_token_id", -1, n);
    v.eom_id = read_special_id(r, "tokenizer.ggml.eom_token_id", -1, n);
    v.fim_pad_id = read_special_id(r, "tokenizer.ggml.fim_pad_token_id", -1, n);
    v.fim_rep_id = read_special_id(r, "tokenizer.ggml.fim_rep_token_id", -1, n);
    v.fim_sep_id = read_special_id(r, "tokenizer.ggml.fim_sep_token_id", -1, n);
    const bool bos_default = !bpe || adds_bos_by_default(v.pre);
    v.add_bos = r.find_bool("tokenizer.ggml.add_bos_token").value_or(bos_default);
    v.add_eos = r.find_bool("tokenizer.ggml.add_eos_token").value_or(false);
    v.add_space_prefix = r.find_bool("tokenizer.ggml.add_space_prefix").value_or(!bpe);

    try {
        return tokenizer(std::move(v));
    } catch (const error & e) {
        throw error(fmt::format("{} (in {})", e.what(), r.name()));
    }
}

} // namespace tessera::llm

// tokenizer.cpp — vocabulary validation and indexing (construction and
// accessors). Encoding lives in tokenizer_encode.cpp, decoding in
// tokenizer_decode.cpp, GGUF loading in tokenizer_gguf.cpp.
#include "tessera/llm/tokenizer.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include <fmt/format.h>

#include "special_tokens.hpp"
#include "tessera/core/error.hpp"
#include "tessera/core/printable.hpp"

namespace tessera::llm {

namespace {

// Parses a byte token's text "<0xHH>" (two hex digits, either case); -1 if
// the text has another form.
int parse_byte_token(std::string_view s) {
    if (s.size() != 6 || s.substr(0, 3) != "<0x" || s[5] != '>') {
        return -1;
    }
    int v = 0;
    for (size_t i = 3; i < 5; ++i) {
        const char c = s[i];
        int d;
        if (c >= '0' && c <= '9') {
            d = c - '0';
        } else if (c >= 'A' && c <= 'F') {
            d = c - 'A' + 10;
        } else if (c >= 'a' && c <= 'f') {
            d = c - 'a' + 10;
        } else {
            return -1;
        }
        v = v * 16 + d;
    }
    return v;
}

} // namespace

tokenizer::tokenizer(vocab_data v)
    : tokens_(std::move(v.tokens)),
      scores_(std::move(v.scores)),
      types_(std::move(v.types)),
      kind_(v.kind),
      pre_(v.pre),
      bos_id_(v.bos_id),
      eos_id_(v.eos_id),
      unk_id_(v.unk_id),
      eot_id_(v.eot_id),
      eom_id_(v.eom_id),
      add_bos_(v.add_bos),
      add_eos_(v.add_eos),
      add_space_prefix_(v.add_space_prefix) {
    const size_t n = tokens_.size();
    if (n == 0) {
        throw error("tokenizer: the vocabulary is empty");
    }
    if (kind_ == vocab_kind::bpe && scores_.empty()) {
        scores_.assign(n, 0.0f); // byte-level BPE merges by rank, not score
    }
    if (scores_.size() != n || types_.size() != n) {
        throw error(fmt::format("tokenizer: vocabulary arrays differ in length: {} tokens, {} scores, {} token types",
                                n, scores_.size(), types_.size()));
    }
    if (n > static_cast<size_t>(INT32_MAX)) {
        throw error(fmt::format("tokenizer: vocabulary of {} tokens is too large", n));
    }
    const auto check_special = [&](token_id & id, const char * what) {
        if (id < 0) {
            id = -1;
        } else if (static_cast<size_t>(id) >= n) {
            throw error(fmt::format("tokenizer: {} token id {} is outside the vocabulary [0, {})", what, id, n));
        }
    };
    check_special(bos_id_, "BOS");
    check_special(eos_id_, "EOS");
    check_special(unk_id_, "unknown");
    check_special(eot_id_, "EOT");
    check_special(eom_id_, "EOM");
    check_special(v.fim_pad_id, "FIM pad");
    check_special(v.fim_rep_id, "FIM repository");
    check_special(v.fim_sep_id, "FIM file separator");
    if (kind_ == vocab_kind::bpe) {
        index_merges(v.merges);
    }

    for (size_t i = 0; i < n; ++i) {
        const auto t = static_cast<int32_t>(types_[i]);
        if (t < 1 || t > 6) {
            throw error(fmt::format("tokenizer: token {} has invalid token type {} (expected 1..6)", i, t));
        }
    }
    // End of generation, and the types the reference overrides by text.
    eog_ = classify_special_tokens(tokens_, types_,
                                   {eos_id_, eot_id_, eom_id_, v.fim_pad_id, v.fim_rep_id, v.fim_sep_id});

    byte_value_.assign(n, -1);
    std::array<token_id, 256> byte_type_token;
    byte_type_token.fill(-1);
    piece_to_id_.reserve(n);
    for (size_t i = 0; i < n; ++i) {
        // A NaN merge score has no order: the merge queue's comparison
        // would no longer be a strict weak order (undefined behaviour), so
        // which pair merges first would be arbitrary. Only pieces that
        // merging can produce have their score read.
        if (kind_ == vocab_kind::spm &&
            (types_[i] == token_type::normal || types_[i] == token_type::user_defined) && std::isnan(scores_[i])) {
            throw error(fmt::format("tokenizer: token {} has score nan (a merge score must be a number)", i));
        }
        if (types_[i] == token_type::byte) {
            const int b = parse_byte_token(tokens_[i]);
            if (b < 0) {
                throw error(fmt::format("tokenizer: byte token {} has text '{}', expected <0xHH>", i,
                                        tessera::printable(tokens_[i])));
            }
            byte_value_[i] = static_cast<int16_t>(b);
            if (byte_type_token[b] < 0) {
                byte_type_token[b] = static_cast<token_id>(i);
            }
        }
        if (!tokens_[i].empty()) {
            // A repeated piece text maps to its last id (as the reference does).
            piece_to_id_.insert_or_assign(tokens_[i], static_cast<token_id>(i));
        }
        if (types_[i] == token_type::control || types_[i] == token_type::unknown ||
            types_[i] == token_type::user_defined) {
            if (!tokens_[i].empty()) {
                special_by_length_.push_back(static_cast<token_id>(i));
            }
        }
    }
    // Longest special text first, so that e.g. "<|end|>" is matched before a
    // shorter special text it contains; equal lengths by id for determinism.
    std::stable_sort(special_by_length_.begin(), special_by_length_.end(), [&](token_id a, token_id b) {
        return tokens_[a].size() > tokens_[b].size();
    });

    // Byte fallback: the byte token <0xHH> (upper-case spelling preferred,
    // else any spelling), else a one-byte piece, else <unk>, else none.
    for (int b = 0; b < 256; ++b) {
        token_id id = find_piece(fmt::format("<0x{:02X}>", b));
        if (id < 0 || types_[id] != token_type::byte) {
            id = byte_type_token[b];
        }
        if (id < 0) {
            id = find_piece(std::string(1, static_cast<char>(b)));
        }
        if (id < 0) {
            id = unk_id_;
        }
        byte_to_token_[b] = id;
    }
    if (kind_ == vocab_kind::spm) {
        index_spm_joins();
    }
}

void tokenizer::check_id(token_id id) const {
    if (id < 0 || id >= n_vocab()) {
        throw error(fmt::format("tokenizer: token id {} is outside the vocabulary [0, {})", id, n_vocab()));
    }
}

const std::string & tokenizer::token_text(token_id id) const {
    check_id(id);
    return tokens_[id];
}

float tokenizer::token_score(token_id id) const {
    check_id(id);
    return scores_[id];
}

token_type tokenizer::get_token_type(token_id id) const {
    check_id(id);
    return types_[id];
}

token_id tokenizer::find_piece(std::string_view text) const {
    const auto it = piece_to_id_.find(text);
    return it == piece_to_id_.end() ? -1 : it->second;
}

} // namespace tessera::llm

// tokenizer_encode.cpp — text -> token ids for SentencePiece-style vocabularies.
//
// 1. Special-token text is cut out of the input (user-defined tokens always,
//    control/unknown tokens with parse_special), longest token text first.
// 2. Each remaining text run gets one leading space when it starts the input
//    or follows a special token (add_space_prefix), and every ' ' becomes
//    U+2581 (SentencePiece's meta symbol for whitespace).
// 3. The run is split by SentencePiece BPE merging (Kudo & Richardson 2018;
//    sentencepiece bpe_model.cc): one symbol per UTF-8 character, then the
//    adjacent pair whose concatenation is a vocabulary piece of highest score
//    is merged (leftmost on ties) until no pair is a piece (pair_merge.hpp).
// 4. Symbols that are not pieces become byte-fallback tokens, one per byte.
#include <string>
#include <vector>

#include <fmt/format.h>

#include "pair_merge.hpp"
#include "tessera/core/error.hpp"
#include "tessera/llm/tokenizer.hpp"

namespace tessera::llm {

namespace {

constexpr std::string_view k_space_symbol = "\xE2\x96\x81"; // U+2581

// A piece of the input: either raw text [offset, offset + length) or a token.
struct fragment {
    bool is_token;
    token_id id;
    size_t offset;
    size_t length;
};

} // namespace

void tokenizer::encode_spm(std::string_view text, std::vector<token_id> & out) const {
    // A piece that merging may produce: normal or user-defined tokens only,
    // so control, unknown, unused and byte tokens never come out of text.
    const auto mergeable = [&](std::string_view piece) -> token_id {
        const token_id id = find_piece(piece);
        if (id < 0 || (types_[id] != token_type::normal && types_[id] != token_type::user_defined)) {
            return -1;
        }
        return id;
    };
    // Highest score first: the key is -score. left and right are adjacent in text.
    const std::vector<merge_symbol> symbols =
        merge_pairs(text, [&](std::string_view left, std::string_view right) -> std::optional<double> {
            const token_id id = mergeable(std::string_view(left.data(), left.size() + right.size()));
            if (id < 0) return std::nullopt;
            return -static_cast<double>(scores_[id]);
        });
    if (symbols.empty()) {
        return;
    }

    for (int i = 0; i >= 0; i = symbols[i].next) {
        const std::string_view piece = text.substr(symbols[i].offset, symbols[i].length);
        const token_id id = mergeable(piece);
        if (id >= 0) {
            out.push_back(id);
            continue;
        }
        for (const char c : piece) {
            const auto b = static_cast<uint8_t>(c);
            if (byte_to_token_[b] < 0) {
                throw error(fmt::format("tokenizer: byte 0x{:02X} cannot be encoded: the vocabulary has no <0x{:02X}> "
                                        "token and no unknown token",
                                        b, b));
            }
            out.push_back(byte_to_token_[b]);
        }
    }
}

std::vector<token_id> tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
    // Step 1: cut special-token text out of the input.
    std::vector<fragment> fragments;
    if (!text.empty()) {
        fragments.push_back({false, -1, 0, text.size()});
    }
    std::vector<fragment> next;
    for (const token_id special : special_by_length_) {
        const token_type type = types_[special];
        if (!parse_special && (type == token_type::control || type == token_type::unknown)) {
            continue;
        }
        const std::string & needle = tokens_[special];
        next.clear();
        for (const fragment & f : fragments) {
            if (f.is_token) {
                next.push_back(f);
                continue;
            }
            const std::string_view hay = text.substr(f.offset, f.length);
            size_t start = 0;
            for (size_t pos = hay.find(needle); pos != std::string_view::npos; pos = hay.find(needle, start)) {
                if (pos > start) {
                    next.push_back({false, -1, f.offset + start, pos - start});
                }
                next.push_back({true, special, 0, 0});
                start = pos + needle.size();
            }
            if (start < hay.size()) {
                next.push_back({false, -1, f.offset + start, hay.size() - start});
            }
        }
        fragments.swap(next);
    }

    // Steps 2-4 per fragment.
    std::vector<token_id> out;
    out.reserve(text.size() / 3 + 4);
    if (add_special && add_bos_ && bos_id_ >= 0) {
        out.push_back(bos_id_);
    }
    bool after_special = true; // the start of the input counts as "after a special token"
    std::string escaped;
    for (const fragment & f : fragments) {
        if (f.is_token) {
            out.push_back(f.id);
            after_special = true;
            continue;
        }
        if (kind_ == vocab_kind::bpe) {
            encode_bpe(text.substr(f.offset, f.length), out);
            continue;
        }
        escaped.clear();
        if (add_space_prefix_ && after_special) {
            escaped += k_space_symbol;
        }
        for (const char c : text.substr(f.offset, f.length)) {
            if (c == ' ') {
                escaped += k_space_symbol;
            } else {
                escaped += c;
            }
        }
        encode_spm(escaped, out);
        after_special = false;
    }
    if (add_special && add_eos_ && eos_id_ >= 0) {
        out.push_back(eos_id_);
    }
    return out;
}

} // namespace tessera::llm

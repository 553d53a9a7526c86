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
//    is merged (leftmost on ties) until no pair is a piece. Candidate pairs sit
//    in a max-heap; entries made stale by an earlier merge are detected by
//    their recorded byte length and skipped.
// 4. Symbols that are not pieces become byte-fallback tokens, one per byte.
#include <queue>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tessera/core/error.hpp"
#include "tessera/llm/tokenizer.hpp"

namespace tessera::llm {

namespace {

constexpr std::string_view k_space_symbol = "\xE2\x96\x81"; // U+2581

// Byte length of the UTF-8 character whose lead byte is `c`, from the lead
// byte alone: continuation and ASCII bytes count 1, 110xxxxx 2, 1110xxxx 3,
// 1111xxxx 4 (the reference groups bytes the same way, without validating).
size_t utf8_len_from_lead(unsigned char c) {
    static constexpr uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[c >> 4];
}

// A piece of the input: either raw text [offset, offset + length) or a token.
struct fragment {
    bool is_token;
    token_id id;
    size_t offset;
    size_t length;
};

struct symbol {
    int prev;
    int next;
    size_t offset; // into the escaped text
    size_t length; // bytes; 0 once merged into its left neighbour
};

struct bigram {
    float score;
    int left;
    int right;
    size_t length; // byte length of left + right when the pair was queued
};

// Max-heap order: higher score first, then the leftmost pair.
struct bigram_less {
    bool operator()(const bigram & a, const bigram & b) const {
        return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
};

} // namespace

void tokenizer::encode_spm(std::string_view text, std::vector<token_id> & out) const {
    std::vector<symbol> symbols;
    symbols.reserve(text.size());
    for (size_t off = 0; off < text.size();) {
        const size_t len = std::min(utf8_len_from_lead(static_cast<unsigned char>(text[off])), text.size() - off);
        const int index = static_cast<int>(symbols.size());
        symbols.push_back({index - 1, index + 1, off, len});
        off += len;
    }
    if (symbols.empty()) {
        return;
    }
    symbols.back().next = -1;

    // A piece that merging may produce: normal or user-defined tokens only,
    // so control, unknown, unused and byte tokens never come out of text.
    const auto mergeable = [&](std::string_view piece) -> token_id {
        const token_id id = find_piece(piece);
        if (id < 0 || (types_[id] != token_type::normal && types_[id] != token_type::user_defined)) {
            return -1;
        }
        return id;
    };

    std::priority_queue<bigram, std::vector<bigram>, bigram_less> queue;
    const auto try_add = [&](int left, int right) {
        if (left < 0 || right < 0) {
            return;
        }
        const size_t length = symbols[left].length + symbols[right].length;
        const token_id id = mergeable(text.substr(symbols[left].offset, length));
        if (id >= 0) {
            queue.push({scores_[id], left, right, length});
        }
    };

    for (int i = 1; i < static_cast<int>(symbols.size()); ++i) {
        try_add(i - 1, i);
    }
    while (!queue.empty()) {
        const bigram top = queue.top();
        queue.pop();
        symbol & left = symbols[top.left];
        symbol & right = symbols[top.right];
        // Stale: one side was merged away or grew since this pair was queued.
        if (left.length == 0 || right.length == 0 || left.length + right.length != top.length) {
            continue;
        }
        left.length += right.length;
        right.length = 0;
        left.next = right.next;
        if (right.next >= 0) {
            symbols[right.next].prev = top.left;
        }
        try_add(left.prev, top.left);
        try_add(top.left, left.next);
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

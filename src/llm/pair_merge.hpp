// pair_merge.hpp — the merge loop both tokenizers share (internal to the llm
// layer): a text split into one symbol per UTF-8 character, then the
// adjacent pair with the best priority merged until no pair merges.
// SentencePiece BPE ranks a pair by the score of the piece it makes (Kudo &
// Richardson 2018; sentencepiece bpe_model.cc), byte-level BPE by the rank of
// the merge rule (Sennrich et al. 2016); both take the leftmost pair on a tie.
//
// Memory: 16 bytes a character for the symbols and 12 bytes a queued pair
// (about one a character at the start), so callers hand in texts of bounded
// size where they can (the SPM encoder cuts long texts into runs that cannot
// merge across their ends, tokenizer_encode.cpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "tessera/core/error.hpp"

namespace tessera::llm {

struct merge_symbol {
    int32_t prev;
    int32_t next;    // -1 at the end
    uint32_t offset; // into the text, bytes
    uint32_t length; // bytes; 0 once merged into its left neighbour
};

// Byte length of the UTF-8 character whose lead byte is `c`, from the lead
// byte alone: continuation and ASCII bytes count 1, 110xxxxx 2, 1110xxxx 3,
// 1111xxxx 4 (the reference groups bytes the same way, without validating).
inline size_t utf8_len_from_lead(unsigned char c) {
    static constexpr unsigned char lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[c >> 4];
}

// Escaped bytes after which the SentencePiece encoder cuts a long run of
// text at the next place no merge can cross (tokenizer_encode.cpp): 64 KiB.
// Tests set it to 1 to cut at every such place (the ids must not change).
inline std::atomic<size_t> spm_part_bytes{size_t(64) << 10};

// Most bytes merge_pairs takes in one text (its symbols hold 32-bit offsets
// and indices).
inline constexpr size_t k_max_merge_text_bytes = size_t(std::numeric_limits<int32_t>::max());

// Merges the symbols of `text` (one per character) by `priority(left,
// right)`: a std::optional<K> for an ordered arithmetic K (float, int32_t),
// lower first, nullopt for a pair that does not merge. Returns the symbols;
// the merged ones are chained by `next` from index 0 (none when the text is
// empty). Candidate pairs sit in a binary heap; entries made stale by an
// earlier merge are recognised by their recorded byte length and skipped.
// Throws tessera::error for a text longer than k_max_merge_text_bytes.
template <class Priority> std::vector<merge_symbol> merge_pairs(std::string_view text, Priority && priority) {
    using key_type = typename std::invoke_result_t<Priority &, std::string_view, std::string_view>::value_type;
    static_assert(std::is_arithmetic_v<key_type>);
    if (text.size() > k_max_merge_text_bytes) {
        throw error(fmt::format("tokenizer: a run of {} bytes of text to merge is longer than the {} one run may have",
                                text.size(), k_max_merge_text_bytes));
    }
    size_t n_chars = 0;
    for (size_t off = 0; off < text.size(); ++n_chars) {
        off += utf8_len_from_lead(static_cast<unsigned char>(text[off]));
    }
    std::vector<merge_symbol> symbols;
    symbols.reserve(n_chars);
    for (size_t off = 0; off < text.size();) {
        const size_t len = std::min(utf8_len_from_lead(static_cast<unsigned char>(text[off])), text.size() - off);
        const auto index = static_cast<int32_t>(symbols.size());
        symbols.push_back({index - 1, index + 1, static_cast<uint32_t>(off), static_cast<uint32_t>(len)});
        off += len;
    }
    if (symbols.empty()) {
        return symbols;
    }
    symbols.back().next = -1;

    // The right symbol of a queued pair is left's `next`: `next` changes only
    // when left absorbs its neighbour, which changes left's length too.
    struct pair {
        key_type key;
        int32_t left;
        uint32_t length; // byte length of left + right when queued
    };
    // Heap order (std::push_heap keeps the "largest" on top): lowest key
    // first, then the leftmost pair.
    const auto later = [](const pair & a, const pair & b) { return a.key > b.key || (a.key == b.key && a.left > b.left); };
    std::vector<pair> heap;
    const auto make_pair = [&](int32_t left, int32_t right) -> std::optional<pair> {
        if (left < 0 || right < 0) {
            return std::nullopt;
        }
        const merge_symbol & l = symbols[static_cast<size_t>(left)];
        const merge_symbol & r = symbols[static_cast<size_t>(right)];
        if (const std::optional<key_type> key =
                priority(text.substr(l.offset, l.length), text.substr(r.offset, r.length))) {
            return pair{*key, left, l.length + r.length};
        }
        return std::nullopt;
    };
    // At most one first pair a symbol; reserved so the heap does not grow by
    // doubling in the common case.
    heap.reserve(symbols.size());
    for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) {
        if (const std::optional<pair> p = make_pair(i - 1, i)) {
            heap.push_back(*p);
        }
    }
    std::make_heap(heap.begin(), heap.end(), later);
    const auto try_add = [&](int32_t left, int32_t right) {
        if (const std::optional<pair> p = make_pair(left, right)) {
            heap.push_back(*p);
            std::push_heap(heap.begin(), heap.end(), later);
        }
    };
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), later);
        const pair top = heap.back();
        heap.pop_back();
        merge_symbol & left = symbols[static_cast<size_t>(top.left)];
        if (left.length == 0 || left.next < 0) {
            continue; // stale: left was merged away (or has no right neighbour any more)
        }
        const int32_t right_index = left.next;
        merge_symbol & right = symbols[static_cast<size_t>(right_index)];
        // Stale: one side grew since this pair was queued.
        if (left.length + right.length != top.length) {
            continue;
        }
        left.length += right.length;
        right.length = 0;
        left.next = right.next;
        if (right.next >= 0) {
            symbols[static_cast<size_t>(right.next)].prev = top.left;
        }
        try_add(left.prev, top.left);
        try_add(top.left, left.next);
    }
    return symbols;
}

} // namespace tessera::llm

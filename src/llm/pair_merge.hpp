// pair_merge.hpp — the merge loop both tokenizers share (internal to the llm
// layer): a text split into one symbol per UTF-8 character, then the
// adjacent pair with the best priority merged until no pair merges.
// SentencePiece BPE ranks a pair by the score of the piece it makes (Kudo &
// Richardson 2018; sentencepiece bpe_model.cc), byte-level BPE by the rank of
// the merge rule (Sennrich et al. 2016); both take the leftmost pair on a tie.
#pragma once

#include <algorithm>
#include <optional>
#include <queue>
#include <string_view>
#include <vector>

namespace tessera::llm {

struct merge_symbol {
    int prev;
    int next;      // -1 at the end
    size_t offset; // into the text
    size_t length; // bytes; 0 once merged into its left neighbour
};

// Byte length of the UTF-8 character whose lead byte is `c`, from the lead
// byte alone: continuation and ASCII bytes count 1, 110xxxxx 2, 1110xxxx 3,
// 1111xxxx 4 (the reference groups bytes the same way, without validating).
inline size_t utf8_len_from_lead(unsigned char c) {
    static constexpr unsigned char lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[c >> 4];
}

// Merges the symbols of `text` (one per character) by `priority(left,
// right)`: a std::optional<double>, lower first, nullopt for a pair that does
// not merge. Returns the symbols; the merged ones are chained by `next` from
// index 0 (none when the text is empty). Candidate pairs sit in a heap;
// entries made stale by an earlier merge are recognised by their recorded
// byte length and skipped.
template <class Priority> std::vector<merge_symbol> merge_pairs(std::string_view text, Priority && priority) {
    std::vector<merge_symbol> symbols;
    symbols.reserve(text.size());
    for (size_t off = 0; off < text.size();) {
        const size_t len = std::min(utf8_len_from_lead(static_cast<unsigned char>(text[off])), text.size() - off);
        const int index = static_cast<int>(symbols.size());
        symbols.push_back({index - 1, index + 1, off, len});
        off += len;
    }
    if (symbols.empty()) {
        return symbols;
    }
    symbols.back().next = -1;

    struct pair {
        double key;
        int left;
        int right;
        size_t length; // byte length of left + right when queued
    };
    // Min-heap order: lowest key first, then the leftmost pair.
    const auto later = [](const pair & a, const pair & b) { return a.key > b.key || (a.key == b.key && a.left > b.left); };
    std::priority_queue<pair, std::vector<pair>, decltype(later)> queue(later);
    const auto try_add = [&](int left, int right) {
        if (left < 0 || right < 0) {
            return;
        }
        const merge_symbol & l = symbols[static_cast<size_t>(left)];
        const merge_symbol & r = symbols[static_cast<size_t>(right)];
        if (const std::optional<double> key = priority(text.substr(l.offset, l.length), text.substr(r.offset, r.length))) {
            queue.push({*key, left, right, l.length + r.length});
        }
    };
    for (int i = 1; i < static_cast<int>(symbols.size()); ++i) {
        try_add(i - 1, i);
    }
    while (!queue.empty()) {
        const pair top = queue.top();
        queue.pop();
        merge_symbol & left = symbols[static_cast<size_t>(top.left)];
        merge_symbol & right = symbols[static_cast<size_t>(top.right)];
        // Stale: one side was merged away or grew since this pair was queued.
        if (left.length == 0 || right.length == 0 || left.length + right.length != top.length) {
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

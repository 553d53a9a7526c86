// tokenizer_bpe.cpp — byte-level BPE encoding (tokenizer.hpp describes the
// algorithm): pre-tokenize, map bytes to characters, merge by rank.
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "byte_level.hpp"
#include "pair_merge.hpp"
#include "pretokenizer.hpp"
#include "tessera/llm/tokenizer.hpp"
#include "unicode_text.hpp"

namespace tessera::llm {

namespace byte_level {

namespace {

// bytes_to_unicode (GPT-2 encoder.py): bytes '!'..'~', 0xA1..0xAC and
// 0xAE..0xFF are their own code point; the remaining 68 bytes, in increasing
// order, get U+0100, U+0101, ...
struct tables {
    std::array<std::string, 256> text;
    std::array<int16_t, 0x144> byte_of; // code point -> byte, -1 for none
    tables() {
        byte_of.fill(-1);
        uint32_t next = 0x100;
        for (uint32_t b = 0; b < 256; ++b) {
            const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
            const uint32_t cp = printable ? b : next++;
            unicode::append_utf8(cp, text[b]);
            byte_of[cp] = static_cast<int16_t>(b);
        }
    }
};

const tables & get() {
    static const tables t;
    return t;
}

} // namespace

const std::string & char_of(uint8_t b) { return get().text[b]; }

void decode(std::string_view text, std::string & out) {
    const tables & t = get();
    for (size_t i = 0; i < text.size();) {
        const unicode::decoded d = unicode::next_code_point(text, i);
        if (d.valid && d.cp < t.byte_of.size() && t.byte_of[d.cp] >= 0) {
            out += static_cast<char>(t.byte_of[d.cp]);
        } else {
            out.append(text.substr(i, d.length)); // not in the map, or an invalid byte: as it is
        }
        i += d.length;
    }
}

} // namespace byte_level

namespace {

std::string merge_key(std::string_view left, std::string_view right) {
    std::string key(4 + left.size() + right.size(), '\0');
    const auto n = static_cast<uint32_t>(left.size());
    std::memcpy(key.data(), &n, 4);
    std::memcpy(key.data() + 4, left.data(), left.size());
    std::memcpy(key.data() + 4 + left.size(), right.data(), right.size());
    return key;
}

} // namespace

void tokenizer::index_merges(const std::vector<std::string> & merges) {
    merge_rank_.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
        const std::string & m = merges[i];
        const size_t space = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
        if (space == std::string::npos) {
            continue; // no pair: can never match (the reference keeps it as an empty pair)
        }
        merge_rank_.emplace(merge_key(std::string_view(m).substr(0, space), std::string_view(m).substr(space + 1)),
                            static_cast<int32_t>(i));
    }
}

int32_t tokenizer::merge_rank(std::string_view left, std::string_view right) const {
    const auto it = merge_rank_.find(merge_key(left, right));
    return it == merge_rank_.end() ? -1 : it->second;
}

void tokenizer::encode_bpe(std::string_view text, std::vector<token_id> & out) const {
    std::string word;
    for (const std::string & raw : pre_tokenize(pre_, text)) {
        word.clear();
        for (const char c : raw) {
            word += byte_level::char_of(static_cast<uint8_t>(c));
        }
        if (takes_whole_words(pre_)) {
            // Llama 3's and Tekken's tokenizers take a word that is a token as it is.
            if (const token_id id = find_piece(word); id >= 0) {
                out.push_back(id);
                continue;
            }
        }
        const std::string_view w = word;
        const std::vector<merge_symbol> symbols =
            merge_pairs(w, [&](std::string_view left, std::string_view right) -> std::optional<int32_t> {
                const int32_t rank = merge_rank(left, right);
                if (rank < 0) return std::nullopt;
                return rank;
            });
        if (symbols.empty()) {
            continue;
        }

        for (int32_t i = 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) {
            const merge_symbol & sym = symbols[static_cast<size_t>(i)];
            const std::string_view piece = w.substr(sym.offset, sym.length);
            if (const token_id id = find_piece(piece); id >= 0) {
                out.push_back(id);
                continue;
            }
            // Not a token: the tokens of its single bytes, where they exist
            // (as the reference does; a vocabulary built by BPE training has
            // all of them).
            for (const char c : piece) {
                if (const token_id id = find_piece(std::string_view(&c, 1)); id >= 0) {
                    out.push_back(id);
                }
            }
        }
    }
}

} // namespace tessera::llm

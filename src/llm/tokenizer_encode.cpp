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
//    A long run is escaped and merged in parts of about spm_part_bytes, cut
//    between two characters that are adjacent in no mergeable piece: no
//    symbol can ever span such a cut, and merges on either side never change
//    the pairs on the other, so each part merges exactly as it would inside
//    the whole run (the same merges, in the same relative order). Memory then
//    stays bounded by the part, not the text (the whole run took about 42
//    bytes a byte of text).
// 4. Symbols that are not pieces become byte-fallback tokens, one per byte.
//
// Byte-level BPE (tokenizer_bpe.cpp) takes a long text in parts of about
// bpe_part_bytes, each going through step 1 and the pre-tokenizer on its own,
// cut only where every pre-tokenizer certainly ends a word (word_cut_at,
// pretokenizer.hpp) and no special token's text touches the bytes that
// place is read from: a special token cannot span the cut, the text runs on
// either side split into the same words as the whole run, and BPE merges
// never cross a word. So the ids are the same, and memory stays bounded by
// the part (the whole text as code points and words took about 16 bytes a
// byte of text).
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "pair_merge.hpp"
#include "pretokenizer.hpp"
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


// A character's bytes (1 to 4) packed into 32 bits, the first byte lowest.
uint32_t pack_char(std::string_view ch) {
    uint32_t packed = 0;
    for (size_t i = 0; i < ch.size(); ++i) {
        packed |= uint32_t(static_cast<unsigned char>(ch[i])) << (8 * i);
    }
    return packed;
}

// A pair of adjacent characters as spm_joins_ holds it.
uint64_t pack_pair(uint32_t left, uint32_t right) { return (uint64_t(right) << 32) | left; }

// The characters of a text run as the SPM merge sees it: an optional
// leading U+2581, then the run's bytes with every ' ' as U+2581, grouped
// into characters by their lead byte (utf8_len_from_lead, as merge_pairs
// groups them), produced one at a time so a long run is never escaped whole.
class escaped_chars {
public:
    escaped_chars(std::string_view raw, bool space_prefix) : raw_(raw) {
        if (space_prefix) {
            n_pending_ = 3;
        }
    }

    // Appends the next character's bytes to `out` and returns true with
    // `packed` set (pack_char); false at the end of the run.
    bool next(std::string & out, uint32_t & packed) {
        const int lead = next_byte();
        if (lead < 0) {
            return false;
        }
        const size_t len = utf8_len_from_lead(static_cast<unsigned char>(lead));
        out += static_cast<char>(lead);
        packed = uint32_t(lead);
        for (size_t i = 1; i < len; ++i) {
            const int b = next_byte();
            if (b < 0) {
                break; // a character cut short by the end of the run, as merge_pairs takes it
            }
            out += static_cast<char>(b);
            packed |= uint32_t(b) << (8 * i);
        }
        return true;
    }

private:
    int next_byte() {
        if (i_pending_ < n_pending_) {
            return static_cast<unsigned char>(k_space_symbol[i_pending_++]);
        }
        if (pos_ == raw_.size()) {
            return -1;
        }
        const char c = raw_[pos_++];
        if (c == ' ') {
            i_pending_ = 1;
            n_pending_ = 3;
            return static_cast<unsigned char>(k_space_symbol[0]);
        }
        return static_cast<unsigned char>(c);
    }

    std::string_view raw_;
    size_t pos_ = 0;
    size_t i_pending_ = 0; // the next byte of U+2581 to give, while below n_pending_
    size_t n_pending_ = 0;
};

} // namespace

void tokenizer::index_spm_joins() {
    spm_joins_.clear();
    for (size_t i = 0; i < tokens_.size(); ++i) {
        if (types_[i] != token_type::normal && types_[i] != token_type::user_defined) {
            continue;
        }
        const std::string_view piece = tokens_[i];
        uint32_t prev = 0;
        for (size_t off = 0; off < piece.size();) {
            const size_t len = std::min(utf8_len_from_lead(static_cast<unsigned char>(piece[off])), piece.size() - off);
            const uint32_t c = pack_char(piece.substr(off, len));
            if (off > 0) {
                spm_joins_.push_back(pack_pair(prev, c));
            }
            prev = c;
            off += len;
        }
    }
    std::sort(spm_joins_.begin(), spm_joins_.end());
    spm_joins_.erase(std::unique(spm_joins_.begin(), spm_joins_.end()), spm_joins_.end());
    spm_joins_.shrink_to_fit();
}

bool tokenizer::spm_joins(uint64_t pair) const { return std::binary_search(spm_joins_.begin(), spm_joins_.end(), pair); }

void tokenizer::encode_spm(std::string_view text, bool space_prefix, std::vector<token_id> & out) const {
    escaped_chars chars(text, space_prefix);
    std::string part;
    const size_t part_bytes = spm_part_bytes.load(std::memory_order_relaxed);
    part.reserve(std::min(text.size() + 3, part_bytes + 8));
    uint32_t prev = 0;
    uint32_t c = 0;
    for (size_t before = part.size(); chars.next(part, c); before = part.size()) {
        // `part` ends with character c now; cut in front of it when the
        // part is long enough and no merge can join prev and c.
        if (before >= part_bytes && !spm_joins(pack_pair(prev, c))) {
            encode_spm_run(std::string_view(part).substr(0, before), out);
            part.erase(0, before);
        }
        prev = c;
    }
    encode_spm_run(part, out);
}

void tokenizer::encode_spm_run(std::string_view text, std::vector<token_id> & out) const {
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
        merge_pairs(text, [&](std::string_view left, std::string_view right) -> std::optional<float> {
            const token_id id = mergeable(std::string_view(left.data(), left.size() + right.size()));
            if (id < 0) return std::nullopt;
            return -scores_[id];
        });
    if (symbols.empty()) {
        return;
    }

    for (int32_t i = 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) {
        const std::string_view piece = text.substr(symbols[static_cast<size_t>(i)].offset, symbols[static_cast<size_t>(i)].length);
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

bool tokenizer::special_text_near(std::string_view text, size_t lo, size_t hi, bool parse_special) const {
    for (const token_id special : special_by_length_) {
        const token_type type = types_[special];
        if (!parse_special && (type == token_type::control || type == token_type::unknown)) {
            continue;
        }
        const std::string & needle = tokens_[special];
        // Every occurrence overlapping [lo, hi) lies inside [a, b), and every
        // one inside [a, b) overlaps it.
        const size_t a = lo >= needle.size() - 1 ? lo - (needle.size() - 1) : 0;
        const size_t b = std::min(text.size(), hi + needle.size() - 1);
        if (a < b && text.substr(a, b - a).find(needle) != std::string_view::npos) {
            return true;
        }
    }
    return false;
}

void tokenizer::encode_part(std::string_view text, bool parse_special, std::vector<token_id> & out) const {
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
    bool after_special = true; // the start of the input counts as "after a special token"
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
        encode_spm(text.substr(f.offset, f.length), add_space_prefix_ && after_special, out);
        after_special = false;
    }
}

std::vector<token_id> tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
    std::vector<token_id> out;
    const size_t part_bytes = bpe_part_bytes.load(std::memory_order_relaxed);
    out.reserve((kind_ == vocab_kind::bpe ? std::min(text.size(), part_bytes) : text.size()) / 3 + 4);
    if (add_special && add_bos_ && bos_id_ >= 0) {
        out.push_back(bos_id_);
    }
    if (kind_ == vocab_kind::bpe) {
        // Parts of at least bpe_part_bytes, each cut at the first certain word
        // boundary after that with no special-token text around it (see the
        // top of this file); the rest of the text is taken as a text of its
        // own, so the next cut is looked for in it.
        const size_t total = text.size();
        while (!text.empty()) {
            size_t cut = word_cut_at(text, part_bytes);
            while (cut < text.size() &&
                   special_text_near(text, cut >= k_word_cut_before ? cut - k_word_cut_before : 0,
                                     std::min(text.size(), cut + k_word_cut_after), parse_special)) {
                cut = word_cut_at(text, cut + 1);
            }
            // The ids are now most of the memory. Where the next part may not
            // fit (it gives about one id a byte at most), room is made for it
            // and for the ids the rest of the text will likely give, at the
            // rate of ids a byte so far plus 1/16 (none before the first part
            // is done), rather than by doubling: doubling can leave up to half
            // the room unused and, while copying, holds the old ids beside
            // twice as many. At least a quarter more each time, so that a
            // text whose rate keeps rising is still copied O(log n) times.
            if (out.capacity() - out.size() < cut) {
                const size_t done = total - text.size();
                const double per_byte = done > 0 ? double(out.size()) / double(done) : 0.0;
                const size_t likely =
                    out.size() + cut + size_t(per_byte * (1.0 + 1.0 / 16) * double(text.size() - cut));
                out.reserve(std::max(likely, out.capacity() + out.capacity() / 4));
            }
            encode_part(text.substr(0, cut), parse_special, out);
            text.remove_prefix(cut);
        }
    } else {
        encode_part(text, parse_special, out);
    }
    if (add_special && add_eos_ && eos_id_ >= 0) {
        out.push_back(eos_id_);
    }
    return out;
}

} // namespace tessera::llm

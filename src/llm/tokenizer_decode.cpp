// tokenizer_decode.cpp — token ids -> text: per-token pieces, whole-sequence
// detokenizing and the streaming decoder that releases whole UTF-8 characters.
#include <string>

#include "byte_level.hpp"
#include "pretokenizer.hpp"
#include "tessera/core/error.hpp"
#include "tessera/llm/tokenizer.hpp"

namespace tessera::llm {

namespace {

constexpr std::string_view k_space_symbol = "\xE2\x96\x81"; // U+2581

// Appends `piece` to `out`, first dropping up to `lstrip` leading spaces.
void append_stripped(std::string_view piece, int lstrip, std::string & out) {
    while (lstrip > 0 && !piece.empty() && piece.front() == ' ') {
        piece.remove_prefix(1);
        --lstrip;
    }
    out += piece;
}

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// The reference's clean-up of byte-level BPE text (after Hugging Face's
// clean_up_tokenization), three passes, each over the previous one's output:
// 1. a space before '?', '!', '.' or ',' goes;
// 2. the spaces around a lone apostrophe (" ' ") go;
// 3. a space before the contractions 's, 'm, 're and 've goes (not before
//    't, 'd or 'll).
std::string clean_spaces(const std::string & text) {
    std::string a;
    a.reserve(text.size());
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (i > 0 && text[i - 1] == ' ' && (c == '?' || c == '!' || c == '.' || c == ',')) a.pop_back();
        a += c;
    }
    std::string b;
    b.reserve(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
        const char c = a[i];
        b += c;
        if (c == '\'' && i > 0 && i + 1 < a.size() && a[i - 1] == ' ' && a[i + 1] == ' ') {
            b.erase(b.size() - 2, 1); // the space before
            ++i;                      // the space after
        }
    }
    std::string out;
    out.reserve(b.size());
    for (size_t i = 0; i < b.size(); ++i) {
        const char c = b[i];
        if (i > 0 && b[i - 1] == ' ' && c == '\'' && i + 1 < b.size()) {
            const char c1 = b[i + 1];
            const char c2 = i + 2 < b.size() ? b[i + 2] : '\0';
            if (c1 == 's' || c1 == 'm' || (c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e')) out.pop_back();
        }
        out += c;
    }
    return out;
}

} // namespace

void tokenizer::append_piece(token_id id, bool render_special, int lstrip, std::string & out) const {
    check_id(id);
    const std::string & text = tokens_[id];
    switch (types_[id]) {
    case token_type::normal: {
        if (kind_ == vocab_kind::bpe) {
            std::string piece;
            byte_level::decode(text, piece);
            append_stripped(piece, lstrip, out);
            break;
        }
        std::string piece;
        piece.reserve(text.size());
        for (size_t i = 0; i < text.size();) {
            if (text.compare(i, k_space_symbol.size(), k_space_symbol) == 0) {
                piece += ' ';
                i += k_space_symbol.size();
            } else {
                piece += text[i++];
            }
        }
        append_stripped(piece, lstrip, out);
        break;
    }
    case token_type::byte: {
        if (kind_ == vocab_kind::bpe) {
            break; // the reference renders byte tokens of a BPE vocabulary as nothing
        }
        const char byte = static_cast<char>(byte_value_[id]);
        append_stripped(std::string_view(&byte, 1), lstrip, out);
        break;
    }
    case token_type::user_defined:
        append_stripped(text, lstrip, out);
        break;
    case token_type::control:
    case token_type::unknown:
        if (render_special) {
            append_stripped(text, lstrip, out);
        }
        break;
    case token_type::unused:
        break;
    }
}

std::string tokenizer::token_to_piece(token_id id, bool render_special) const {
    std::string out;
    append_piece(id, render_special, 0, out);
    return out;
}

std::string tokenizer::detokenize(std::span<const token_id> ids, bool remove_special, bool render_special) const {
    for (const token_id id : ids) {
        check_id(id);
    }
    // The space encode added in front belongs to the first token; a leading
    // BOS (kept or removed) means the text after it keeps its space.
    bool remove_space = add_space_prefix_;
    if (!ids.empty() && bos_id_ >= 0 && ids.front() == bos_id_ && add_bos_) {
        remove_space = false;
        if (remove_special) {
            ids = ids.subspan(1);
        }
    }
    if (remove_special && add_eos_ && eos_id_ >= 0 && !ids.empty() && ids.back() == eos_id_) {
        ids = ids.first(ids.size() - 1);
    }
    std::string out;
    for (const token_id id : ids) {
        append_piece(id, render_special, remove_space ? 1 : 0, out);
        remove_space = false;
    }
    if (kind_ == vocab_kind::bpe && cleans_spaces(pre_)) {
        return clean_spaces(out);
    }
    return out;
}

size_t utf8_complete_prefix(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        const auto c = static_cast<unsigned char>(s[i]);
        size_t need;
        if (c < 0x80) {
            need = 1;
        } else if (c >= 0xC2 && c <= 0xDF) {
            need = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 4;
        } else {
            ++i; // stray continuation byte or a byte that never starts a character
            continue;
        }
        size_t have = 1;
        while (have < need && i + have < s.size() && is_continuation(static_cast<unsigned char>(s[i + have]))) {
            ++have;
        }
        if (have == need) {
            i += need;
        } else if (i + have == s.size()) {
            return i; // truncated: may still complete with later bytes
        } else {
            ++i; // broken by a non-continuation byte: the lead byte stands alone
        }
    }
    return i;
}

std::string stream_decoder::push(token_id id) {
    held_ += tok_->token_to_piece(id, render_special_); // throws before any state change
    const size_t n = utf8_complete_prefix(held_);
    std::string ready = held_.substr(0, n);
    held_.erase(0, n);
    return ready;
}

std::string stream_decoder::finish() {
    std::string rest;
    rest.swap(held_);
    return rest;
}

} // namespace tessera::llm

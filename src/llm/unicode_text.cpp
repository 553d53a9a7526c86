// unicode_text.cpp — UTF-8 decoding and character classes (ICU's uchar.h).
#include "unicode_text.hpp"

#include <unicode/uchar.h>

namespace tessera::llm::unicode {

decoded next_code_point(std::string_view text, size_t i) {
    const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
    const uint8_t c = byte(i);
    size_t n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
        n = 1, cp = c;
    } else if ((c & 0xE0) == 0xC0) {
        n = 2, cp = c & 0x1Fu;
    } else if ((c & 0xF0) == 0xE0) {
        n = 3, cp = c & 0x0Fu;
    } else if ((c & 0xF8) == 0xF0) {
        n = 4, cp = c & 0x07u;
    }
    bool whole = n > 0;
    for (size_t k = 1; whole && k < n; ++k) {
        whole = i + k < text.size() && (byte(i + k) & 0xC0) == 0x80;
        if (whole) {
            cp = (cp << 6) | (byte(i + k) & 0x3Fu);
        }
    }
    if (!whole || cp > 0x10FFFF) {
        return {k_replacement, 1, false};
    }
    return {cp, n, true};
}

std::vector<uint32_t> decode_utf8(std::string_view text) {
    std::vector<uint32_t> out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
        const decoded d = next_code_point(text, i);
        out.push_back(d.cp);
        i += d.length;
    }
    return out;
}

void append_utf8(uint32_t cp, std::string & out) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

namespace {

uint32_t category_mask(uint32_t cp) { return U_MASK(u_charType(static_cast<UChar32>(cp))); }

} // namespace

bool is_letter(uint32_t cp) { return (category_mask(cp) & U_GC_L_MASK) != 0; }

bool is_number(uint32_t cp) { return (category_mask(cp) & U_GC_N_MASK) != 0; }

bool is_punctuation(uint32_t cp) { return (category_mask(cp) & U_GC_P_MASK) != 0; }

bool is_whitespace(uint32_t cp) { return u_isUWhiteSpace(static_cast<UChar32>(cp)) != 0; }

} // namespace tessera::llm::unicode

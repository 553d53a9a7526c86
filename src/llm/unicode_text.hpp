// unicode_text.hpp — code points and the character classes the byte-level
// BPE pre-tokenizers split on (internal to the llm layer).
//
// Classes are Unicode general categories and the White_Space property, as
// ICU reports them (Debian 12: ICU 72, Unicode 15.0): letter = L*, number =
// N*, punctuation = P*, whitespace = White_Space.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::llm::unicode {

constexpr uint32_t k_replacement = 0xFFFD;

// UTF-8 bytes -> code points, grouping bytes as the reference implementation
// does: a lead byte 0xxxxxxx, 110xxxxx, 1110xxxx or 11110xxx followed by the
// right number of 10xxxxxx bytes is one code point (overlong forms and
// surrogates are not rejected); anything else (a stray continuation byte, a
// truncated sequence, a lead byte 0xF8..0xFF) becomes one U+FFFD per byte
// consumed. Sequences decoding above U+10FFFF (lead bytes 0xF5..0xF7) become
// U+FFFD too (the reference aborts on them).
std::vector<uint32_t> decode_utf8(std::string_view text);

// One step of decode_utf8: the code point starting at byte i (< text.size()),
// its length in bytes, and whether the bytes were a whole sequence (false:
// cp is U+FFFD standing for the one byte at i).
struct decoded {
    uint32_t cp;
    size_t length;
    bool valid;
};
decoded next_code_point(std::string_view text, size_t i);

// Appends the UTF-8 encoding of `cp` (at most U+10FFFF, not checked further).
void append_utf8(uint32_t cp, std::string & out);

bool is_letter(uint32_t cp);      // general category L
bool is_number(uint32_t cp);      // general category N
bool is_punctuation(uint32_t cp); // general category P
bool is_whitespace(uint32_t cp);  // White_Space property

} // namespace tessera::llm::unicode

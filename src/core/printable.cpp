// core/printable.cpp — see tessera/core/printable.hpp.
#include "tessera/core/printable.hpp"

#include <algorithm>

#include <fmt/core.h>

namespace tessera {

std::string printable(std::string_view s, size_t max) {
    std::string out;
    size_t n = 0;
    for (unsigned char c : s) {
        if (n++ == max) {
            out += "...";
            break;
        }
        if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
            out += static_cast<char>(c);
        } else {
            out += fmt::format("\\x{:02x}", c);
        }
    }
    return out;
}

namespace {

// Length of the well-formed UTF-8 sequence (2 to 4 bytes) at s[i], or 0.
size_t utf8_len(std::string_view s, size_t i) {
    const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
    const unsigned char c = b(i);
    size_t n = 0;
    unsigned char lo = 0x80, hi = 0xbf; // bounds of the second byte
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        if (c == 0xe0) lo = 0xa0;
        if (c == 0xed) hi = 0x9f; // no surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        if (c == 0xf0) lo = 0x90;
        if (c == 0xf4) hi = 0x8f;
    } else {
        return 0;
    }
    if (i + n > s.size() || b(i + 1) < lo || b(i + 1) > hi) return 0;
    for (size_t k = 2; k < n; ++k) {
        if (b(i + k) < 0x80 || b(i + k) > 0xbf) return 0;
    }
    if (c == 0xc2 && b(i + 1) <= 0x9f) return 0; // C1 control
    return n;
}

// s with whole UTF-8 characters (utf8_len) and the ASCII bytes `plain`
// accepts as they are, any other byte as \xNN; "..." in place of what
// follows the first `max` bytes.
template <class Plain>
std::string escape_bytes(std::string_view s, size_t max, Plain plain) {
    std::string out;
    out.reserve(std::min(s.size(), max));
    for (size_t i = 0; i < s.size();) {
        if (i >= max) {
            out += "...";
            break;
        }
        const unsigned char c = static_cast<unsigned char>(s[i]);
        if (c < 0x80 && plain(c)) {
            out += static_cast<char>(c);
            ++i;
        } else if (const size_t n = c >= 0x80 ? utf8_len(s, i) : 0; n > 0 && i + n <= max) {
            out.append(s.substr(i, n));
            i += n;
        } else {
            out += fmt::format("\\x{:02x}", c);
            ++i;
        }
    }
    return out;
}

} // namespace

std::string printable_utf8(std::string_view s, size_t max) {
    return escape_bytes(s, max, [](unsigned char c) { return c >= 0x20 && c < 0x7f && c != '\'' && c != '\\'; });
}

std::string printable_lines(std::string_view s) {
    return escape_bytes(s, std::string_view::npos, [](unsigned char c) { return (c >= 0x20 && c < 0x7f) || c == '\n'; });
}

} // namespace tessera

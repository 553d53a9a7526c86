// backend/names.hpp — ASCII case-insensitive name matching. Internal.
#pragma once

#include <string>
#include <string_view>

namespace tessera::detail {

inline char ascii_lower(char c) { return (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c; }

inline bool iequals(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
        if (ascii_lower(a[i]) != ascii_lower(b[i])) return false;
    }
    return true;
}

inline bool istarts_with(std::string_view s, std::string_view prefix) {
    return s.size() >= prefix.size() && iequals(s.substr(0, prefix.size()), prefix);
}

inline std::string to_lower(std::string_view s) {
    std::string out(s);
    for (char & c : out) c = ascii_lower(c);
    return out;
}

// 1..64 of [A-Za-z0-9_], and '-' as well when `dash`.
inline bool valid_name_chars(std::string_view s, bool dash) {
    if (s.empty() || s.size() > 64) return false;
    for (char c : s) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                        (c >= '0' && c <= '9') || c == '_' || (dash && c == '-');
        if (!ok) return false;
    }
    return true;
}

// A backend family name usable in a file name: 1..64 of [A-Za-z0-9_].
inline bool valid_family_name(std::string_view s) { return valid_name_chars(s, false); }

// A backend (reg) name: 1..64 of [A-Za-z0-9_-]. A family loaded from a
// libtessera-<family>[-<variant>].so file must moreover be named <family>,
// which valid_family_name restricts further (no '-').
inline bool valid_backend_name(std::string_view s) { return valid_name_chars(s, true); }

// A device name: 1..64 printable ASCII characters other than space, quote
// and backslash (e.g. "CPU", "CUDA0", "RPC[host:50052]"). It is printed,
// matched against --device and quoted in messages as it is.
inline bool valid_device_name(std::string_view s) {
    if (s.empty() || s.size() > 64) return false;
    for (char c : s) {
        if (c <= ' ' || c >= 0x7f || c == '\'' || c == '"' || c == '\\') return false;
    }
    return true;
}

} // namespace tessera::detail

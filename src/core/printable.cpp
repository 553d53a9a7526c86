// core/printable.cpp — see tessera/core/printable.hpp.
#include "tessera/core/printable.hpp"

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

} // namespace tessera

// tessera/core/printable.hpp — untrusted bytes (a file's keys, names and
// strings; a plugin's names) rendered safely for an error message.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tessera {

// `s` with control bytes, non-ASCII bytes, quote and backslash as \xNN and
// at most `max` bytes kept (then "..."), so a hostile string can neither
// garble a message nor drive a terminal.
std::string printable(std::string_view s, size_t max = 96);

} // namespace tessera

// Rendering untrusted bytes (keys, tensor names from a file) for messages.
#pragma once

#include <string>
#include <string_view>

namespace tessera::gguf::detail {

// `s` with control and non-ASCII bytes as \xNN and at most `max` bytes kept
// (then "..."), so a hostile name cannot garble a message or a terminal.
std::string printable(std::string_view s, size_t max = 96);

} // namespace tessera::gguf::detail

// byte_level.hpp — GPT-2's reversible byte <-> printable character map
// (encoder.py's bytes_to_unicode), internal to the llm layer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tessera::llm::byte_level {

// The UTF-8 text of the character that stands for byte `b`.
const std::string & char_of(uint8_t b);

// Appends the bytes `text`'s characters stand for; a character that stands
// for no byte is appended as its own UTF-8, an invalid byte as is.
void decode(std::string_view text, std::string & out);

} // namespace tessera::llm::byte_level

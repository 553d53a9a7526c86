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

// The same for text that is often legitimately UTF-8 (a file path): well-
// formed UTF-8 sequences are kept (but C1 controls, U+0080..U+009F, are
// escaped); control bytes, bytes of ill-formed UTF-8, quote and backslash
// become \xNN; at most `max` bytes of `s` are shown (then "...").
std::string printable_utf8(std::string_view s, size_t max = 4096);

// A whole message (or a part of one) made safe for a terminal without
// changing its readable text: control bytes other than '\n' (ESC, '\r',
// tab, DEL, ...), C1 controls (U+0080..U+009F) and bytes of ill-formed
// UTF-8 become \xNN; everything else, quote and backslash included, is kept
// as it is, so text printable() or printable_utf8() already escaped comes
// out unchanged and a multi-line message keeps its lines. No length limit.
std::string printable_lines(std::string_view s);

} // namespace tessera

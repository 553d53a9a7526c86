// Rendering untrusted bytes (keys, tensor names from a file) for messages:
// the public gguf::printable, under the name the gguf sources use.
#pragma once

#include "tessera/gguf/printable.hpp"

namespace tessera::gguf::detail {

using gguf::printable;

} // namespace tessera::gguf::detail

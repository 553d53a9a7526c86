// Rendering untrusted bytes (keys, tensor names from a file) for messages:
// tessera::printable (tessera/core/printable.hpp), under the name the gguf
// sources use.
#pragma once

#include "tessera/core/printable.hpp"

namespace tessera::gguf::detail {

using tessera::printable;

} // namespace tessera::gguf::detail

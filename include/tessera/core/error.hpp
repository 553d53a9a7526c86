// tessera/core/error.hpp — the exception type thrown across the C++ layers.
#pragma once

#include <stdexcept>
#include <string>

namespace tessera {

// Every fallible C++ API in tessera throws `tessera::error` with a message
// that names what was wrong and where (file, offset, tensor, key, option).
class error : public std::runtime_error {
public:
    explicit error(const std::string & what) : std::runtime_error(what) {}
};

} // namespace tessera

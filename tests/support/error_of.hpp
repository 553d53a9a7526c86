// tests/support/error_of.hpp — the message of the tessera::error a call
// throws, for tests that check what an error says.
#pragma once

#include <string>

#include "tessera/core/error.hpp"

namespace tessera::test {

// What f() throws as a tessera::error; "(no error)" when it returns (any
// other exception propagates).
template <class F>
std::string error_of(F && f) {
    try {
        f();
    } catch (const tessera::error & e) {
        return e.what();
    }
    return "(no error)";
}

} // namespace tessera::test

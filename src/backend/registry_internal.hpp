// backend/registry_internal.hpp — pieces of the registry shared by
// registry.cpp and loader.cpp. Internal.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/reg_entry.hpp"
#include "tessera/core/error.hpp"

namespace tessera {
class registry;
}

namespace tessera::detail {

// Validates `reg` and collects its usable devices into a new entry. Throws
// tessera::error "<what>: <why>" when the reg itself is unusable (invalid
// tables, no name, a name that is not valid_backend_name (names.hpp), more
// than 4096 devices); each skipped device adds a message to `skipped`.
std::shared_ptr<reg_entry> make_entry(tsr_reg * reg, const std::string & what,
                                      std::vector<std::string> & skipped);

// The message of the exception being handled (call only inside a catch
// block): its what() made printable, or a phrase for one that is not a
// std::exception.
std::string current_exception_text();

// Runs f, a call into a plugin while it is being loaded. backend.h is a C
// ABI: nothing may be thrown across it, but a plugin written in C++ can. Such
// an exception becomes tessera::error "<what>: threw an exception across the
// C ABI (<its message>)", so the library is refused like any broken one.
template <class F>
decltype(auto) plugin_call(const std::string & what, F && f) {
    try {
        return f();
    } catch (...) {
        throw error(what + ": threw an exception across the C ABI (" + current_exception_text() + ")");
    }
}

// Reads device d's name and description into `rec` (one call each). False,
// with `why` ("has no name", "is named '...', which is not a device name
// (...)"), when the name is missing or not valid_device_name; a NULL
// description is stored as "", a long one cut to max_description bytes.
bool read_device_strings(tsr_device * d, const std::string & what, reg_entry::device_rec & rec,
                         std::string & why);

// Registers the backends compiled into this program (static_backends.cpp).
void register_static_backends(registry & r);

} // namespace tessera::detail

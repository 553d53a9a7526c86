// backend/registry_internal.hpp — pieces of the registry shared by
// registry.cpp and loader.cpp. Internal.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backend/plugin_call.hpp"
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

// Reads device d's name and description into `rec` (one call each). False,
// with `why` ("has no name", "is named '...', which is not a device name
// (...)"), when the name is missing or not valid_device_name; a NULL
// description is stored as "", a long one cut to max_description bytes.
bool read_device_strings(tsr_device * d, const std::string & what, reg_entry::device_rec & rec,
                         std::string & why);

// The running program's folder (from /proc/self/exe), or an empty path
// when it cannot be read. (loader.cpp)
std::filesystem::path exe_dir();

// Where the backend plugins and tessera-probe are installed (CMake's
// TESSERA_PLUGIN_INSTALL_DIR): first as found from the running program's
// folder (the same relative path as from the install's bin/ folder, e.g.
// "<exe dir>/../lib/tessera", so a tree installed with another prefix or
// moved still finds its own), then the configured absolute one. Whether
// or not they exist. (loader.cpp)
std::vector<std::filesystem::path> plugin_install_dirs();

// Registers the backends compiled into this program (static_backends.cpp).
void register_static_backends(registry & r);

} // namespace tessera::detail

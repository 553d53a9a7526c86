// tools/devices.hpp — loading the backends and listing devices, shared by
// `tessera devices` and the --list-devices flag of other subcommands
// (implemented in tools/cmd_devices.cpp; available when the program is
// built with the backend layer, i.e. TESSERA_HAVE_CMD_DEVICES).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <vector>

#include "tessera/backend/registry.hpp"

namespace tessera::tools {

// Loads every backend plugin into registry::global() (load_all, default
// search paths) the first time it is called; later calls return the same
// reports. Thread-safe.
const std::vector<load_report> & load_backends();

// Writes the backends (library path, score, the variants considered) and
// every device (name, description, type, memory, capabilities, buffer
// types, features) of registry::global() to `out`, after load_backends().
// Returns the number of devices; with none, also writes an error naming the
// folders searched to stderr.
size_t print_devices(std::FILE * out);

// Adds "--list-devices" to `sub`: when given, the devices are printed to
// stdout and the program exits without running the subcommand: 0, or 1
// when there is no device.
void add_list_devices_flag(CLI::App * sub);

} // namespace tessera::tools

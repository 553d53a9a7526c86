// tools/commands.hpp — each `tessera` subcommand lives in its own file
// (tools/cmd_<name>.cpp) and registers itself on the CLI11 app here.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace tessera::tools {

// A subcommand's registration: adds a CLI11 subcommand to `app` and returns
// the function to run when it was chosen (its return value is the exit code).
using command_fn = std::function<int()>;
struct command {
    CLI::App * sub;
    command_fn run;
};

command register_gguf(CLI::App & app);
command register_devices(CLI::App & app);
command register_run(CLI::App & app);
command register_tokenize(CLI::App & app);

} // namespace tessera::tools

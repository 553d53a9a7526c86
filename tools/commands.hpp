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

// Most threads `run` and `bench` accept (-t): the CPU backend's pool limit.
inline constexpr int k_max_threads = 512;

command register_gguf(CLI::App & app);
command register_devices(CLI::App & app);
command register_run(CLI::App & app);
command register_tokenize(CLI::App & app);
command register_quantize(CLI::App & app);
command register_bench(CLI::App & app);
// `tessera gguf synth`: added to the `gguf` subcommand by register_gguf
// (tools/cmd_synth.cpp, compiled in when TESSERA_HAVE_GGUF_SYNTH).
command add_gguf_synth(CLI::App & gguf_sub);

} // namespace tessera::tools

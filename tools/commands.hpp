// tools/commands.hpp — each `tessera` subcommand lives in its own file
// (tools/cmd_<name>.cpp) and registers itself on the CLI11 app here.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <functional>
#include <thread>

#include <fmt/core.h>

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

// Warns on stderr when -t asks for more threads than the machine runs at
// once: every graph step waits for all of its threads, so the extra ones
// make a run many times slower (measured: 2 cores, -t 3 about 20x, -t 64
// about 300x), not faster.
inline void warn_if_oversubscribed(int n_threads) {
    const unsigned hw = std::thread::hardware_concurrency();
    if (hw > 0 && n_threads > int(hw)) {
        fmt::print(stderr, "warning: -t {} is more than the {} hardware threads of this machine; expect a much slower run\n",
                   n_threads, hw);
    }
}

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

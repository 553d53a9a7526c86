// tools/main.cpp — the `tessera` command line program.
#include <cstdio>
#include <iostream>
#include <exception>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/core.h>

#include "build_info.hpp"
#include "commands.hpp"
#include "tessera/core/error.hpp"
#ifdef TESSERA_HAVE_CMD_DEVICES
#include "devices.hpp"
#endif

namespace {

// The argument where a command that needs a subcommand got something else
// ("tessera nosuch", "tessera gguf bogus", "tessera --bogus"), with the
// command it was given to; empty when there is none (CLI11 reports these
// only as "A subcommand is required", without the argument).
std::pair<std::string, std::string> unknown_subcommand(CLI::App & app, int argc, char ** argv) {
    CLI::App * cur = &app;
    std::string where = "tessera";
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help" || a == "--version") return {};
        CLI::App * next = nullptr;
        for (CLI::App * sub : cur->get_subcommands([](CLI::App *) { return true; })) {
            if (sub->check_name(a)) next = sub;
        }
        if (next == nullptr) return cur->get_require_subcommand_min() > 0 ? std::pair{a, where} : std::pair<std::string, std::string>{};
        cur = next;
        where += " " + a;
    }
    return {};
}

// The exit code `code`, or 1 with a message when what went to stdout could
// not all be written (a full disk, `> /dev/full`): the buffered output is
// flushed here, so a failed write would otherwise go unnoticed.
int finish(int code) {
    std::cout.flush();
    const bool failed = std::fflush(stdout) != 0 || std::ferror(stdout) != 0 || std::cout.fail();
    if (failed && code == 0) {
        fmt::print(stderr, "error: could not write the output to stdout\n");
        return 1;
    }
    return code;
}

} // namespace

int main(int argc, char ** argv) {
    using namespace tessera::tools;
    CLI::App app{"tessera: an on-device tensor runtime for GGUF language models"};
    app.require_subcommand(1);
    // Options a subcommand does not know go up to this app, so `tessera run
    // --version` prints the version as `tessera --version` does (unknown
    // ones are still refused, by name).
    app.fallthrough();
    app.set_version_flag("--version", fmt::format("tessera {} (commit {}, build {})", k_version, k_build_commit, k_build_number),
                         "print the version, the git commit built and the number of commits up to it, then exit");
    std::vector<command> commands;
#ifdef TESSERA_HAVE_CMD_GGUF
    commands.push_back(register_gguf(app));
#endif
#ifdef TESSERA_HAVE_CMD_DEVICES
    commands.push_back(register_devices(app));
#endif
#ifdef TESSERA_HAVE_CMD_RUN
    commands.push_back(register_run(app));
    commands.push_back(register_tokenize(app));
#endif
#ifdef TESSERA_HAVE_CMD_QUANTIZE
    commands.push_back(register_quantize(app));
#endif
#ifdef TESSERA_HAVE_CMD_BENCH
    commands.push_back(register_bench(app));
#endif
#ifdef TESSERA_HAVE_CMD_DEVICES
    // Every other subcommand accepts --list-devices (tools/devices.hpp).
    for (auto & c : commands) {
        if (c.sub->get_name() != "devices") add_list_devices_flag(c.sub);
    }
#endif
    // `bench -fa 0,1` (llama-bench's spelling): CLI11 has no one-dash
    // multi-letter names, so the token is read as --flash-attn.
    std::vector<char *> args(argv, argv + argc);
    static char flash_attn_long[] = "--flash-attn";
    static char repack_long[] = "--repack";
    static char prompt_gen_long[] = "--pg";
    for (int i = 2; i < argc && std::string_view(argv[1]) == "bench"; ++i) {
        if (std::string_view(argv[i]) == "-fa") args[size_t(i)] = flash_attn_long;
        if (std::string_view(argv[i]) == "-rp") args[size_t(i)] = repack_long; // the same for -rp (repack)
        if (std::string_view(argv[i]) == "-pg") args[size_t(i)] = prompt_gen_long; // and -pg (prompt then generation)
    }
    try {
        app.parse(argc, args.data());
    } catch (const CLI::ParseError & e) {
        // A flag that finishes the command (--help, --list-devices) is a
        // success even where a subcommand would otherwise be required.
        if (e.get_exit_code() == 0) return finish(app.exit(e) == 0 ? 0 : 1);
        if (const auto [arg, where] = unknown_subcommand(app, argc, args.data()); !arg.empty()) {
            fmt::print(stderr, "error: {}: unknown {} '{}' (see {} --help)\n", where, arg[0] == '-' ? "option" : "subcommand", arg,
                       where);
            return 1;
        }
        return app.exit(e) == 0 ? 0 : 1;
    }
    try {
        for (auto & c : commands) {
            if (c.sub->parsed()) return finish(c.run());
        }
    } catch (const tessera::error & e) {
        fmt::print(stderr, "error: {}\n", e.what());
        return 1;
    } catch (const std::exception & e) {
        fmt::print(stderr, "error: {}\n", e.what());
        return 1;
    }
    return 1;
}

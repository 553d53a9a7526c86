// tools/main.cpp — the `tessera` command line program.
#include <cstdio>
#include <exception>
#include <string_view>
#include <vector>

#include <fmt/core.h>

#include "commands.hpp"
#include "tessera/core/error.hpp"
#ifdef TESSERA_HAVE_CMD_DEVICES
#include "devices.hpp"
#endif

int main(int argc, char ** argv) {
    using namespace tessera::tools;
    CLI::App app{"tessera: an on-device tensor runtime for GGUF language models"};
    app.require_subcommand(1);
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
    for (int i = 2; i < argc && std::string_view(argv[1]) == "bench"; ++i) {
        if (std::string_view(argv[i]) == "-fa") args[size_t(i)] = flash_attn_long;
        if (std::string_view(argv[i]) == "-rp") args[size_t(i)] = repack_long; // the same for -rp (repack)
    }
    try {
        app.parse(argc, args.data());
    } catch (const CLI::ParseError & e) {
        return app.exit(e) == 0 ? 0 : 1;
    }
    try {
        for (auto & c : commands) {
            if (c.sub->parsed()) return c.run();
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

// tools/session_options.hpp — the options that set up an llm::session
// (threads, batch, device, KV cache type, fused attention, repacking),
// shared by the subcommands that evaluate a model.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "commands.hpp"
#include "tessera/core/types.hpp"
#include "tessera/llm/session.hpp"

namespace tessera::tools {

struct session_options {
    int n_threads = 0;
    int n_batch = 512;
    std::string device;
    CLI::Option * device_opt = nullptr; // to tell an empty --device from none (check_device_option)
    std::string kv_type = "F32";
    std::string flash_attn = "auto"; // on, off or auto (on where the device supports it)
    std::string repack = "on";       // on or off: MUL_MAT weights in the device's repacked layout

    // Adds -t, -b, --device, --kv-type, --repack and --flash-attn to `sub`
    // (values in either case, kept in the spelling shown).
    void add_to(CLI::App * sub) {
        sub->add_option("-t,--threads", n_threads, "CPU threads (0 = all)")
            ->transform(k_whole_number)
            ->check(in_range(0, k_max_threads))
            ->capture_default_str();
        sub->add_option("-b,--batch-size", n_batch, "most tokens evaluated in one graph (at most the context size)")
            ->transform(k_whole_number)
            ->check(in_range(1, 1 << 16))
            ->capture_default_str();
        device_opt = sub->add_option("--device", device, "device name (see `tessera devices`)");
        sub->add_option("--kv-type", kv_type, "KV cache type: F32 or F16")
            ->transform(one_of({"F32", "F16"}))
            ->capture_default_str();
        sub->add_option("--repack", repack, "repacked weight layout where the device has one (CPU_REPACK)")
            ->transform(one_of({"on", "off"}))
            ->capture_default_str();
        sub->add_option("--flash-attn", flash_attn, "fused attention: on, off or auto (on where the device supports it)")
            ->transform(one_of({"on", "off", "auto"}))
            ->capture_default_str();
    }

    // The session parameters for a context of n_ctx tokens (0: the
    // model's, at most 4096). Throws tessera::error for an empty --device;
    // warns on stderr when -t exceeds the hardware threads.
    llm::session_params params(uint32_t n_ctx) const {
        check_device_option(device_opt != nullptr && device_opt->count() > 0, device);
        warn_if_oversubscribed(n_threads);
        llm::session_params ps;
        ps.n_ctx = n_ctx;
        ps.n_batch = uint32_t(n_batch);
        ps.n_threads = n_threads;
        ps.device = device;
        ps.kv_type = type_from_name(kv_type);
        using fa_mode = llm::session_params::flash_attn_mode;
        ps.flash_attn = flash_attn == "on" ? fa_mode::on : flash_attn == "off" ? fa_mode::off : fa_mode::automatic;
        ps.repack = repack == "on";
        return ps;
    }
};

} // namespace tessera::tools

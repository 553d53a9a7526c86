// tools/cmd_devices.cpp — `tessera devices`: the backends that were loaded
// (library, score, variants considered) and every device with its
// description, type, memory, capabilities, buffer types and features.
// `--bench` times load_all (median of repeated runs in fresh registries).
#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>

#include <fmt/core.h>

#include "commands.hpp"
#include "devices.hpp"
#include "tessera/core/error.hpp"
#include "tessera/core/printable.hpp"

namespace tessera::tools {

namespace {

std::string mib(size_t bytes) { return fmt::format("{:.0f} MiB", double(bytes) / (1024.0 * 1024.0)); }

std::string caps_str(const device_caps & c) {
    std::string s;
    auto add = [&](bool on, const char * name) {
        if (on) s += s.empty() ? name : std::string(", ") + name;
    };
    add(c.async, "async");
    add(c.host_buffer, "host buffer");
    add(c.buffer_from_host_ptr, "buffer from host pointer");
    add(c.events, "events");
    return s.empty() ? "none" : s;
}

void print_report(std::FILE * out, const load_report & r) {
    if (r.candidates.empty()) return;
    fmt::print(out, "  {} libraries considered:\n", r.name);
    for (const auto & c : r.candidates) {
        const std::string score = c.score < 0 ? "-" : std::to_string(c.score);
        fmt::print(out, "    {:>5}  {}{}\n", score, printable_utf8(c.path), c.error.empty() ? "  (loaded)" : "");
        if (!c.error.empty()) fmt::print(out, "           {}\n", c.error);
    }
}

// Times load_all + unload in a fresh registry; prints the median of n runs.
int bench_load_all(int runs) {
    std::vector<double> ms;
    std::string chosen = "none";
    for (int i = 0; i < runs; ++i) {
        registry reg;
        reg.set_log(nullptr);
        const auto t0 = std::chrono::steady_clock::now();
        const auto reports = reg.load_all();
        const auto t1 = std::chrono::steady_clock::now();
        ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        if (auto cpu = reg.find_reg("cpu")) {
            for (const auto & [k, v] : cpu->features()) {
                if (k == "VARIANT") chosen = v;
            }
        }
    }
    std::sort(ms.begin(), ms.end());
    const double median = runs % 2 ? ms[size_t(runs / 2)] : (ms[size_t(runs / 2 - 1)] + ms[size_t(runs / 2)]) / 2;
    fmt::print("load_all: median {:.2f} ms over {} runs (min {:.2f}, max {:.2f}); CPU variant: {}\n",
               median, runs, ms.front(), ms.back(), chosen);
    return 0;
}

} // namespace

const std::vector<load_report> & load_backends() {
    static std::vector<load_report> reports;
    static std::once_flag once;
    std::call_once(once, [] { reports = registry::global().load_all(); });
    return reports;
}

size_t print_devices(std::FILE * out) {
    const auto & reports = load_backends();
    registry & reg = registry::global();
    const auto regs = reg.regs();
    fmt::print(out, "backends ({}):\n", regs.size());
    for (const auto & r : regs) {
        const api_version v = r.version();
        fmt::print(out, "  {}  API {}.{}  score {}  {}\n", r.name(), v.major, v.minor,
                   r.score() < 0 ? std::string("-") : std::to_string(r.score()),
                   r.path().empty() ? "(compiled in)" : printable_utf8(r.path()));
    }
    for (const auto & rep : reports) print_report(out, rep);

    const auto devs = reg.devices();
    fmt::print(out, "devices ({}):\n", devs.size());
    for (const auto & d : devs) {
        const device_props p = d.props();
        // What a plugin says is shown escaped: it can hold newlines and
        // terminal escape sequences. (Device names are checked at load.)
        fmt::print(out, "  {}: {}\n", printable(p.name, 64), printable_utf8(p.description, 256));
        fmt::print(out, "    type: {}\n", device_type_name(p.type));
        fmt::print(out, "    memory: {} free of {}\n", mib(p.memory_free), mib(p.memory_total));
        fmt::print(out, "    capabilities: {}\n", caps_str(p.caps));
        std::string bufts = printable(d.default_buffer_type().name(), 64);
        if (auto h = d.host_buffer_type()) bufts += fmt::format(", {} (host)", printable(h->name(), 64));
        for (const auto & b : d.extra_buffer_types()) bufts += fmt::format(", {}", printable(b.name(), 64));
        fmt::print(out, "    buffer types: {}\n", bufts);
        const auto feats = d.reg().features();
        if (!feats.empty()) {
            std::string line;
            for (const auto & [k, val] : feats) line += fmt::format(" {}={}", printable(k, 64), printable(val, 256));
            fmt::print(out, "    features:{}\n", line);
        }
    }
    if (devs.empty()) {
        std::string searched;
        for (const auto & f : reg.searched_folders()) searched += " " + f;
        fmt::print(out, "  none: no backend could be loaded (searched:{})\n", searched);
        eprint("error: no compute device found: no backend could be loaded (searched:{}; set TESSERA_BACKEND_PATH to "
               "the folder that holds libtessera-cpu-*.so)\n",
               searched);
    }
    return devs.size();
}

void add_list_devices_flag(CLI::App * sub) {
    sub->add_flag_callback(
        "--list-devices",
        [] {
            if (print_devices(stdout) == 0) throw CLI::RuntimeError(1); // the error is printed; exit 1 quietly
            throw CLI::Success();
        },
        "List the available backends and devices, then exit");
}

command register_devices(CLI::App & app) {
    CLI::App * sub = app.add_subcommand("devices", "List backends, devices and CPU features");
    static bool bench = false;
    static int runs = 20;
    sub->add_flag("--bench", bench, "Time load_all (median over --runs runs, in ms)");
    CLI::Option * runs_opt = sub->add_option("--runs", runs, "Runs for --bench")
                                   ->transform(k_whole_number)
                                   ->check(in_range(1, 10000))
                                   ->capture_default_str();
    return {sub, [runs_opt] {
                if (bench) return bench_load_all(runs);
                if (runs_opt->count() > 0) throw option_error(fmt::format("--runs needs --bench (got --runs {} without it)", runs));
                return print_devices(stdout) > 0 ? 0 : 1;
            }};
}

} // namespace tessera::tools

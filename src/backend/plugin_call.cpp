// backend/plugin_call.cpp — messages and reports of plugin_call.hpp.
#include "backend/plugin_call.hpp"

#include <cstdio>
#include <mutex>
#include <vector>

#include <fmt/core.h>

#include "backend/abi.hpp"
#include "tessera/core/printable.hpp"

namespace tessera::detail {

std::string current_exception_text() {
    try {
        throw;
    } catch (const std::exception & x) {
        return tessera::printable(str_or_empty(x.what()), 200);
    } catch (...) {
        return "an exception that is not a std::exception";
    }
}

namespace {

// "buffer type 'X'" for a buffer reached through a tensor, its name asked
// of the backend (which may throw as well).
std::string buffer_target(const tsr_buffer * b) {
    if (b == nullptr || b->buft == nullptr || !check_buffer_type(b->buft).empty()) return "a backend";
    tsr_buffer_type * bt = b->buft;
    try {
        return fmt::format("buffer type '{}'", tessera::printable(str_or_empty(bt->iface->get_name(bt)), 64));
    } catch (...) {
        return "a backend";
    }
}

} // namespace

std::string plugin_threw_message(const plugin_target & target, const char * call) {
    const std::string why = current_exception_text();
    const std::string who = target.entry ? target.entry->describe() : buffer_target(target.buffer);
    return fmt::format("{}: {} threw an exception ({}); a backend must report failures through its return value",
                       who, call, why);
}

void report_plugin_threw(const plugin_target & target, const char * call, const char * leaked) noexcept {
    try {
        std::string msg = plugin_threw_message(target, call);
        if (leaked != nullptr) msg += fmt::format("; the {} is leaked", leaked);
        msg = printable_lines(msg); // (the exception's text is the plugin's: control bytes as \xNN)
        // std::fprintf: a failed write (stderr closed or full) is not an exception
        std::fprintf(stderr, "tessera: %.*s\n", static_cast<int>(msg.size()), msg.data());
    } catch (...) { // (no memory for the message)
    }
}

void abandon_lease(lease && l) noexcept {
    // Reachable until the end (leak checkers see no leak), never released.
    static std::mutex mu;
    static auto * kept = new std::vector<lease>;
    try {
        std::lock_guard lk(mu);
        kept->push_back(std::move(l));
    } catch (...) { // no memory: the claim is given up after all
    }
}

} // namespace tessera::detail

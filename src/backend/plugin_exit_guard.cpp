// backend/plugin_exit_guard.cpp — the exit handler behind plugin_exit_guard.
#include "backend/plugin_exit_guard.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include <fmt/core.h>

namespace tessera::detail {

namespace {
// The innermost guard of this thread (null outside guarded calls).
thread_local const plugin_exit_guard * current_guard = nullptr;
} // namespace

struct plugin_exit_handler {
    // `called`: what the plugin called, e.g. "exit(0)".
    static void report(const std::string & called) {
        const plugin_exit_guard * g = current_guard;
        if (g == nullptr) return; // an ordinary exit
        const std::string msg =
            fmt::format("error: {} called {} during {}; a backend must report a failure by returning, "
                        "not end the program\n",
                        g->what_, called, g->call_);
        std::fflush(nullptr); // what the program wrote so far, as exit() would
        std::fwrite(msg.data(), 1, msg.size(), stderr);
        std::fflush(stderr);
        _exit(plugin_exit_status);
    }
#if defined(__GLIBC__)
    static void on_exit_fn(int status, void *) { report(fmt::format("exit({})", status)); }
#else
    static void atexit_fn() { report("exit(<unknown status>)"); }
#endif
    static void quick_exit_fn() { report("quick_exit()"); }
};

plugin_exit_guard::plugin_exit_guard(const std::string & what, const char * call)
    : what_(what), call_(call), outer_(current_guard) {
    static std::once_flag once;
    std::call_once(once, [] {
#if defined(__GLIBC__)
        on_exit(plugin_exit_handler::on_exit_fn, nullptr); // glibc: the handler gets the status
#else
        std::atexit(plugin_exit_handler::atexit_fn);
#endif
        std::at_quick_exit(plugin_exit_handler::quick_exit_fn);
    });
    current_guard = this;
}

plugin_exit_guard::~plugin_exit_guard() { current_guard = outer_; }

} // namespace tessera::detail

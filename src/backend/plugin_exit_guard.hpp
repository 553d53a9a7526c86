// backend/plugin_exit_guard.hpp — a plugin that calls exit() while it is
// being loaded ends the program with an error, not silently. Internal.
#pragma once

#include <string>

namespace tessera::detail {

// Exit status of the process when a backend plugin calls exit() during a
// guarded call (EX_SOFTWARE of <sysexits.h>: an internal software error;
// the CLI's own errors exit with 1).
inline constexpr int plugin_exit_status = 70;

// While alive, marks the calling thread as being inside `call` (a phrase
// such as "tessera_backend_init()") of the library `what` ("backend library
// '<path>'", already printable). Should the plugin call exit() or
// quick_exit() meanwhile (whatever the status, 0 included), an exit handler
// writes "error: <what> called exit(<status>) during <call>; ..." (or
// "called quick_exit()") to stderr
// and ends the process with _exit(plugin_exit_status). `what` and `call`
// must outlive the guard. Guards nest (the innermost is named).
//
// Why a handler and _exit: exit() cannot be stopped or turned into an
// exception, and the loader is half-way through (its lock held, a library
// open and not registered), so the process only reports and ends; the
// other exit handlers and static destructors, which could touch that
// state, are skipped (stdio buffers are flushed). The handler is
// registered once, at the first guard, so that handlers registered
// before it (e.g. the global registry's destructor) are the ones skipped.
// Not covered: exit() from another thread than the guarded one, _exit(),
// and exit() in calls made after loading (compute).
class plugin_exit_guard {
public:
    plugin_exit_guard(const std::string & what, const char * call);
    ~plugin_exit_guard();
    plugin_exit_guard(const plugin_exit_guard &) = delete;
    plugin_exit_guard & operator=(const plugin_exit_guard &) = delete;

private:
    friend struct plugin_exit_handler;
    const std::string & what_;
    const char * call_;
    const plugin_exit_guard * outer_;
};

} // namespace tessera::detail

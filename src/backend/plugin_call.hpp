// backend/plugin_call.hpp — calls into a backend's C tables that survive a
// C++ exception thrown across the C ABI (backend.h forbids it, but a plugin
// written in C++ can let one escape). Internal.
#pragma once

#include <string>

#include "backend/reg_entry.hpp"
#include "tessera/core/error.hpp"

namespace tessera::detail {

// The message of the exception being handled (call only inside a catch
// block): its what() made printable, or a phrase for one that is not a
// std::exception.
std::string current_exception_text();

// Runs f, a call into a plugin while it is being loaded. Such an exception
// becomes tessera::error "<what>: threw an exception across the C ABI (<its
// message>)", so the library is refused like any broken one.
template <class F>
decltype(auto) plugin_call(const std::string & what, F && f) {
    try {
        return f();
    } catch (...) {
        throw error(what + ": threw an exception across the C ABI (" + current_exception_text() + ")");
    }
}

// Whom a call after loading went to, for messages: the registered backend
// (`entry`), else the buffer type of `buffer` (a tensor's buffer reached
// through tsr_tensor), else an unnamed backend. Both may be null.
struct plugin_target {
    const reg_entry * entry = nullptr;
    const tsr_buffer * buffer = nullptr;
};

// "<target>: <call> threw an exception (<its message>); a backend must
// report failures through its return value", where <target> is e.g.
// "backend 'cpu' (/path/libtessera-cpu-haswell.so)". Call only inside a
// catch block.
std::string plugin_threw_message(const plugin_target & target, const char * call);

// Writes "tessera: " plugin_threw_message(target, call), then "; the
// <leaked> is leaked" when `leaked` is not null, and a newline to stderr;
// never throws (without memory for the message, nothing is written). Call
// only inside a catch block.
void report_plugin_threw(const plugin_target & target, const char * call, const char * leaked = nullptr) noexcept;

// The one guard around every call the host makes into a backend after
// loading it (a table slot or an extension function): f() runs, and an
// exception it lets escape is caught here instead of unwinding through the
// plugin's C frames into the host (or ending the program where the caller
// is noexcept). Three ways to fail, chosen by the caller:
//
//   guarded(t, call, f)               rethrows as tessera::error with
//                                     plugin_threw_message (for wrappers
//                                     that already throw on failure);
//   guarded_or(t, call, failure, f)   reports the message on stderr and
//                                     returns `failure` (a tsr_status, false,
//                                     nullptr: the call's own failure value);
//   guarded_free(t, call, object, f)  for noexcept teardown (free slots in
//                                     destructors): reports the message
//                                     and "; the <object> is leaked" on
//                                     stderr and returns false; the caller
//                                     then hands its lease to abandon_lease
//                                     (the plugin's state is unknown: its
//                                     code must stay mapped).
template <class F>
decltype(auto) guarded(const plugin_target & t, const char * call, F && f) {
    try {
        return f();
    } catch (...) {
        throw error(plugin_threw_message(t, call));
    }
}

template <class R, class F>
R guarded_or(const plugin_target & t, const char * call, R failure, F && f) noexcept {
    try {
        return f();
    } catch (...) {
        report_plugin_threw(t, call);
        return failure;
    }
}

template <class F>
bool guarded_free(const plugin_target & t, const char * call, const char * object, F && f) noexcept {
    try {
        f();
        return true;
    } catch (...) {
        report_plugin_threw(t, call, object);
        return false;
    }
}

// Keeps `l` (a backend's claim, lease.hpp) until the process ends, so that
// the library of an object whose free slot threw is never unloaded.
void abandon_lease(lease && l) noexcept;

} // namespace tessera::detail

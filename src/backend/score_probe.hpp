// backend/score_probe.hpp — opening and scoring backend plugins in a child
// process first, so that a library that crashes, hangs or calls exit()
// there is refused instead of taking the host down. Internal.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace tessera::detail {

// How probing one library ended.
enum class probe_outcome {
    not_probed, // the probe did not run (other threads, or fork or pipe failed): the caller opens it in-process as before
    scored,     // opened; its tessera_backend_score() returned `score`
    no_score,   // opened; it exports no tessera_backend_score
    not_opened, // dynlib_open refused it: `message` is its error
    threw,      // its score call threw a C++ exception: `message` is its text
    died,       // crashed, called exit(), or ran past the time limit: `message` says which
};

struct probe_result {
    probe_outcome outcome = probe_outcome::not_probed;
    int score = -1;
    std::string message; // for not_opened, threw and died, without the library's name
};

// Opens each library of `paths` (dynlib_open: the ELF checks, then its
// initializers), calls its tessera_backend_score(), then, when the host may
// load it (no score, or a score above 0), its tessera_backend_init(), and
// closes it again, in order, in a child process; the host calls nothing in
// them. The child is the helper program tessera-probe (found as below)
// started with posix_spawn: a fresh process, safe whatever threads the host
// runs. Where there is no helper, or it cannot be started, or it does not
// greet as a probe child within 5 s, the child is a fork() of this process
// instead, but only while this process is single-threaded (a fork child of
// a multi-threaded process may block on a lock another thread held). The
// child starts with the fatal signals at their default actions, and ends
// on any exit() before the host's exit handlers could run. One child
// probes them all unless one dies: the next child goes on after it. Up to
// 8 groups of consecutive libraries are probed so at the same time (this
// thread polls their children's pipes), so that libraries that hang cost
// about one time limit together, not one each. A library is refused
// (died) when the child crashes, exits or is killed while opening,
// scoring, initializing or closing it, when it writes records of its own
// into the child's pipe, or when it does not finish within timeout_s
// seconds (the child is then killed). The libraries are never opened in
// the calling process. Results are in the order of `paths`; the rest are
// not_probed when neither kind of child can run (no usable helper and
// more than one thread, or pipe2 or fork failing). Never throws for a
// library's behaviour; std::bad_alloc when memory runs out (the child is
// then killed and reaped).
// The children's stdout and stderr are a pipe (where this process's
// stderr is open and not close-on-exec) whose bytes this thread passes on
// to this process's stderr as they come, the first 64 KiB of each call;
// the rest is read and dropped (a child that prints without end is
// neither blocked nor let flood the terminal), and a line at the end of
// the call says how many bytes were.
// When a helper was found but passed over (it could not be started, or
// did not act as a probe child), *note (when given) says so in one line:
// which helper, why, and how the libraries are probed instead; otherwise
// *note is left as it was.
// (A broken build's zeroed machine code crashed the host in the score call:
// dlopen's checks pass, the first instruction faults.)
std::vector<probe_result> probe_scores(const std::vector<std::string> & paths, double timeout_s,
                                       std::string * note = nullptr);

// The time limit the loader gives one library's probe (30 s: dlopen of a
// large GPU library can take seconds on a slow disk). Tests lower it.
double probe_timeout_s();
void set_probe_timeout_s(double seconds);

// The helper program probe_scores uses: set_probe_helper's path when set
// ("" for none), else $TESSERA_PROBE_HELPER when set ("" turns the helper
// off), else tessera-probe beside the running program or in the plugin
// install directory, when executable.
// A helper that failed once (could not start, or ended, hung or wrote
// something else before starting on a library) is not used again by this
// process. A helper is given at most 128 KiB of paths on its command line;
// the rest go to the next one.
// Tests: a path ("" for none) instead of looking for one; nullopt: look
// again (either forgets a helper that failed).
void set_probe_helper(std::optional<std::string> path);
// Waits up to `limit` for child process `pid` to end and reaps it:
//   ended        it ended; its waitpid status is in *status
//   not_a_child  waitpid has no such child (ECHILD: the host reaps its
//                children itself); *status unset
//   handed_off   still running at the limit: left to a detached thread
//                that reaps it whenever it ends (no zombie), so that the
//                caller goes on; *status unset
// Probe children are killed and then waited for so (2 s): SIGKILL ends a
// process only when it leaves the kernel, and a child in an
// uninterruptible sleep (e.g. a read from a hung network or FUSE file
// system in a library's initializer) would otherwise hang the host too.
enum class reap_result { ended, not_a_child, handed_off };
reap_result reap_within(pid_t pid, std::chrono::milliseconds limit, int * status);

// Whether a probe without the helper could fork now: this process has a
// single thread (false under ThreadSanitizer, whose runtime starts one).
bool probe_may_fork();

// The probe child: greets, then probes paths[from..] as described above,
// reporting on descriptor `fd`; never returns. tessera-probe's main() and
// the fork()ed child run it.
[[noreturn]] void probe_child_main(int fd, const std::vector<std::string> & paths, size_t from);

// tessera-probe's main(): `tessera-probe REPORT_FD FIRST PATH...` (as
// probe_scores starts it: FIRST is the index of the first PATH in its
// list); 64 with a usage line on anything else.
int probe_helper_main(int argc, char ** argv);

} // namespace tessera::detail

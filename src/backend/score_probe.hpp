// backend/score_probe.hpp — opening and scoring backend plugins in a child
// process first, so that a library that crashes, hangs or calls exit()
// there is refused instead of taking the host down. Internal.
#pragma once

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
// initializers), calls its tessera_backend_score() and closes it again, in
// order, in a child process made with fork(); the host calls nothing in
// them. The child starts with the fatal signals at their default actions,
// and ends on any exit() before the host's exit handlers run. One child
// probes them all unless one dies: the next child goes on after it. A
// library is refused (died) when the child crashes, exits or is killed
// while opening, scoring or closing it, when it writes records of its own
// into the child's pipe, or when it does not finish within timeout_s
// seconds (the child is then killed). The libraries are never opened in
// the calling process. Results are in the order of `paths`; all
// not_probed when the process has more than one thread (fork without exec
// is only safe in a single-threaded process; the CLI loads its plugins
// before it starts any thread), or when pipe2 or fork fail. Never throws
// for a library's behaviour; std::bad_alloc when memory runs out (the child is then killed and
// reaped).
// (A broken build's zeroed machine code crashed the host in the score call:
// dlopen's checks pass, the first instruction faults.)
std::vector<probe_result> probe_scores(const std::vector<std::string> & paths, double timeout_s);

// The time limit the loader gives one library's probe (30 s: dlopen of a
// large GPU library can take seconds on a slow disk). Tests lower it.
double probe_timeout_s();
void set_probe_timeout_s(double seconds);

} // namespace tessera::detail

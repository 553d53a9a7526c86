// backend/score_probe.cpp — probing plugins in a child process
// (score_probe.hpp).
//
// The child reports over a pipe, one record per event: a header {library
// index, kind, score, message length} and the message. The parent accepts
// only the sequence the child can send (begin i, then i's result, then
// begin i + 1 or done), so bytes a library writes to the pipe by accident
// are a protocol error blamed on that library, never a result. A result
// counts once the child has moved on (begin of the next or done): a
// library whose destructors (run by dlclose after its result) crash the
// child is refused too.
#include "backend/score_probe.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

#include <fmt/core.h>

#include "backend/dynlib.hpp"
#include "backend/plugin_call.hpp"
#include "backend/registry_internal.hpp"
#include "tessera/backend.h"
#include "tessera/core/printable.hpp"

extern char ** environ; // (POSIX: the environment posix_spawn passes on)

namespace tessera::detail {

namespace {

std::atomic<double> timeout_setting{30.0};

// How long a probe child has to greet before it is given up on.
constexpr std::chrono::seconds k_greeting_limit{5};

// Signals that end a process by default without being a crash; a probe
// child keeps them ignored where the host ignores them.
constexpr int k_stop_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE};

// Most bytes of library paths one helper is given on its command line
// (ARG_MAX, environment included, is 2 MiB on Linux; thousands of plugins
// in a long folder name exceeded it and exec failed with E2BIG): the rest
// go to the next helper.
constexpr size_t k_helper_arg_bytes = size_t{128} << 10;
// Most groups of libraries probe_scores probes at the same time, and how
// long a child may be on one library before the libraries after it in its
// group go to a new group (a probe takes milliseconds: the 9 CPU variants
// of x86-64 take about 20 ms together, so normally one child probes all).
constexpr size_t k_probe_groups = 8;
constexpr std::chrono::milliseconds k_split_after{250};

// Longest message a record may carry (an exception's text, a loader error).
constexpr uint32_t k_max_message = 64u << 10;

// Most bytes of what probe children write to their stdout and stderr (a
// pipe to the host each) that one probe_scores call passes on to the
// host's stderr: plenty for a library's warnings, while a child that
// prints without end (TESSERA_PROBE_HELPER=/bin/yes wrote 6.3 GB to the
// terminal in the 5 s before the greeting limit) cannot flood it. The rest
// is still read, and dropped: a child blocked on a full pipe would be
// refused as hung.
constexpr size_t k_output_cap = size_t{64} << 10;
// Most bytes read from one child's output pipe per turn of the poll loop
// (a child that writes as fast as it is read does not hold up the others),
// and when it is over (what it left in the pipe: a pipe holds 1 MiB at
// most unless raised by root; a grandchild may go on writing).
constexpr size_t k_output_turn = size_t{64} << 10;
constexpr size_t k_output_drain = size_t{1} << 20;

enum record_kind : int32_t {
    k_hello = 0,  // first record of every child (index -1, score k_protocol): a probe child, not another program
    k_begin = 1,  // the child starts on this library
    k_scored,     // score = its score
    k_no_score,   // opened, no score symbol
    k_not_opened, // message = dynlib_open's error
    k_threw,      // message = the exception's text
    k_exited,     // message = "exit(3) during <call>"
    k_done,       // every library probed (index: -1)
    k_init,       // the child calls its tessera_backend_init (before its k_scored or k_no_score)
};

// The greeting's score: "tsr" and the protocol's version, 2 (1 had no
// k_init; a helper of another version is not taken for a probe child).
constexpr int32_t k_protocol = 0x74737202;

struct record_header {
    int32_t index;
    int32_t kind;
    int32_t score;
    uint32_t length;
};

// ---- the child ----

int child_fd = -1;
int child_index = -1; // the library being opened, scored or closed; -1 after the last
const char * child_call = "";

// Writes all n bytes at data to fd (again after EINTR or a short write);
// false when a write fails (errno says why) or writes nothing.
bool write_fully(int fd, const void * data, size_t n) {
    const auto * p = static_cast<const char *>(data);
    while (n > 0) {
        const ssize_t w = ::write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= static_cast<size_t>(w);
    }
    return true;
}

void write_all(const void * data, size_t n) {
    if (!write_fully(child_fd, data, n)) _exit(2); // the parent is gone
}

void send(int32_t kind, int32_t score, const std::string & message) {
    const std::string m = message.substr(0, k_max_message);
    const record_header h{child_index, kind, score, static_cast<uint32_t>(m.size())};
    write_all(&h, sizeof h);
    write_all(m.data(), m.size());
}

// Any exit() in the child is a library's (the child runs nothing else):
// passed to the parent, then the child ends before the host's own exit
// handlers (inherited by fork) could run. Registered in the child, last,
// so it runs first.
void report_exit(const std::string & called) {
    if (child_index >= 0) send(k_exited, 0, called + " during " + child_call);
    _exit(3);
}
#if defined(__GLIBC__)
void on_exit_fn(int status, void *) { report_exit(fmt::format("exit({})", status)); }
#else
void atexit_fn() { report_exit("exit(<unknown status>)"); }
#endif
void quick_exit_fn() { report_exit("quick_exit()"); }

// The signals a probe child sets to their default action: the crash
// signals, and those of k_stop_signals this process does not ignore
// (ignored ones stay ignored: a script's `trap '' INT`, a program started
// with `&`; a Ctrl-C the host ignores must not kill the probe and get a
// good library refused as crashed).
sigset_t signals_to_default() {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP, SIGSYS}) sigaddset(&set, sig);
    for (int sig : k_stop_signals) {
        struct sigaction now {};
        if (::sigaction(sig, nullptr, &now) == 0 && now.sa_handler != SIG_IGN) sigaddset(&set, sig);
    }
    return set;
}

// The child as a freshly started process would be for the library: those
// signals at their default action (not the host's crash handlers), none
// blocked.
void reset_signals() {
    const sigset_t to_default = signals_to_default();
    for (int sig = 1; sig < NSIG; ++sig) {
        if (sigismember(&to_default, sig) == 1) ::signal(sig, SIG_DFL);
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
}

} // namespace

[[noreturn]] void probe_child_main(int fd, const std::vector<std::string> & paths, size_t from) {
    child_fd = fd;
    reset_signals();
    // stdout is a pipe to the host (not a terminal): line-buffered, so
    // that a library's lines arrive as it prints them and are not lost in
    // the buffer when the child ends with _exit.
    std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
#if defined(__GLIBC__)
    ::on_exit(on_exit_fn, nullptr); // glibc: the handler gets the status
#else
    std::atexit(atexit_fn);
#endif
    std::at_quick_exit(quick_exit_fn);
    try {
        send(k_hello, k_protocol, {});
        for (size_t i = from; i < paths.size(); ++i) {
            child_index = static_cast<int32_t>(i);
            send(k_begin, 0, {});
            std::string err;
            child_call = "its initializers (run by dlopen)";
            void * h = dynlib_open(paths[i], err);
            if (h == nullptr) {
                send(k_not_opened, 0, err);
                continue;
            }
            auto fn = reinterpret_cast<tsr_backend_score_fn>(dynlib_symbol(h, TSR_BACKEND_SCORE_SYMBOL));
            child_call = "tessera_backend_score()";
            int32_t kind = k_no_score;
            int score = -1;
            std::string thrown;
            if (fn != nullptr) {
                try {
                    score = fn();
                    kind = k_scored;
                } catch (...) {
                    kind = k_threw;
                    thrown = current_exception_text();
                }
            }
            // A library the host may load (it runs here: no score, or a
            // score above 0) is initialized here first, so that a crash,
            // hang or exit() in its tessera_backend_init is the probe's
            // and not the host's. What init returns or throws the host sees
            // again in its own call.
            auto init = reinterpret_cast<tsr_backend_init_fn>(dynlib_symbol(h, TSR_BACKEND_INIT_SYMBOL));
            if (init != nullptr && (kind == k_no_score || (kind == k_scored && score > 0))) {
                send(k_init, 0, {});
                child_call = "tessera_backend_init()";
                try {
                    (void)init();
                } catch (...) {
                }
            }
            send(kind, kind == k_scored ? score : 0, thrown);
            // Closed before the next library opens, as the host would (its
            // dependencies are not shared with the next): its destructors
            // run here, and a crash in them is blamed on it.
            child_call = "its destructors (run by dlclose)";
            dynlib_close(h);
        }
        child_index = -1;
        std::fflush(stdout); // (a last line without its newline)
        send(k_done, 0, {});
    } catch (...) {
        _exit(1);
    }
    _exit(0);
}

int probe_helper_main(int argc, char ** argv) {
    // tessera-probe REPORT_FD FIRST PATH...: as the probe starts it (below).
    // FIRST: the index (in the host's list) of the first PATH given.
    const auto number = [](const char * text, long max) -> long {
        if (text[0] < '0' || text[0] > '9') return -1; // digits only: no sign or spaces
        char * end = nullptr;
        errno = 0;
        const long v = std::strtol(text, &end, 10);
        return errno == 0 && *end == '\0' && v <= max ? v : -1;
    };
    const long fd = argc >= 3 ? number(argv[1], 1 << 20) : -1;
    const long first = argc >= 3 ? number(argv[2], 1 << 30) : -1;
    // The report pipe is not passed on to programs a library runs.
    if (fd < 3 || first < 0 || ::fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC) < 0) {
        std::fprintf(stderr,
                     "tessera-probe: opens and scores tessera backend plugins for the program that starts it; "
                     "not meant to be run by hand (usage: tessera-probe REPORT_FD FIRST PATH...)\n");
        return 64;
    }
    std::vector<std::string> paths(static_cast<size_t>(first)); // (the ones before FIRST: not probed here)
    paths.insert(paths.end(), argv + 3, argv + argc);
    probe_child_main(static_cast<int>(fd), paths, static_cast<size_t>(first));
}

namespace {

// ---- the parent ----

} // namespace

namespace {

// One non-blocking waitpid for child `pid`: ended (*status set),
// not_a_child (ECHILD: the host reaps its children itself, SIGCHLD
// ignored), or nullopt while it runs.
std::optional<reap_result> try_reap(pid_t pid, int * status) {
    for (;;) {
        const pid_t r = ::waitpid(pid, status, WNOHANG);
        if (r == pid) return reap_result::ended;
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return reap_result::not_a_child;
        return std::nullopt;
    }
}

} // namespace

reap_result reap_within(pid_t pid, std::chrono::milliseconds limit, int * status) {
    const auto until = std::chrono::steady_clock::now() + limit;
    auto pause = std::chrono::microseconds(50);
    for (;;) {
        if (const std::optional<reap_result> r = try_reap(pid, status)) return *r;
        if (std::chrono::steady_clock::now() >= until) break;
        std::this_thread::sleep_for(pause);
        pause = std::min<std::chrono::microseconds>(2 * pause, std::chrono::milliseconds(10));
    }
    try {
        std::thread([pid] {
            int st = 0;
            while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
            }
        }).detach();
    } catch (const std::system_error &) {
        // No thread: the child stays a zombie once it ends (not a hang).
    }
    return reap_result::handed_off;
}

namespace {

// Most time a killed probe child is waited for (reap_within).
constexpr std::chrono::milliseconds k_reap_limit{2000};

// One probe child: killed (unless it ended) and reaped, and its pipe
// closed, however the parent leaves.
struct child_process {
    pid_t pid = -1;
    int fd = -1;         // the read end of the report pipe
    int out = -1;        // the read end of its stdout and stderr (non-blocking); -1: none, or closed at its end of file
    bool reaped = false; // waitpid returned it (or cannot: ECHILD)
    bool status_known = false;
    int status = 0;
    bool own_group = false; // leads a process group of its own (the helper): killed as a group

    // Reaps the child if it has ended (without waiting); true once it has.
    bool reap() {
        if (reaped) return true;
        const std::optional<reap_result> r = try_reap(pid, &status);
        if (!r) return false; // still running
        reaped = true;
        status_known = *r == reap_result::ended;
        return true;
    }
    // (The group only before the reap: until then its id cannot be reused.
    // A program the library or a helper script started, such as a `sleep`
    // a hanging script waits for, goes with it.)
    // (Bounded: a child that SIGKILL cannot end yet is left to a reaper
    // thread, its status unknown.)
    void kill_and_reap() {
        if (reaped) return;
        if (own_group) ::kill(-pid, SIGKILL);
        ::kill(pid, SIGKILL);
        status_known = reap_within(pid, k_reap_limit, &status) == reap_result::ended;
        reaped = true;
    }
    ~child_process() {
        if (fd >= 0) ::close(fd);
        if (out >= 0) ::close(out);
        if (pid > 0) kill_and_reap();
    }
};

// Text from the child as it is when it is plain ASCII (what the child
// sends: current_exception_text is printable already), else made
// printable (bytes a library wrote into the pipe itself).
std::string as_printable(const std::string & s) {
    const bool plain = std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
    return plain ? s : printable_utf8(s);
}

// The refusal of a library that called `called` (the child's k_exited
// message, e.g. "exit(3) during tessera_backend_score()").
std::string exit_refusal(const std::string & called) {
    return "called " + as_printable(called) +
           " (in a probe process); a backend must report a failure by returning, not end the program";
}

// Why the child ended while on a library: while it was opened and scored
// (`closing` false; `initializing`: in its tessera_backend_init) or closed
// after its result.
std::string death_message(const child_process & c, bool timed_out, const std::string & protocol_error, double timeout_s,
                          bool closing, bool initializing) {
    const char * when = closing        ? "after being scored, while being closed"
                        : initializing ? "in tessera_backend_init()"
                                       : "while being opened and scored";
    if (!protocol_error.empty()) return fmt::format("broke the probe process's report pipe ({}; killed)", protocol_error);
    if (timed_out) {
        return fmt::format("did not finish {} within {} s (in a probe process, killed)",
                           closing ? "closing" : initializing ? "tessera_backend_init()" : "opening and scoring", timeout_s);
    }
    if (!c.status_known) return fmt::format("ended the probe process {} (its status is unknown)", when);
    if (WIFSIGNALED(c.status)) {
        const int sig = WTERMSIG(c.status);
        const char * name = ::strsignal(sig);
        return fmt::format("crashed {} (in a probe process: signal {}, {})", when, sig, name != nullptr ? name : "unknown");
    }
    if (WIFEXITED(c.status)) return fmt::format("ended the probe process with status {} {}", WEXITSTATUS(c.status), when);
    return fmt::format("ended the probe process {}", when);
}

// True when this process has exactly one thread (Linux: field 20 of
// /proc/self/stat); false when that cannot be read. Only then is fork()
// without exec safe: a child of a multi-threaded process may block on a
// lock another thread held at the fork (seen under AddressSanitizer, whose
// allocator the child inherited locked: RegistryUnload.
// ConcurrentLookupsWhileAnotherFamilyLoadsAndUnloads timed out in it).
bool single_threaded() {
    std::FILE * f = std::fopen("/proc/self/stat", "re");
    if (f == nullptr) return false;
    char buf[1024];
    const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = '\0';
    const char * p = std::strrchr(buf, ')'); // the command name may hold spaces and ')'
    if (p == nullptr) return false;
    // Fields after the name: state (3), ppid (4), ..., num_threads (20).
    int field = 2;
    for (const char * q = p + 1; *q != '\0'; ++q) {
        if (*q != ' ') continue;
        if (++field == 20) return std::strtol(q + 1, nullptr, 10) == 1;
    }
    return false;
}

std::mutex helper_mutex;
std::optional<std::string> helper_setting; // set_probe_helper's; nullopt: look for one
std::string helper_failed;                  // a helper that failed once: not tried again by this process

bool executable(const std::string & path) {
    return !path.empty() && ::access(path.c_str(), X_OK) == 0;
}

// The helper program (see probe_scores), or "" for none (or one that
// failed before in this process: each failure can cost the greeting's 5 s).
// A tessera-probe found where one is looked for but not executable is
// passed over, its path left in *skipped.
std::string find_helper_path(std::string * skipped = nullptr) {
    {
        std::lock_guard<std::mutex> lk(helper_mutex);
        if (helper_setting) return *helper_setting;
    }
    if (const char * env = std::getenv("TESSERA_PROBE_HELPER")) return env; // "" turns it off
    // Beside the running program, then in the plugin install folders.
    std::vector<std::filesystem::path> dirs = plugin_install_dirs();
    if (const std::filesystem::path exe = exe_dir(); !exe.empty()) dirs.insert(dirs.begin(), exe);
    for (const auto & dir : dirs) {
        const std::string candidate = (dir / "tessera-probe").string();
        if (executable(candidate)) return candidate;
        if (skipped != nullptr && skipped->empty() && ::access(candidate.c_str(), F_OK) == 0) *skipped = candidate;
    }
    return {};
}

std::string find_helper(std::string * skipped = nullptr) {
    std::string h = find_helper_path(skipped);
    std::lock_guard<std::mutex> lk(helper_mutex);
    return !h.empty() && h == helper_failed ? std::string() : h;
}

void helper_did_not_work(const std::string & helper) {
    std::lock_guard<std::mutex> lk(helper_mutex);
    helper_failed = helper;
}

// Whether descriptor `fd` is open and a program started would inherit it
// (not close-on-exec, as the CLI's stand-ins for closed ones are).
bool inheritable(int fd) {
    const int flags = ::fcntl(fd, F_GETFD);
    return flags >= 0 && (flags & FD_CLOEXEC) == 0;
}

// pipe2 with close-on-exec (a program another thread starts meanwhile
// does not inherit it), both ends above the standard descriptors (a host
// with one of those closed gets it from pipe2; a child's dup2 onto its
// stdout or stderr would then replace it); false when none can be made.
bool make_pipe(int fd[2]) {
    if (::pipe2(fd, O_CLOEXEC) != 0) return false;
    for (int i = 0; i < 2; ++i) {
        if (fd[i] > 2) continue;
        const int moved = ::fcntl(fd[i], F_DUPFD_CLOEXEC, 3);
        ::close(fd[i]);
        fd[i] = moved;
    }
    if (fd[0] >= 0 && fd[1] >= 0) return true;
    for (int i = 0; i < 2; ++i) {
        if (fd[i] >= 0) ::close(fd[i]);
        fd[i] = -1;
    }
    return false;
}

// Starts `helper` as a probe child reporting on write_fd (its descriptor
// 3 there, or 4 when write_fd is 3: dup2 clears close-on-exec on the copy
// only), its stdout and stderr on output_fd (-1: none, see below), with
// the fatal signals at their default actions and none blocked; the pid,
// or -1 when it cannot be started (posix_spawn reports a failed exec too),
// with the error number in `error`. Both descriptors are above 2
// (make_pipe).
pid_t spawn_helper(const std::string & helper, int write_fd, int output_fd, const std::vector<std::string> & paths,
                   size_t start, size_t end, int & error) {
    const int target = write_fd == 3 ? 4 : 3;
    std::vector<std::string> args{helper, std::to_string(target), std::to_string(start)};
    args.insert(args.end(), paths.begin() + static_cast<std::ptrdiff_t>(start), paths.begin() + static_cast<std::ptrdiff_t>(end));
    std::vector<char *> argv;
    for (std::string & a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    if ((error = ::posix_spawn_file_actions_init(&actions)) != 0) return -1;
    if ((error = ::posix_spawnattr_init(&attr)) != 0) {
        ::posix_spawn_file_actions_destroy(&actions);
        return -1;
    }
    const sigset_t to_default = signals_to_default();
    sigset_t none;
    sigemptyset(&none);
    pid_t pid = -1;
    // Standard descriptors: stdin /dev/null (in its own process group a
    // read from the terminal would stop it); stdout and stderr the output
    // pipe, which the host passes on to its stderr (bounded), so what a
    // library prints while probed does not enter the program's output
    // (`run`'s text). Without that pipe: stdout the host's stderr, and any
    // the helper would start without (closed here, or close-on-exec)
    // /dev/null, so that a file a library opens does not become its stderr.
    // (The output pipe first: it may be the descriptor `target` is.)
    int rc = 0;
    if (output_fd >= 0) {
        rc = ::posix_spawn_file_actions_adddup2(&actions, output_fd, 1);
        if (rc == 0) rc = ::posix_spawn_file_actions_adddup2(&actions, output_fd, 2);
    }
    if (rc == 0) rc = ::posix_spawn_file_actions_adddup2(&actions, write_fd, target);
    if (rc == 0) rc = ::posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    if (rc == 0 && output_fd < 0) {
        rc = inheritable(2) ? ::posix_spawn_file_actions_adddup2(&actions, 2, 1)
                            : ::posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    }
    if (rc == 0 && output_fd < 0 && !inheritable(2)) rc = ::posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
    if (rc == 0) rc = ::posix_spawnattr_setsigdefault(&attr, &to_default);
    if (rc == 0) rc = ::posix_spawnattr_setsigmask(&attr, &none);
    // A process group of its own: killed with whatever it started, and
    // outside the terminal's foreground group, so a Ctrl-C the host handles
    // does not kill the probe and refuse the library it was on.
    if (rc == 0) rc = ::posix_spawnattr_setpgroup(&attr, 0);
    if (rc == 0) rc = ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
    if (rc == 0) rc = ::posix_spawn(&pid, helper.c_str(), &actions, &attr, argv.data(), environ);
    ::posix_spawnattr_destroy(&attr);
    ::posix_spawn_file_actions_destroy(&actions);
    error = rc;
    return rc == 0 ? pid : -1;
}

// The note probe_scores gives about a helper it passed over: which, why,
// and what it does instead.
std::string helper_note(const std::string & helper, const std::string & why, bool may_fork) {
    return fmt::format("plugin probe helper '{}' {}; {}", as_printable(helper), why,
                       may_fork ? "backend libraries are probed in a fork of this process instead"
                                : "backend libraries are opened and scored in this process, without a probe");
}

} // namespace

bool probe_may_fork() { return single_threaded(); }

double probe_timeout_s() { return timeout_setting.load(); }
void set_probe_timeout_s(double seconds) { timeout_setting.store(seconds); }

void set_probe_helper(std::optional<std::string> path) {
    std::lock_guard<std::mutex> lk(helper_mutex);
    helper_setting = std::move(path);
    helper_failed.clear();
}


namespace {

using probe_clock = std::chrono::steady_clock;

// Writes n bytes to this process's stderr; false when it cannot (closed,
// full and non-blocking, a pipe whose reader is gone). SIGPIPE is held
// back meanwhile: a child that wrote to that pipe itself ended, not the
// host.
bool write_stderr(const char * p, size_t n) {
    sigset_t pipe_signal, old;
    sigemptyset(&pipe_signal);
    sigaddset(&pipe_signal, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &pipe_signal, &old);
    sigset_t pending;
    const bool was_pending = ::sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
    const bool ok = write_fully(2, p, n);
    if (!ok && !was_pending && ::sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
        const timespec now{};
        while (::sigtimedwait(&pipe_signal, nullptr, &now) < 0 && errno == EINTR) {
        }
    }
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return ok;
}

// What the children of one probe_scores call write to their stdout and
// stderr, passed on to this process's stderr up to k_output_cap bytes;
// the rest is counted and dropped, and one line says so at the end.
struct output_relay {
    size_t passed = 0;
    size_t dropped = 0;
    bool failed = false;        // stderr could not be written: nothing more is tried
    bool at_line_start = true;  // the last byte passed on ended a line

    void pass_on(const char * p, size_t n) {
        const size_t take = std::min(n, k_output_cap - passed);
        if (take > 0 && !failed) {
            failed = !write_stderr(p, take);
            at_line_start = p[take - 1] == '\n';
        }
        passed += take;
        dropped += n - take;
    }
    void say_dropped() const {
        if (dropped == 0 || failed) return;
        const std::string line = fmt::format(
            "{}tessera: the plugin probe process wrote more than {} KiB to stdout and stderr; the {} bytes after that "
            "were dropped\n",
            at_line_start ? "" : "\n", k_output_cap >> 10, dropped);
        (void)write_stderr(line.data(), line.size());
    }
};

// What the groups of one probe_scores call share.
struct probe_run {
    const std::vector<std::string> & paths;
    std::vector<probe_result> & out;
    double timeout_s;
    probe_clock::duration limit;
    std::string helper; // "" once it failed (for every group: fork instead)
    bool may_fork;      // this process is single-threaded
    std::string * note;
    output_relay output; // its children's stdout and stderr
};

// One group of consecutive libraries [next, last) of probe_scores, probed
// in turn by one child at a time, the next going on after one that died;
// the groups of a call run at the same time, driven by probe_scores' poll
// loop (start, then pump with the child's pipe readiness until it is done).
class probe_group {
public:
    probe_group(probe_run & run, size_t first, size_t last) : run_(run), next_(first), last_(last) {}

    bool busy() const { return child_.has_value(); }

    // When the child has been on one library (opening and scoring it,
    // current_, or closing it after its result, pending_) for
    // k_split_after and the group holds libraries after it: gives them up
    // and returns them as [from, to) for a new group (this child stops
    // after its library); else false.
    bool split(probe_clock::time_point now, size_t & from, size_t & to) {
        const int on = current_ >= 0 ? current_ : pending_;
        if (!child_ || closing_ || on < 0 || now - began_ < k_split_after || static_cast<size_t>(on) + 1 >= last_) return false;
        from = static_cast<size_t>(on) + 1;
        to = last_;
        last_ = from;
        return true;
    }

    // Takes back the libraries a split gave up, [.., to), when no child
    // could be started for them (nothing was probed of them meanwhile:
    // this group is not pumped in between).
    void unsplit(size_t to) { last_ = to; }

    // Refuses the library the child is on (a failure of this process's
    // poll, `why`), as when it broke the protocol.
    void fail(const std::string & why) {
        if (!child_) return;
        if (protocol_error_.empty()) protocol_error_ = why;
        finish();
    }

    // The pipe to poll: -1 for none, or while waiting for a child that
    // closed it early to end (its end of file would wake poll at once).
    int fd() const { return child_ && !closing_ ? child_->fd : -1; }
    // The pipe of its stdout and stderr: -1 for none (or after its end of
    // file); polled in every state, so that the child is never blocked.
    int output_fd() const { return child_ ? child_->out : -1; }
    probe_clock::time_point deadline() const {
        return closing_ ? std::min(grace_end_, probe_clock::now() + std::chrono::milliseconds(10)) : deadline_;
    }
    // Whether its child has ended (reaped) since the last call: then the
    // poll loop drains the pipe without waiting.
    bool child_ended() { return child_ && child_->reap(); }

    // Starts a child on the next library, unless none is left or none can
    // run (those libraries stay not_probed). Returns busy().
    bool start() {
        while (!child_ && next_ < last_) {
            if (!launch()) break;
        }
        return busy();
    }

    // One turn of the poll loop: `readable` when poll saw the pipe ready
    // (data, end of file or an error), `output` when it saw the output pipe
    // so, `ended` when the child was reaped before the poll. Ends the child
    // and starts the next when it is over. What was in the pipe when poll
    // returned at `polled` is read before the time limit is judged, against
    // that time: a result that came in time counts, however long other
    // groups' turns took.
    void pump(bool readable, bool output, bool ended, probe_clock::time_point polled) {
        if (!child_) return;
        if (output) relay(k_output_turn); // (each turn: a library's lines reach stderr as it prints them)
        if (closing_) { // the pipe closed early: until the child ends, a second at most
            if (ended || probe_clock::now() >= grace_end_) finish();
            return;
        }
        if (readable) {
            char tmp[4096];
            const ssize_t n = ::read(child_->fd, tmp, sizeof tmp);
            if (n < 0 && errno == EINTR) return;
            if (n <= 0) { // end of file
                eof_ = true;
                if (done_ || ended) {
                    finish();
                } else {
                    // The child ended, or the library closed (or replaced)
                    // the pipe's descriptor. Give it a second to end.
                    closing_ = true;
                    grace_end_ = probe_clock::now() + std::chrono::seconds(1);
                }
                return;
            }
            buf_.append(tmp, static_cast<size_t>(n));
            parse();
            if (!protocol_error_.empty() || done_) {
                finish();
                return;
            }
        } else if (ended) {
            finish(); // drained
            return;
        }
        if (!ended && polled >= deadline_) { // (a child that keeps writing is judged too)
            timed_out_ = true;
            finish();
        }
    }

private:
    // Starts one child on [next_, ...): the helper, or a fork; false when
    // no child can run (the rest stay not_probed).
    bool launch() {
        const size_t start = next_;
        helper_ = run_.helper;
        if (!with_helper() && !run_.may_fork) return false; // not_probed: opened in-process, as before
        // The libraries this child probes: all the rest of the group, or for
        // a helper as many as its command line takes (at least one).
        end_ = last_;
        if (with_helper()) {
            size_t bytes = 0;
            for (end_ = start; end_ < last_ && (end_ == start || bytes + run_.paths[end_].size() + 1 <= k_helper_arg_bytes); ++end_) {
                bytes += run_.paths[end_].size() + 1;
            }
        }
        // A fork child's list: the group's libraries up to its end (the
        // child probes from `start` to the end of the list it is given),
        // made before the pipes (nothing to close should it throw).
        std::vector<std::string> upto;
        if (!with_helper()) upto.assign(run_.paths.begin(), run_.paths.begin() + static_cast<std::ptrdiff_t>(end_));
        // fds[0..1]: the report pipe; fds[2..3]: the child's stdout and
        // stderr, passed on by the poll loop, where this process's stderr
        // is one a child could have (without it, or should it fail, the
        // child's are as they were before this pipe).
        int fds[4] = {-1, -1, -1, -1};
        if (!make_pipe(fds)) return false;
        struct close_all { // until the child holds the read ends (spawn_helper may throw)
            int * fd;
            ~close_all() {
                for (int i = 0; i < 4; ++i) {
                    if (fd[i] >= 0) ::close(fd[i]);
                }
            }
        } guard{fds};
        if (inheritable(2) && make_pipe(fds + 2) && ::fcntl(fds[2], F_SETFL, O_NONBLOCK) != 0) { // (none that could block the host)
            for (int i = 2; i < 4; ++i) {
                ::close(fds[i]);
                fds[i] = -1;
            }
        }
        pid_t pid = -1;
        int spawn_error = 0;
        if (with_helper()) {
            pid = spawn_helper(helper_, fds[1], fds[3], run_.paths, start, end_, spawn_error);
        } else {
            std::fflush(nullptr); // what is buffered would be written twice should the child call exit()
            pid = ::fork();
            if (pid == 0) {
                ::close(fds[0]);
                if (fds[3] >= 0) { // stdout and stderr into the output pipe (its ends are above 2)
                    ::close(fds[2]);
                    ::dup2(fds[3], 1);
                    ::dup2(fds[3], 2);
                    ::close(fds[3]);
                }
                probe_child_main(fds[1], upto, start);
            }
        }
        for (int i : {1, 3}) {
            if (fds[i] >= 0) ::close(fds[i]);
            fds[i] = -1;
        }
        if (pid < 0) {
            if (!with_helper()) return false;
            // A helper that cannot be started: fork instead, or score in-process.
            helper_failed(fmt::format("could not be started ({})", std::strerror(spawn_error)));
            return run_.may_fork; // (the caller's loop forks next)
        }
        child_first_ = start;
        child_.emplace();
        child_->pid = pid;
        child_->fd = fds[0];
        child_->out = fds[2];
        fds[0] = fds[2] = -1;
        child_->own_group = with_helper();
        current_ = pending_ = -1;
        done_ = timed_out_ = eof_ = greeted_ = closing_ = initializing_ = false;
        protocol_error_.clear();
        buf_.clear();
        // Until the greeting: a few seconds (a helper that is another
        // program, or hangs, is given up on sooner).
        deadline_ = probe_clock::now() + std::min(run_.limit, std::chrono::duration_cast<probe_clock::duration>(k_greeting_limit));
        return true;
    }

    bool with_helper() const { return !helper_.empty(); }

    // The helper did not work: no group uses it again, and this one says so.
    void helper_failed(const std::string & why) {
        helper_did_not_work(helper_);
        if (run_.note != nullptr) *run_.note = helper_note(helper_, why, run_.may_fork);
        run_.helper.clear();
    }

    // Passes on what is in the child's output pipe (up to `limit` bytes;
    // without waiting), and closes it at its end of file (every writer
    // gone: poll would report it at once each turn).
    void relay(size_t limit) {
        int & out = child_->out;
        char tmp[16384];
        for (size_t got = 0; out >= 0 && got < limit;) {
            const ssize_t n = ::read(out, tmp, sizeof tmp);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
            if (n <= 0) { // end of file, or an error
                ::close(out);
                out = -1;
                return;
            }
            got += static_cast<size_t>(n);
            run_.output.pass_on(tmp, static_cast<size_t>(n));
        }
    }

    // Takes the whole records in buf_ (the protocol of probe_child_main).
    void parse() {
        size_t used = 0;
        while (protocol_error_.empty() && !done_ && buf_.size() - used >= sizeof(record_header)) {
            record_header h{};
            std::memcpy(&h, buf_.data() + used, sizeof h);
            if (h.length > k_max_message) {
                protocol_error_ = "a record of " + std::to_string(h.length) + " bytes";
                break;
            }
            if (buf_.size() - used - sizeof h < h.length) break;
            std::string message = buf_.substr(used + sizeof h, h.length);
            used += sizeof h + h.length;
            if (!greeted_) {
                greeted_ = h.kind == k_hello && h.index == -1 && h.score == k_protocol && h.length == 0;
                if (!greeted_) protocol_error_ = "no greeting";
                continue;
            }
            if (h.kind == k_begin && current_ < 0 && h.index >= 0 && static_cast<size_t>(h.index) == next_) {
                pending_ = -1; // the one before is confirmed
                if (next_ >= last_) { // a library another group took (split): this child is done
                    done_ = true;
                    break;
                }
                current_ = h.index;
                initializing_ = false;
                began_ = probe_clock::now();
                deadline_ = began_ + run_.limit;
            } else if (h.kind == k_init && current_ >= 0 && h.index == current_ && !initializing_) {
                initializing_ = true;
            } else if (h.kind == k_done && current_ < 0 && h.index == -1 && next_ == end_) {
                pending_ = -1;
                done_ = true;
            } else if (h.kind == k_exited && current_ < 0 && pending_ >= 0 && h.index == pending_) {
                // exit() in its destructors, after its result
                probe_result & res = run_.out[static_cast<size_t>(pending_)];
                res.outcome = probe_outcome::died;
                res.message = exit_refusal(message);
                pending_ = -1;
            } else if (h.kind >= k_scored && h.kind <= k_exited && current_ >= 0 && h.index == current_) {
                probe_result & res = run_.out[static_cast<size_t>(current_)];
                switch (h.kind) {
                case k_scored:
                    res.outcome = probe_outcome::scored;
                    res.score = h.score;
                    break;
                case k_no_score: res.outcome = probe_outcome::no_score; break;
                case k_not_opened: res.outcome = probe_outcome::not_opened; break;
                case k_threw:
                    res.outcome = probe_outcome::threw;
                    message = as_printable(message);
                    break;
                default:
                    res.outcome = probe_outcome::died;
                    message = exit_refusal(message);
                    break;
                }
                res.message = std::move(message); // (not_opened: the loader makes it printable)
                pending_ = res.outcome == probe_outcome::died ? -1 : current_;
                next_ = static_cast<size_t>(current_) + 1; // (the library the child begins next)
                current_ = -1;
            } else {
                protocol_error_ = "a record out of order";
            }
        }
        buf_.erase(0, used);
    }

    // The child is over (done, died, timed out, closed the pipe or broke
    // the protocol): ends it, blames the library it was on, then starts the
    // next child on what is left.
    void finish() {
        child_process & child = *child_;
        if (eof_ && !done_ && !child.reap() && protocol_error_.empty()) protocol_error_ = "it closed the pipe";
        child.kill_and_reap(); // (done: it is ending by itself)
        // What it wrote last; then the pipe is closed with it, not read to
        // its end of file (a process the library started may hold it open).
        relay(k_output_drain);
        const bool no_result = next_ == child_first_; // no library's result came from this child
        if (with_helper() && !done_ && current_ < 0 && pending_ < 0 && no_result) {
            // It never got to a library: not a probe child (TESSERA_PROBE_HELPER
            // names another program), or it failed before starting one (no
            // greeting; garbage, an exit or a hang after it). No library is
            // blamed; fork instead, or open the rest in-process.
            std::string why;
            if (!greeted_) {
                why = timed_out_ ? fmt::format("did not greet as a probe helper within {} s",
                                               std::min(run_.timeout_s, double(k_greeting_limit.count())))
                      : protocol_error_.empty() ? "ended without greeting as a probe helper"
                                                : "is not a probe helper (it wrote something else)";
            } else {
                why = timed_out_                ? "stopped answering before probing a library"
                      : protocol_error_.empty() ? "ended before probing a library"
                                                : fmt::format("broke the probe protocol before probing a library ({})",
                                                              protocol_error_);
            }
            // (Another group may have found it out already.)
            if (!run_.helper.empty()) helper_failed(why);
            child_.reset();
            start();
            return;
        }
        const int blamed = current_ >= 0 ? current_ : pending_;
        if (blamed >= 0 && !done_) {
            probe_result & res = run_.out[static_cast<size_t>(blamed)];
            res.outcome = probe_outcome::died;
            res.message = death_message(child, timed_out_, protocol_error_, run_.timeout_s, current_ < 0, initializing_);
            next_ = static_cast<size_t>(blamed) + 1;
        } else if (no_result) {
            // Ended before it began on this library (e.g. a handler another
            // library installed with pthread_atfork): it is not opened here.
            run_.out[next_].outcome = probe_outcome::died;
            run_.out[next_].message = "could not be probed: the probe process ended before opening it";
            next_ = next_ + 1;
        }
        child_.reset();
        start();
    }

    probe_run & run_;
    size_t next_, last_; // the libraries left: [next_, last_)
    size_t end_ = 0;         // one past the last library of this child
    size_t child_first_ = 0; // the first library of this child
    std::optional<child_process> child_;
    std::string helper_; // the child's helper; empty: a fork
    int current_ = -1; // the library the child is on
    int pending_ = -1; // a library whose result came, before the child moved on
    bool done_ = false, timed_out_ = false, eof_ = false;
    bool greeted_ = false; // its first record was the greeting
    bool initializing_ = false; // the child is in current_'s tessera_backend_init
    std::string protocol_error_;
    probe_clock::time_point deadline_{};
    probe_clock::time_point began_{}; // when it began on current_ (or pending_'s)
    bool closing_ = false;            // the pipe closed early: waiting until grace_end_ for the child to end
    probe_clock::time_point grace_end_{};
    std::string buf_;
};

} // namespace

std::vector<probe_result> probe_scores(const std::vector<std::string> & paths, double timeout_s, std::string * note) {
    std::vector<probe_result> out(paths.size());
    std::string skipped; // a tessera-probe that is not executable
    probe_run run{paths, out, timeout_s,
                  std::chrono::duration_cast<probe_clock::duration>(std::chrono::duration<double>(timeout_s)),
                  find_helper(&skipped), single_threaded(), note, {}};
    if (run.helper.empty() && !skipped.empty() && note != nullptr) {
        *note = helper_note(skipped, "is not executable", run.may_fork);
    }
    // One group at first; a child that stays on a library hands the
    // libraries after it to a new group (probe_group::split), up to
    // k_probe_groups at the same time.
    std::vector<std::unique_ptr<probe_group>> groups;
    groups.push_back(std::make_unique<probe_group>(run, 0, paths.size()));
    groups.back()->start();
    std::vector<pollfd> pf;
    std::vector<char> ended;
    for (;;) {
        pf.clear();
        ended.assign(groups.size(), 0);
        bool any = false, drain = false;
        auto wake = probe_clock::now() + std::chrono::milliseconds(50);
        for (size_t i = 0; i < groups.size(); ++i) {
            ended[i] = groups[i]->child_ended() ? 1 : 0;
            pf.push_back({groups[i]->fd(), POLLIN, 0}); // (fd -1: ignored by poll)
            pf.push_back({groups[i]->output_fd(), POLLIN, 0});
            if (!groups[i]->busy()) continue;
            any = true;
            drain = drain || ended[i] != 0;
            wake = std::min(wake, groups[i]->deadline());
        }
        if (!any) break;
        // Short waits: a grandchild the library forked may hold the write
        // end open after the child ended, so no end-of-file comes.
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(wake - probe_clock::now()).count();
        const int r = ::poll(pf.data(), pf.size(), drain ? 0 : static_cast<int>(std::clamp<long long>(left, 1, 50)));
        const int poll_error = r < 0 ? errno : 0;
        const auto polled = probe_clock::now();
        if (r < 0 && poll_error != EINTR) {
            // Each child's library is refused (as a broken protocol), as
            // before the groups; the next children go on.
            for (const auto & g : groups) g->fail(fmt::format("poll failed: {}", std::strerror(poll_error)));
            continue;
        }
        const auto ready = [&](const pollfd & p) { return r > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0; };
        for (size_t i = 0; i < ended.size(); ++i) { // (the groups polled: pf holds two pipes each)
            groups[i]->pump(ready(pf[2 * i]), ready(pf[2 * i + 1]), ended[i] != 0, polled);
        }
        // Splits, while fewer than k_probe_groups groups have a child.
        const auto busy = [&] {
            return static_cast<size_t>(std::count_if(groups.begin(), groups.end(), [](const auto & g) { return g->busy(); }));
        };
        for (size_t i = 0, n = groups.size(); i < n && busy() < k_probe_groups; ++i) {
            size_t from = 0, to = 0;
            if (!groups[i]->split(polled, from, to)) continue;
            groups.push_back(std::make_unique<probe_group>(run, from, to));
            if (!groups.back()->start()) { // no child for them: the old one goes on with them
                groups.pop_back();
                groups[i]->unsplit(to);
            }
        }
    }
    run.output.say_dropped();
    return out;
}

} // namespace tessera::detail

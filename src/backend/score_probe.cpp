// backend/score_probe.cpp — probing plugins in a child process
// (score_probe.hpp). The child reports over a pipe, one record per event:
// a header {library index, kind, score, message length} and the message.
#include "backend/score_probe.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include <fmt/core.h>

#include "backend/dynlib.hpp"
#include "backend/plugin_call.hpp"
#include "backend/plugin_exit_guard.hpp"
#include "tessera/backend.h"

namespace tessera::detail {

namespace {

std::atomic<double> timeout_setting{30.0};

enum record_kind : int32_t {
    k_begin = 0,  // the child starts on this library
    k_scored,     // score = its score
    k_no_score,   // opened, no score symbol
    k_not_opened, // message = dynlib_open's error
    k_threw,      // message = the exception's text
    k_exited,     // message = "exit(3) during <call>"
};

struct record_header {
    int32_t index;
    int32_t kind;
    int32_t score;
    uint32_t length;
};

// ---- the child ----

int child_fd = -1;
int child_index = -1;
const char * child_call = "";

void write_all(const void * data, size_t n) {
    const auto * p = static_cast<const char *>(data);
    while (n > 0) {
        const ssize_t w = ::write(child_fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) _exit(2); // the parent is gone
        p += w;
        n -= static_cast<size_t>(w);
    }
}

void send(int32_t kind, int32_t score, const std::string & message) {
    const record_header h{child_index, kind, score, static_cast<uint32_t>(message.size())};
    write_all(&h, sizeof h);
    write_all(message.data(), message.size());
}

// A plugin's exit() under a guard, passed to the parent (plugin_exit_guard).
void exit_to_parent(const std::string & called) {
    send(k_exited, 0, called + " during " + child_call);
    _exit(0);
}

[[noreturn]] void child_main(int fd, const std::vector<std::string> & paths, size_t from) {
    child_fd = fd;
    try {
        set_plugin_exit_sink(exit_to_parent);
        for (size_t i = from; i < paths.size(); ++i) {
            child_index = static_cast<int32_t>(i);
            send(k_begin, 0, {});
            const std::string & path = paths[i];
            std::string err;
            void * h = nullptr;
            child_call = "its initializers (run by dlopen)";
            {
                plugin_exit_guard guard(path, child_call);
                h = dynlib_open(path, err);
            }
            if (h == nullptr) {
                send(k_not_opened, 0, err);
                continue;
            }
            auto fn = reinterpret_cast<tsr_backend_score_fn>(dynlib_symbol(h, TSR_BACKEND_SCORE_SYMBOL));
            if (fn == nullptr) {
                send(k_no_score, 0, {});
                continue;
            }
            child_call = "tessera_backend_score()";
            int score = -1;
            try {
                plugin_exit_guard guard(path, child_call);
                score = fn();
            } catch (...) {
                send(k_threw, 0, current_exception_text());
                continue;
            }
            send(k_scored, score, {});
            // The library stays open: closing it would run its destructors
            // for nothing (this process ends next).
        }
    } catch (...) {
        _exit(1);
    }
    _exit(0);
}

// ---- the parent ----

// Why the child died while on one library.
std::string death_message(int status, bool timed_out, double timeout_s) {
    if (timed_out) return fmt::format("did not finish opening and scoring within {} s (in a probe process, killed)", timeout_s);
    if (WIFSIGNALED(status)) {
        const int sig = WTERMSIG(status);
        const char * name = ::strsignal(sig);
        return fmt::format("crashed while being opened and scored (in a probe process: signal {}, {})", sig,
                           name != nullptr ? name : "unknown");
    }
    if (WIFEXITED(status)) {
        return fmt::format("ended the probe process with status {} while being opened and scored", WEXITSTATUS(status));
    }
    return "ended the probe process while being opened and scored";
}

} // namespace

double probe_timeout_s() { return timeout_setting.load(); }
void set_probe_timeout_s(double seconds) { timeout_setting.store(seconds); }

std::vector<probe_result> probe_scores(const std::vector<std::string> & paths, double timeout_s) {
    using clock = std::chrono::steady_clock;
    std::vector<probe_result> out(paths.size());
    size_t next = 0;
    while (next < paths.size()) {
        const size_t start = next;
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC) != 0) return out; // the rest: not_probed
        std::fflush(nullptr); // what is buffered would be written twice should the child's plugin call exit()
        const pid_t pid = ::fork();
        if (pid < 0) {
            ::close(fds[0]);
            ::close(fds[1]);
            return out;
        }
        if (pid == 0) {
            ::close(fds[0]);
            child_main(fds[1], paths, start);
        }
        ::close(fds[1]);

        int current = -1; // the library the child is on
        bool timed_out = false;
        const auto limit = std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(timeout_s));
        auto deadline = clock::now() + limit;
        std::string buf;
        for (;;) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
            if (left <= 0) {
                timed_out = true;
                break;
            }
            pollfd pf{fds[0], POLLIN, 0};
            const int r = ::poll(&pf, 1, static_cast<int>(std::min<long long>(left, 1 << 30)));
            if (r < 0 && errno == EINTR) continue;
            if (r == 0) {
                timed_out = true;
                break;
            }
            char tmp[4096];
            const ssize_t n = ::read(fds[0], tmp, sizeof tmp);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break; // the child is done (or gone)
            buf.append(tmp, static_cast<size_t>(n));
            size_t used = 0;
            while (buf.size() - used >= sizeof(record_header)) {
                record_header h{};
                std::memcpy(&h, buf.data() + used, sizeof h);
                if (buf.size() - used - sizeof h < h.length) break;
                std::string message = buf.substr(used + sizeof h, h.length);
                used += sizeof h + h.length;
                if (h.index < 0 || static_cast<size_t>(h.index) >= paths.size()) continue;
                const auto i = static_cast<size_t>(h.index);
                if (h.kind == k_begin) {
                    current = h.index;
                    deadline = clock::now() + limit;
                    continue;
                }
                probe_result & res = out[i];
                switch (h.kind) {
                case k_scored:
                    res.outcome = probe_outcome::scored;
                    res.score = h.score;
                    break;
                case k_no_score: res.outcome = probe_outcome::no_score; break;
                case k_not_opened: res.outcome = probe_outcome::not_opened; break;
                case k_threw: res.outcome = probe_outcome::threw; break;
                default:
                    res.outcome = probe_outcome::died;
                    message = "called " + message + " (in a probe process); a backend must report a failure by "
                                                     "returning, not end the program";
                    break;
                }
                res.message = std::move(message);
                current = -1;
                next = i + 1;
            }
            buf.erase(0, used);
        }
        if (timed_out) ::kill(pid, SIGKILL);
        ::close(fds[0]);
        int status = 0;
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        if (current >= 0) {
            out[static_cast<size_t>(current)].outcome = probe_outcome::died;
            out[static_cast<size_t>(current)].message = death_message(status, timed_out, timeout_s);
            next = static_cast<size_t>(current) + 1;
        }
        if (next == start) return out; // no progress: probing does not work here (the rest: not_probed)
    }
    return out;
}

} // namespace tessera::detail

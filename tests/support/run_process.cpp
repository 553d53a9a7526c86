// tests/support/run_process.cpp — see run_process.hpp.
#include "support/run_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

extern char ** environ;

namespace tessera::test {
namespace {

// This process's environment with `extra` ("NAME=value") added, each
// replacing an entry of the same NAME.
std::vector<std::string> environment_with(const std::vector<std::string> & extra) {
    std::vector<std::string> env;
    auto name_of = [](const std::string & e) { return e.substr(0, e.find('=')); };
    for (char ** e = environ; e != nullptr && *e != nullptr; ++e) {
        const std::string entry = *e;
        bool replaced = false;
        for (const std::string & x : extra) replaced = replaced || name_of(x) == name_of(entry);
        if (!replaced) env.push_back(entry);
    }
    env.insert(env.end(), extra.begin(), extra.end());
    return env;
}

std::vector<char *> c_strings(std::vector<std::string> & v) {
    std::vector<char *> p;
    for (std::string & s : v) p.push_back(s.data());
    p.push_back(nullptr);
    return p;
}

void close_fd(int & fd) {
    if (fd >= 0) ::close(fd);
    fd = -1;
}

// Reads the pipes until both reach end of file; returns false when the
// deadline passes first (or poll fails), leaving the rest unread.
bool drain(int fds_in[2], std::string * sinks[2], std::chrono::steady_clock::time_point deadline) {
    pollfd fds[2] = {{fds_in[0], POLLIN, 0}, {fds_in[1], POLLIN, 0}};
    char buf[65536];
    for (;;) {
        int open_fds = 0;
        for (const pollfd & f : fds) open_fds += f.fd >= 0 ? 1 : 0;
        if (open_fds == 0) return true;
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) return false;
        const int n = ::poll(fds, 2, static_cast<int>(std::min<long long>(left.count(), 1 << 30)));
        if (n < 0 && errno != EINTR) return false;
        if (n <= 0) continue; // interrupted, or the time-out (checked above)
        for (int i = 0; i < 2; ++i) {
            if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
            const ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
            if (got > 0) {
                sinks[i]->append(buf, static_cast<size_t>(got));
            } else if (got == 0 || errno != EINTR) {
                fds_in[i] = -1; // end of file (or a read error): done with this pipe
                ::close(fds[i].fd);
                fds[i].fd = -1;
            }
        }
    }
}

} // namespace

process_result run_process(const std::string & program, const std::vector<std::string> & args,
                           const process_options & opt) {
    process_result r;
    int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
    if (::pipe2(out_pipe, O_CLOEXEC) != 0 || (!opt.merge_stderr && ::pipe2(err_pipe, O_CLOEXEC) != 0)) {
        r.err = "run_process: " + program + ": pipe: " + std::strerror(errno);
        for (int * fd : {&out_pipe[0], &out_pipe[1]}) close_fd(*fd);
        return r;
    }
    // The child: stdin from /dev/null, stdout and stderr into the pipes
    // (dup2 clears close-on-exec on the copies; every other pipe end closes
    // at exec).
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
    posix_spawn_file_actions_adddup2(&fa, opt.merge_stderr ? out_pipe[1] : err_pipe[1], 2);
    std::vector<std::string> argv_s{program};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<std::string> env_s = environment_with(opt.env);
    std::vector<char *> argv = c_strings(argv_s), envp = c_strings(env_s);
    pid_t pid = -1;
    const int rc = ::posix_spawn(&pid, program.c_str(), &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    close_fd(out_pipe[1]);
    close_fd(err_pipe[1]);
    if (rc != 0) {
        close_fd(out_pipe[0]);
        close_fd(err_pipe[0]);
        r.err = "run_process: " + program + ": cannot start: " + std::strerror(rc);
        return r;
    }

    int read_fds[2] = {out_pipe[0], err_pipe[0]};
    std::string * sinks[2] = {&r.out, &r.err};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(opt.timeout_s);
    if (!drain(read_fds, sinks, deadline)) {
        r.timed_out = true;
        ::kill(pid, SIGKILL);
    }
    close_fd(read_fds[0]); // left open only after a time-out
    close_fd(read_fds[1]);

    int st = 0;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(st) && !r.timed_out) r.exit_code = WEXITSTATUS(st);
    if (WIFSIGNALED(st)) r.term_signal = WTERMSIG(st);
    return r;
}

std::vector<std::string> split_args(const std::string & line) {
    std::vector<std::string> out;
    size_t at = 0;
    while ((at = line.find_first_not_of(' ', at)) != std::string::npos) {
        const size_t end = line.find(' ', at);
        out.push_back(line.substr(at, end == std::string::npos ? std::string::npos : end - at));
        at = end;
    }
    return out;
}

} // namespace tessera::test

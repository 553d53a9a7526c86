// tests/support/run_process.hpp — runs a program as a user would (no shell)
// and captures its exit status, stdout and stderr, for the tests that drive
// the `tessera` program and other executables end to end.
#pragma once

#include <string>
#include <vector>

namespace tessera::test {

// What a finished program left.
struct process_result {
    int exit_code = -1;     // exit status 0..255; -1 when it could not start, was killed by a signal or timed out
    int term_signal = 0;    // the signal that ended it (SIGKILL after a time-out), else 0
    bool timed_out = false; // killed after process_options::timeout_s
    std::string out;        // all it wrote to stdout (with merge_stderr: stdout and stderr as written)
    std::string err;        // all it wrote to stderr; when it could not start, why
};

struct process_options {
    // Extra environment entries "NAME=value", replacing same-named entries
    // of this process's environment (which the program otherwise inherits).
    std::vector<std::string> env;
    // Send stderr into the same pipe as stdout (like `2>&1`): out holds
    // both, interleaved as written; err stays empty.
    bool merge_stderr = false;
    // Wall-clock limit in seconds; past it the program is killed (SIGKILL)
    // and the result says timed_out.
    int timeout_s = 600;
};

// Runs `program` (a path, not looked up in PATH) with arguments `args`,
// stdin from /dev/null, and waits for it to end. stdout and stderr are read
// as they arrive (poll), so a program writing much to both never blocks on
// a full pipe. Does not throw for a program that cannot start: exit_code is
// -1 and err names the program and the error.
process_result run_process(const std::string & program, const std::vector<std::string> & args,
                           const process_options & opt = {});

// Splits a command line at spaces into arguments (no quoting or escapes:
// for arguments, such as the tests' paths, that contain no spaces).
std::vector<std::string> split_args(const std::string & line);

} // namespace tessera::test

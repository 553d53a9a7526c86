// `tessera run` and `tessera tokenize` as a user runs them: greedy output on
// stdout byte-identical to prompt + the reference continuation, and clear
// errors with exit code 1 for bad input.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

extern char ** environ;

namespace {

namespace fs = std::filesystem;
const std::string shared_dir = TESSERA_SHARED_DIR;
const std::string tessera_bin = std::string(TESSERA_BINARY_DIR) + "/tessera";

struct result {
    int status = -1; // exit code; -1 when killed by a signal
    std::string out; // stdout
    std::string err; // stderr
};

// Runs tessera with `args` (no shell), capturing stdout and stderr apart.
result run(const std::vector<std::string> & args) {
    result r;
    int out_pipe[2], err_pipe[2];
    if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0) return r;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
    posix_spawn_file_actions_addclose(&fa, out_pipe[0]);
    posix_spawn_file_actions_addclose(&fa, err_pipe[0]);
    std::vector<char *> argv;
    argv.push_back(const_cast<char *>(tessera_bin.c_str()));
    for (const auto & a : args) argv.push_back(const_cast<char *>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, tessera_bin.c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    close(out_pipe[1]);
    close(err_pipe[1]);
    if (rc != 0) {
        close(out_pipe[0]);
        close(err_pipe[0]);
        return r;
    }
    pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
    std::string * sinks[2] = {&r.out, &r.err};
    int open_fds = 2;
    char buf[4096];
    while (open_fds > 0) {
        if (poll(fds, 2, 60000) <= 0) break;
        for (int i = 0; i < 2; ++i) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP))) continue;
            const ssize_t n = read(fds[i].fd, buf, sizeof buf);
            if (n > 0) {
                sinks[i]->append(buf, size_t(n));
            } else {
                close(fds[i].fd);
                fds[i].fd = -1;
                --open_fds;
            }
        }
    }
    for (auto & f : fds) {
        if (f.fd >= 0) close(f.fd);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
}

std::string from_hex(const std::string & hex) {
    std::string out;
    for (size_t i = 0; i + 1 < hex.size(); i += 2) out += char(std::stoi(hex.substr(i, 2), nullptr, 16));
    return out;
}

nlohmann::json reference(const std::string & name) {
    std::ifstream f(shared_dir + "/reference/" + name);
    return nlohmann::json::parse(f);
}

// stdout of a greedy run is exactly the prompt followed by the continuation.
TEST(cli_run, greedy_stdout_is_prompt_plus_reference_continuation) {
    const auto ref = reference("stories260K.f32.json");
    for (const auto & c : ref["cases"]) {
        const std::string prompt = c["prompt"];
        const std::string want = prompt + from_hex(c["greedy_text_hex"]);
        for (const char * batch : {"512", "1"}) {
            const result r = run({"run", "-m", shared_dir + "/models/stories260K.gguf", "-p", prompt, "-n", "64",
                                  "--temp", "0", "-t", "2", "-c", "512", "-b", batch});
            ASSERT_EQ(r.status, 0) << r.err;
            EXPECT_EQ(r.out, want) << "prompt '" << prompt << "' batch " << batch;
            EXPECT_NE(r.err.find("generation: 64 tokens"), std::string::npos) << r.err;
            EXPECT_NE(r.err.find("device: CPU"), std::string::npos) << r.err;
            EXPECT_NE(r.err.find("load time:"), std::string::npos) << r.err;
        }
    }
}

// Same seed, same sampled text; the sampled text differs from greedy.
TEST(cli_run, seeded_sampling_is_reproducible) {
    const std::vector<std::string> args{"run", "-m", shared_dir + "/models/stories260K.gguf", "-p", "Once upon a time",
                                        "-n", "32", "--temp", "1.0", "--top-k", "40", "--top-p", "0.9",
                                        "--min-p", "0.05", "--repeat-penalty", "1.1", "--seed", "42"};
    const result a = run(args);
    const result b = run(args);
    ASSERT_EQ(a.status, 0) << a.err;
    EXPECT_EQ(a.out, b.out);
    EXPECT_EQ(a.out.rfind("Once upon a time", 0), 0u);
}

TEST(cli_tokenize, prints_reference_ids) {
    const auto ref = reference("llama-2-tiny-random.json");
    for (const auto & c : ref["cases"]) {
        const std::string prompt = c["prompt"];
        const result r = run({"tokenize", "-m", shared_dir + "/models/llama-2-tiny-random.gguf", "-p", prompt});
        ASSERT_EQ(r.status, 0) << r.err;
        std::string want;
        for (const auto & id : c["prompt_ids"]) want += (want.empty() ? "" : " ") + std::to_string(id.get<int>());
        EXPECT_EQ(r.out, want + "\n") << prompt;
    }
}

struct bad_case {
    std::vector<std::string> args;
    std::string message; // must appear on stderr
};

TEST(cli_errors, clear_message_and_exit_1) {
    const std::string stories = shared_dir + "/models/stories260K.gguf";
    const fs::path not_gguf = fs::temp_directory_path() / "tessera_cli_not_gguf.txt";
    std::ofstream(not_gguf) << "this is not a GGUF file, just some text\n";
    const std::vector<bad_case> cases = {
        {{"run", "-m", "/nonexistent/m.gguf", "-p", "x"}, "/nonexistent/m.gguf"},
        {{"run", "-m", not_gguf.string(), "-p", "x"}, "tessera_cli_not_gguf.txt"},
        {{"run", "-m", shared_dir + "/models/mnist-fc-f32.gguf", "-p", "x"}, "unsupported architecture 'mnist-fc'"},
        {{"run", "-m", shared_dir + "/vocab/ggml-vocab-llama-spm.gguf", "-p", "x"}, "missing tensor 'token_embd.weight'"},
        {{"run", "-m", stories, "-p", "x", "--device", "NoSuchGPU"}, "unknown device 'NoSuchGPU'"},
        {{"run", "-m", stories, "-p", "x", "-n", "-5"}, "-n"},
        {{"run", "-m", stories, "-p", "x", "--top-p", "2"}, "--top-p"},
        {{"run", "-m", stories, "-p", "x", "-t", "many"}, "-t"},
        {{"run", "-m", stories, "-p", "x", "--bogus"}, "--bogus"},
        {{"run", "-m", stories, "-p", "x", "-c", "100000"}, "exceeds the model's context length 2048"},
        {{"run", "-m", stories, "-p", "Once upon a time there was", "-c", "4"}, "more than the context size 4"},
        {{"run", "-m", stories, "-p", "Once", "-c", "8", "-n", "100", "--temp", "0"}, "context of 8 tokens is full"},
        {{"run", "-p", "x"}, "--model"},
        {{"tokenize", "-m", "/nonexistent/v.gguf", "-p", "x"}, "/nonexistent/v.gguf"},
    };
    for (const auto & c : cases) {
        const result r = run(c.args);
        std::string cmd;
        for (const auto & a : c.args) cmd += a + " ";
        EXPECT_EQ(r.status, 1) << cmd << "\nstderr: " << r.err;
        EXPECT_NE(r.err.find(c.message), std::string::npos) << cmd << "\nstderr: " << r.err;
    }
    fs::remove(not_gguf);
}

} // namespace

// A plugin that calls exit() while it is being loaded ends the program with
// status 70 and a message naming the library and the call (it ended the
// program with the plugin's status, 0 included, and no word), unless that
// happens in the probe process that opens and scores a library first
// (score_probe.hpp): then the library is refused, as is one that crashes or
// hangs there, and the program goes on.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>
#include <tuple>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <string_view>
#include <string>
#include <vector>

#include "backend/plugin_exit_guard.hpp"
#include "backend/score_probe.hpp"
#include "backend/test_support.hpp"
#include "support/run_process.hpp"

namespace tessera::test {
namespace {

// `s` as a POSIX extended regular expression that matches it literally.
std::string regex_quote(const std::string & s) {
    std::string out;
    for (char c : s) {
        if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
        out += c;
    }
    return out;
}

std::string exit_message(const fs::path & lib, const std::string & called, const std::string & during) {
    return "error: backend library '" + lib.string() + "' called " + called + " during " + during +
           "; a backend must report a failure by returning, not end the program";
}

// What this process writes to its stderr (descriptor 2) from construction
// to stop(), read by a forked reader process (not a thread: the probe
// forks only while this process has one): the first `keep` bytes kept, all
// counted, so that a flood is measured without being stored.
class stderr_tap {
public:
    explicit stderr_tap(size_t keep) {
        const std::string kept_path = (dir_.path() / "kept").string();
        const std::string total_path = (dir_.path() / "total").string();
        int p[2];
        if (::pipe2(p, O_CLOEXEC) != 0) return;
        std::fflush(stderr);
        reader_ = ::fork();
        if (reader_ == 0) { // (only calls a fork child of any process may make)
            ::close(p[1]);
            const int file = ::open(kept_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
            char buf[1 << 16];
            size_t total = 0;
            for (;;) {
                const ssize_t n = ::read(p[0], buf, sizeof buf);
                if (n < 0 && errno == EINTR) continue;
                if (n <= 0) break;
                if (total < keep) (void)!::write(file, buf, std::min(static_cast<size_t>(n), keep - total));
                total += static_cast<size_t>(n);
            }
            char number[32];
            const auto end = std::to_chars(number, number + sizeof number, total).ptr;
            const int t = ::open(total_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
            (void)!::write(t, number, static_cast<size_t>(end - number));
            ::_exit(0);
        }
        ::close(p[0]);
        if (reader_ > 0) {
            saved_ = ::fcntl(2, F_DUPFD_CLOEXEC, 3);
            ::dup2(p[1], 2);
        }
        ::close(p[1]);
    }
    ~stderr_tap() { stop(); }

    // Gives descriptor 2 back and waits for the reader (10 s at most: a
    // process still holding the pipe is a failure, not a hang).
    void stop() {
        if (reader_ <= 0) return;
        std::fflush(stderr);
        ::dup2(saved_, 2);
        ::close(saved_);
        int status = 0;
        pid_t r = 0;
        for (int i = 0; i < 1000 && (r = ::waitpid(reader_, &status, WNOHANG)) == 0; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        if (r == 0) {
            ADD_FAILURE() << "something still holds this process's stderr";
            ::kill(reader_, SIGKILL);
            ::waitpid(reader_, &status, 0);
        }
        reader_ = -1;
        std::ifstream in(dir_.path() / "kept", std::ios::binary);
        kept.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        std::string number;
        std::getline(std::ifstream(dir_.path() / "total"), number);
        total = number.empty() ? 0 : std::stoull(number);
    }

    std::string kept; // the first `keep` bytes
    size_t total = 0; // all bytes

private:
    temp_dir dir_;
    pid_t reader_ = -1;
    int saved_ = -1;
};

size_t count_of(const std::string & text, const std::string & part) {
    size_t n = 0;
    for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++n;
    return n;
}

// The probe passes on this much of what its children print (score_probe.cpp).
constexpr size_t k_output_cap = size_t{64} << 10;
const std::string k_dropped_line = "tessera: the plugin probe process wrote more than 64 KiB to stdout and stderr; the ";

// load_best("fakevar") of the fake variants with `helper` as the probe
// helper: its report, the registry's log lines and this process's stderr
// meanwhile.
struct tapped_load {
    load_report rep;
    std::vector<std::string> logged;
    std::unique_ptr<stderr_tap> tap;
};
tapped_load load_fakevar_with_helper(const std::string & helper) {
    tapped_load t;
    detail::set_probe_helper(helper);
    t.tap = std::make_unique<stderr_tap>(1 << 20);
    {
        registry reg;
        reg.set_log([&](std::string_view m) { t.logged.emplace_back(m); });
        t.rep = reg.load_best("fakevar", fake_dir("variants"));
    }
    t.tap->stop();
    detail::set_probe_helper(std::nullopt);
    return t;
}

class PluginExit : public ::testing::Test {
protected:
    void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

// The probe's two kinds of child (score_probe.hpp): the helper program
// tessera-probe started with posix_spawn, and a fork() of the test.
std::string helper_path() { return (fs::path(TESSERA_BINARY_DIR) / "tessera-probe").string(); }

class PluginProbe : public ::testing::TestWithParam<const char *> {
protected:
    void SetUp() override {
        GTEST_FLAG_SET(death_test_style, "threadsafe");
        detail::set_probe_helper(with_helper() ? helper_path() : std::string());
        // Without the helper, a process with other threads scores in-process
        // (the hanging variant would hang the test).
        if (!with_helper() && !detail::probe_may_fork()) {
            GTEST_SKIP() << "this process has more than one thread (a sanitizer's?): no fork probe";
        }
    }
    void TearDown() override { detail::set_probe_helper(std::nullopt); }
    bool with_helper() const { return std::string_view(GetParam()) == "helper"; }
};

// Where the probe cannot run (no helper, another thread running: no
// fork), init runs in this process: its exit(0) ends the program with
// status 70 and the message.
TEST_F(PluginExit, ExitZeroInInitIsAnError) {
    const fs::path lib = fake_plugin("exitinit", "libtessera-fakeexit");
    EXPECT_EXIT(
        {
            detail::set_probe_helper(std::string());
            std::atomic<bool> stop{false};
            std::thread other([&] {
                while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
            });
            registry reg;
            reg.load(lib);
            stop = true;
            other.join();
        },
        ::testing::ExitedWithCode(detail::plugin_exit_status),
        regex_quote(exit_message(lib, "exit(0)", "tessera_backend_init()")));
}

// While variants are scored by load_best: in the probe process, so the
// variant is refused with the status named, and the program goes on.
TEST_P(PluginProbe, ExitInScoreRefusesTheVariant) {
    const fs::path lib = fake_plugin("exitscore", "libtessera-fakeexitscore-v");
    registry reg;
    const load_report rep = reg.load_best("fakeexitscore", fake_dir("exitscore"));
    EXPECT_FALSE(rep.loaded);
    ASSERT_EQ(rep.candidates.size(), 1u);
    EXPECT_EQ(rep.candidates[0].path, lib.string());
    EXPECT_EQ(rep.candidates[0].error,
              "called exit(3) during tessera_backend_score() (in a probe process); a backend must report a failure by "
              "returning, not end the program");
}

// In a constructor that dlopen runs, or in tessera_backend_init: also in
// the probe process, so load throws instead.
TEST_P(PluginProbe, ExitWhileLoadingRefusesTheLibrary) {
    for (const auto & [dir, stem, during] :
         {std::tuple<std::string, std::string, std::string>{"exitctor", "libtessera-fakeexitctor",
                                                             "exit(4) during its initializers (run by dlopen)"},
          {"exitinit", "libtessera-fakeexit", "exit(0) during tessera_backend_init()"}}) {
        SCOPED_TRACE(stem);
        const fs::path lib = fake_plugin(dir, stem);
        registry reg;
        try {
            reg.load(lib);
            FAIL() << "loaded";
        } catch (const error & e) {
            EXPECT_EQ(std::string(e.what()), "backend library '" + lib.string() + "': called " + during +
                                                 " (in a probe process); a backend must report a failure by returning, "
                                                 "not end the program; not loaded");
        }
        EXPECT_TRUE(reg.regs().empty());
    }
}

// A variant whose score crashes (an illegal instruction, as a broken
// build's machine code), never returns, or writes into the probe's pipe,
// or whose tessera_backend_init crashes or never returns, is refused from
// the probe process, and load_best loads the good variant below them; the
// host never ran their code. load on the crashing ones throws.
TEST_P(PluginProbe, CrashingAndHangingVariantsAreRefused) {
    const double saved = detail::probe_timeout_s();
    detail::set_probe_timeout_s(1.5);
    registry reg;
    const load_report rep = reg.load_best("crashy", fake_dir("crashy"));
    detail::set_probe_timeout_s(saved);
    ASSERT_TRUE(rep.loaded);
    EXPECT_EQ(rep.loaded.path(), fake_plugin("crashy", "libtessera-crashy-ok").string());
    ASSERT_EQ(rep.candidates.size(), 6u);
    for (const load_candidate & c : rep.candidates) {
        SCOPED_TRACE(c.path);
        if (c.path == fake_plugin("crashy", "libtessera-crashy-trap").string()) {
            EXPECT_EQ(c.error.rfind("crashed while being opened and scored (in a probe process: signal 4, ", 0), 0u)
                << c.error;
        } else if (c.path == fake_plugin("crashy", "libtessera-crashy-hang").string()) {
            EXPECT_EQ(c.error, "did not finish opening and scoring within 1.5 s (in a probe process, killed)");
        } else if (c.path == fake_plugin("crashy", "libtessera-crashy-inittrap").string()) {
            EXPECT_EQ(c.error.rfind("crashed in tessera_backend_init() (in a probe process: signal 4, ", 0), 0u)
                << c.error;
        } else if (c.path == fake_plugin("crashy", "libtessera-crashy-inithang").string()) {
            EXPECT_EQ(c.error, "did not finish tessera_backend_init() within 1.5 s (in a probe process, killed)");
        } else if (c.path == fake_plugin("crashy", "libtessera-crashy-forge").string()) {
            // Its bytes look like a result for it; the child's own result then
            // comes out of order.
            EXPECT_EQ(c.error, "broke the probe process's report pipe (a record out of order; killed)");
        } else {
            EXPECT_EQ(c.score, 1);
        }
    }
    for (const char * stem : {"libtessera-crashy-trap", "libtessera-crashy-inittrap"}) {
        registry other;
        const fs::path trap = fake_plugin("crashy", stem);
        try {
            other.load(trap);
            FAIL() << "loaded " << stem;
        } catch (const error & e) {
            const std::string want = "backend library '" + trap.string() + "': crashed " +
                                     (std::string(stem).ends_with("inittrap") ? "in tessera_backend_init()"
                                                                              : "while being opened and scored") +
                                     " (in a probe process: signal 4, ";
            EXPECT_EQ(std::string(e.what()).rfind(want, 0), 0u) << e.what();
            EXPECT_TRUE(std::string(e.what()).ends_with("); not loaded")) << e.what();
        }
        EXPECT_TRUE(other.regs().empty());
    }
}

// With a second thread running and no helper, the probe does not fork (a
// child of a multi-threaded process may block on a lock another thread
// held): the variant is scored in this process as before, and its exit()
// ends the program with status 70 and the message. The helper is a fresh
// process: it probes whatever threads run, and the variant is refused.
TEST_P(PluginProbe, WithAnotherThreadRunning) {
    const fs::path lib = fake_plugin("exitscore", "libtessera-fakeexitscore-v");
    if (with_helper()) {
        std::atomic<bool> stop{false};
        std::thread other([&] {
            while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        });
        registry reg;
        const load_report rep = reg.load_best("fakeexitscore", fake_dir("exitscore"));
        stop = true;
        other.join();
        EXPECT_FALSE(rep.loaded);
        ASSERT_EQ(rep.candidates.size(), 1u);
        EXPECT_EQ(rep.candidates[0].error,
                  "called exit(3) during tessera_backend_score() (in a probe process); a backend must report a failure "
                  "by returning, not end the program");
        return;
    }
    EXPECT_EXIT(
        {
            std::atomic<bool> stop{false};
            std::thread other([&] {
                while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
            });
            registry reg;
            reg.load_best("fakeexitscore", fake_dir("exitscore"));
            stop = true;
            other.join();
        },
        ::testing::ExitedWithCode(detail::plugin_exit_status),
        regex_quote(exit_message(lib, "exit(3)", "tessera_backend_score()")));
}

// Zeroes the bytes of section .text in the 64-bit little-endian ELF file
// at `path` (ELF section headers: e_shoff at 0x28, e_shentsize, e_shnum and
// e_shstrndx at 0x3a; sh_name, sh_offset at +0x18, sh_size at +0x20).
// Returns the bytes zeroed (0: no such section).
size_t zero_text(const fs::path & path) {
    std::ifstream in(path, std::ios::binary);
    std::vector<char> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto u16 = [&](size_t o) { uint16_t v; std::memcpy(&v, b.data() + o, 2); return v; };
    auto u32 = [&](size_t o) { uint32_t v; std::memcpy(&v, b.data() + o, 4); return v; };
    auto u64 = [&](size_t o) { uint64_t v; std::memcpy(&v, b.data() + o, 8); return v; };
    if (b.size() < 0x40) return 0;
    const uint64_t shoff = u64(0x28);
    const uint16_t shentsize = u16(0x3a), shnum = u16(0x3c), shstrndx = u16(0x3e);
    if (shoff + uint64_t(shnum) * shentsize > b.size() || shstrndx >= shnum) return 0;
    const uint64_t strtab = u64(shoff + size_t(shstrndx) * shentsize + 0x18);
    for (uint16_t i = 0; i < shnum; ++i) {
        const size_t h = shoff + size_t(i) * shentsize;
        const uint64_t name = strtab + u32(h);
        if (name + 6 > b.size() || std::memcmp(b.data() + name, ".text", 6) != 0) continue;
        const uint64_t off = u64(h + 0x18), size = u64(h + 0x20);
        if (off + size > b.size()) return 0;
        std::fill(b.begin() + std::ptrdiff_t(off), b.begin() + std::ptrdiff_t(off + size), 0);
        std::ofstream(path, std::ios::binary | std::ios::trunc).write(b.data(), std::streamsize(b.size()));
        return size_t(size);
    }
    return 0;
}

// A variant whose machine code is zeroes (a damaged build: every ELF check
// passes, its first instruction faults) is refused from the probe process,
// and the good variant is loaded. This crashed the host before.
TEST_P(PluginProbe, AVariantWithZeroedCodeIsRefused) {
    temp_dir tmp;
    const fs::path good = fake_plugin("crashy", "libtessera-crashy-ok");
    const fs::path zeroed = tmp.path() / "libtessera-crashy-zeroed.so";
    fs::copy_file(good, zeroed);
    fs::copy_file(good, tmp.path() / "libtessera-crashy-ok.so");
    ASSERT_GT(zero_text(zeroed), 0u);
    // (It dies in its initializers or its score: both run only in the probe.)
    registry reg;
    const load_report rep = reg.load_best("crashy", tmp.path());
    ASSERT_TRUE(rep.loaded);
    EXPECT_EQ(rep.loaded.path(), (tmp.path() / "libtessera-crashy-ok.so").string());
    bool seen = false;
    for (const load_candidate & c : rep.candidates) {
        if (c.path != zeroed.string()) continue;
        seen = true;
        // A signal; under AddressSanitizer its handler reports the fault and
        // exits with status 1.
        const bool crashed = c.error.rfind("crashed while being opened and scored (in a probe process: signal ", 0) == 0 ||
                             c.error.rfind("ended the probe process with status 1 ", 0) == 0;
        EXPECT_TRUE(crashed) << c.error;
        EXPECT_FALSE(is_loaded(zeroed));
    }
    EXPECT_TRUE(seen);
}

// What a library prints to stdout or stderr while it is scored reaches the
// host's stderr (through the probe's pipe, from a helper and from a fork
// child alike), once; stdout would be the program's output. (Its score is
// 0: this process does not open it.)
TEST_P(PluginProbe, WhatALibraryPrintsWhileScoredIsOnStderr) {
    stderr_tap tap(1 << 20);
    registry reg;
    const load_report rep = reg.load_best("printing", fake_dir("printing"));
    tap.stop();
    EXPECT_FALSE(rep.loaded);
    ASSERT_EQ(rep.candidates.size(), 1u);
    EXPECT_EQ(rep.candidates[0].score, 0);
    EXPECT_EQ(rep.candidates[0].error, "score 0: not supported on this system");
    EXPECT_EQ(count_of(tap.kept, "printing: scored, on stdout\n"), 1u) << tap.kept;
    EXPECT_EQ(count_of(tap.kept, "printing: scored, on stderr\n"), 1u) << tap.kept;
    EXPECT_EQ(tap.kept.find("tessera: the plugin probe"), std::string::npos) << tap.kept;
}

INSTANTIATE_TEST_SUITE_P(Child, PluginProbe, ::testing::Values("helper", "fork"),
                         [](const ::testing::TestParamInfo<const char *> & info) { return std::string(info.param); });

// A helper that is not one (another program, one that fails to start, one
// that writes something else first): no library is blamed; the probe forks
// instead (single-threaded) and the crashy family comes out as it does
// with either child.
TEST_F(PluginExit, AHelperThatIsNotOneIsPassedOver) {
    if (!detail::probe_may_fork()) GTEST_SKIP() << "this process has more than one thread (a sanitizer's?): no fork probe";
    temp_dir tmp;
    const fs::path chatty = tmp.path() / "chatty";
    std::ofstream(chatty) << "#!/bin/sh\necho 'not a probe child' >&3\n"; // into the report pipe
    fs::permissions(chatty, fs::perms::owner_all);
    const fs::path plain = tmp.path() / "plain";
    std::ofstream(plain) << "not a program\n";
    // A greeting (index -1, kind 0, protocol 0x74737202, length 0), then
    // bytes that are no record: it never starts on a library.
    const fs::path greets = tmp.path() / "greets";
    std::ofstream(greets) << "#!/bin/sh\nprintf '\\377\\377\\377\\377\\000\\000\\000\\000\\002\\162\\163\\164"
                             "\\000\\000\\000\\000garbage garbage garbage ' >&3\nsleep 1\n";
    fs::permissions(greets, fs::perms::owner_all);
    // A helper of protocol 1 (from another build: no init records), taken
    // for another program.
    const fs::path old_helper = tmp.path() / "old";
    std::ofstream(old_helper) << "#!/bin/sh\nprintf '\\377\\377\\377\\377\\000\\000\\000\\000\\001\\162\\163\\164"
                                 "\\000\\000\\000\\000' >&3\nsleep 1\n";
    fs::permissions(old_helper, fs::perms::owner_all);
    const fs::path mute = tmp.path() / "mute";
    const fs::path mute_child = tmp.path() / "mute-child";
    std::ofstream(mute) << "#!/bin/sh\nsleep 30 &\necho $! > '" << mute_child.string() << "'\nwait\n";
    fs::permissions(mute, fs::perms::owner_all);
    const double saved = detail::probe_timeout_s();
    detail::set_probe_timeout_s(1.5);
    // Each helper, and the one line the registry logs about it.
    const std::string instead = "; backend libraries are probed in a fork of this process instead";
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"/bin/true", "ended without greeting as a probe helper"},
        {chatty.string(), "is not a probe helper (it wrote something else)"},
        {plain.string(), "could not be started (Permission denied)"},
        {(tmp.path() / "none").string(), "could not be started (No such file or directory)"},
        {greets.string(), "broke the probe protocol before probing a library (a record of "},
        {old_helper.string(), "is not a probe helper (it wrote something else)"},
        {mute.string(), "did not greet as a probe helper within 1.5 s"},
    };
    for (const auto & [helper, why] : cases) {
        SCOPED_TRACE(helper);
        detail::set_probe_helper(helper);
        registry reg;
        std::vector<std::string> logged;
        reg.set_log([&](std::string_view m) { logged.emplace_back(m); });
        const load_report rep = reg.load_best("crashy", fake_dir("crashy"));
        const std::string head = "plugin probe helper '" + helper + "' " + why;
        const auto note = std::find_if(logged.begin(), logged.end(), [&](const std::string & m) {
            return m.rfind(head, 0) == 0 && m.size() > instead.size() && m.compare(m.size() - instead.size(), instead.size(), instead) == 0;
        });
        EXPECT_NE(note, logged.end()) << ::testing::PrintToString(logged);
        EXPECT_EQ(std::count_if(logged.begin(), logged.end(), [](const std::string & m) { return m.rfind("plugin probe helper", 0) == 0; }), 1);
        ASSERT_TRUE(rep.loaded);
        EXPECT_EQ(rep.loaded.path(), fake_plugin("crashy", "libtessera-crashy-ok").string());
        ASSERT_EQ(rep.candidates.size(), 6u);
        for (const load_candidate & c : rep.candidates) {
            if (c.path == fake_plugin("crashy", "libtessera-crashy-trap").string()) {
                EXPECT_EQ(c.error.rfind("crashed while being opened and scored (in a probe process: signal 4, ", 0), 0u)
                    << c.error;
            }
        }
    }
    detail::set_probe_helper(std::nullopt);
    detail::set_probe_timeout_s(saved);
    // The mute helper's `sleep` was killed with it (its process group), not
    // left running: gone, or a zombie where no init reaps it.
    std::string sleep_pid;
    std::getline(std::ifstream(mute_child), sleep_pid);
    ASSERT_FALSE(sleep_pid.empty());
    std::string stat;
    std::getline(std::ifstream("/proc/" + sleep_pid + "/stat"), stat);
    const size_t paren = stat.rfind(')');
    EXPECT_TRUE(stat.empty() || (paren != std::string::npos && stat.compare(paren, 3, ") Z") == 0)) << stat;
}

// The helper starts in a process group of its own (killed as a group; a
// Ctrl-C for the host's group does not reach it), with stdin on /dev/null
// and stdout and stderr on a pipe that the host passes on to its stderr
// (what a library prints while probed stays out of the program's output).
TEST_F(PluginExit, TheHelperHasItsOwnGroupAndStandardDescriptors) {
    temp_dir tmp;
    const fs::path info = tmp.path() / "info";
    const fs::path wrap = tmp.path() / "wrap";
    std::ofstream(wrap) << "#!/bin/sh\ng=$(cut -d' ' -f5 /proc/$$/stat); i=$(readlink /proc/$$/fd/0); o=$(readlink /proc/$$/fd/1)\n"
                        << "e=$(readlink /proc/$$/fd/2)\n"
                        << "printf '%s\\n%s\\n%s\\n%s\\n%s\\n' $$ \"$g\" \"$i\" \"$o\" \"$e\" > '" << info.string() << "'\n"
                        << "echo 'wrap: a line on stdout'\necho 'wrap: a line on stderr' >&2\nexec '" << helper_path()
                        << "' \"$@\"\n";
    fs::permissions(wrap, fs::perms::owner_all);
    detail::set_probe_helper(wrap.string());
    stderr_tap tap(1 << 20);
    registry reg;
    const load_report rep = reg.load_best("fakevar", fake_dir("variants"));
    tap.stop();
    detail::set_probe_helper(std::nullopt);
    ASSERT_TRUE(rep.loaded);
    std::ifstream in(info);
    std::string pid, pgrp, fd0, fd1, fd2;
    std::getline(in, pid);
    std::getline(in, pgrp);
    std::getline(in, fd0);
    std::getline(in, fd1);
    std::getline(in, fd2);
    EXPECT_FALSE(pid.empty());
    EXPECT_EQ(pgrp, pid);
    EXPECT_NE(pgrp, std::to_string(::getpgrp()));
    EXPECT_EQ(fd0, "/dev/null");
    EXPECT_EQ(fd1.rfind("pipe:", 0), 0u) << fd1;
    EXPECT_EQ(fd2, fd1);
    char target[4096];
    const ssize_t n = ::readlink("/proc/self/fd/2", target, sizeof target);
    ASSERT_GT(n, 0);
    EXPECT_NE(fd1, std::string(target, static_cast<size_t>(n)));
    EXPECT_EQ(tap.kept.rfind("wrap: a line on stdout\nwrap: a line on stderr\n", 0), 0u) << tap.kept;
}

// A helper that prints without end (another program: /bin/yes) gets 64 KiB
// of it onto the host's stderr, then one line saying how much more was
// dropped; it is passed over as one that did not greet, and the libraries
// are probed without it. (The whole flood reached the terminal: 6.3 GB in
// the 5 s before the greeting limit.)
TEST_F(PluginExit, AHelperThatPrintsWithoutEndIsCapped) {
    if (!fs::exists("/bin/yes")) GTEST_SKIP() << "no /bin/yes";
    const double saved = detail::probe_timeout_s();
    detail::set_probe_timeout_s(1.5);
    const tapped_load t = load_fakevar_with_helper("/bin/yes");
    const load_report & rep = t.rep;
    const std::vector<std::string> & logged = t.logged;
    const stderr_tap & tap = *t.tap;
    detail::set_probe_timeout_s(saved);
    EXPECT_LT(tap.total, k_output_cap + 4096);
    EXPECT_EQ(count_of(tap.kept, k_dropped_line), 1u) << tap.kept.substr(tap.kept.size() - std::min<size_t>(tap.kept.size(), 400));
    // yes repeats its arguments: the report descriptor, the first index, the paths.
    EXPECT_EQ(tap.kept.find(" 0 " + fake_dir("variants").string()), 1u) << tap.kept.substr(0, 200);
    EXPECT_EQ(std::count_if(logged.begin(), logged.end(), [](const std::string & m) {
                  return m.rfind("plugin probe helper '/bin/yes' did not greet as a probe helper within 1.5 s; ", 0) == 0;
              }),
              1)
        << ::testing::PrintToString(logged);
    ASSERT_TRUE(rep.loaded);
    EXPECT_EQ(rep.loaded.path(), fake_plugin("variants", "libtessera-fakevar-high").string());
}

// One that prints 4 MiB before it goes on as the helper is read all along
// (not blocked on a full pipe, and then taken for one that hangs): it
// probes the libraries, its first lines are on stderr, and the line at the
// end counts exactly the bytes dropped.
TEST_F(PluginExit, AHelperThatPrintsMuchFirstIsNotHeldUp) {
    temp_dir tmp;
    const fs::path wrap = tmp.path() / "wrap";
    const std::string first = "wrap: a line on stdout\n", second = "wrap: a line on stderr\n";
    const size_t flood = size_t{4} << 20;
    std::ofstream(wrap) << "#!/bin/sh\necho 'wrap: a line on stdout'\necho 'wrap: a line on stderr' >&2\n"
                        << "yes 'wrap: flood' | head -c " << flood << "\nexec '" << helper_path() << "' \"$@\"\n";
    fs::permissions(wrap, fs::perms::owner_all);
    const tapped_load t = load_fakevar_with_helper(wrap.string());
    const load_report & rep = t.rep;
    const std::vector<std::string> & logged = t.logged;
    const stderr_tap & tap = *t.tap;
    EXPECT_EQ(std::count_if(logged.begin(), logged.end(), [](const std::string & m) { return m.rfind("plugin probe helper", 0) == 0; }), 0)
        << ::testing::PrintToString(logged);
    ASSERT_TRUE(rep.loaded);
    EXPECT_EQ(rep.loaded.path(), fake_plugin("variants", "libtessera-fakevar-high").string());
    EXPECT_EQ(tap.kept.rfind(first + second + "wrap: flood\n", 0), 0u) << tap.kept.substr(0, 200);
    EXPECT_LT(tap.total, k_output_cap + 4096);
    const size_t dropped = first.size() + second.size() + flood - k_output_cap;
    EXPECT_EQ(count_of(tap.kept, k_dropped_line + std::to_string(dropped) + " bytes after that were dropped\n"), 1u)
        << tap.kept.substr(tap.kept.size() - std::min<size_t>(tap.kept.size(), 400));
}

// Libraries are probed in groups at the same time (score_probe.hpp): four
// copies of the hanging variant beside the good one are refused after about
// one time limit together, where in turn they took four (6 s at least
// here), and the good variant is loaded; by helpers, and by forks.
TEST_P(PluginProbe, HangingVariantsAreProbedAtTheSameTime) {
    temp_dir tmp;
    const fs::path hang = fake_plugin("crashy", "libtessera-crashy-hang");
    for (int i = 0; i < 4; ++i) fs::copy_file(hang, tmp.path() / ("libtessera-crashy-hang" + std::to_string(i) + ".so"));
    const fs::path ok = tmp.path() / "libtessera-crashy-ok.so";
    fs::copy_file(fake_plugin("crashy", "libtessera-crashy-ok"), ok);
    const double saved = detail::probe_timeout_s();
    detail::set_probe_timeout_s(1.5);
    registry reg;
    const auto t0 = std::chrono::steady_clock::now();
    const load_report rep = reg.load_best("crashy", tmp.path());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    detail::set_probe_timeout_s(saved);
    ASSERT_TRUE(rep.loaded);
    EXPECT_EQ(rep.loaded.path(), ok.string());
    ASSERT_EQ(rep.candidates.size(), 5u);
    int refused = 0;
    for (const load_candidate & c : rep.candidates) {
        if (c.path == ok.string()) {
            EXPECT_EQ(c.score, 1);
            continue;
        }
        EXPECT_EQ(c.error, "did not finish opening and scoring within 1.5 s (in a probe process, killed)") << c.path;
        ++refused;
    }
    EXPECT_EQ(refused, 4);
    EXPECT_GE(seconds, 1.5);
    EXPECT_LT(seconds, 4.5) << "the hanging variants were probed one after another";
}

// load_all probes the variants of every family in one call: three
// families whose one variant hangs in its score (copies of crashy's hang
// variant under other family names, in a TESSERA_BACKEND_PATH folder) are
// refused after about one time limit together, where one family after
// another took one each (4.5 s at least here; five hanging GPU-driver
// plugins took 2.5 minutes on every command).
TEST_P(PluginProbe, HangingVariantsOfSeveralFamiliesCostOneTimeLimit) {
    temp_dir tmp;
    const fs::path hang = fake_plugin("crashy", "libtessera-crashy-hang");
    for (const char * fam : {"hanga", "hangb", "hangc"}) {
        fs::copy_file(hang, tmp.path() / (std::string("libtessera-") + fam + "-x.so"));
    }
    const double saved = detail::probe_timeout_s();
    detail::set_probe_timeout_s(1.5);
    registry reg;
    ASSERT_EQ(setenv("TESSERA_BACKEND_PATH", tmp.path().c_str(), 1), 0);
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<load_report> reports = reg.load_all(tmp.path());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    unsetenv("TESSERA_BACKEND_PATH");
    detail::set_probe_timeout_s(saved);
    int refused = 0;
    for (const load_report & rep : reports) {
        if (rep.name.rfind("hang", 0) != 0) continue;
        EXPECT_FALSE(rep.loaded) << rep.name;
        ASSERT_EQ(rep.candidates.size(), 1u) << rep.name;
        EXPECT_NE(rep.candidates[0].error.find("within 1.5 s"), std::string::npos) << rep.candidates[0].error;
        ++refused;
    }
    EXPECT_EQ(refused, 3);
    EXPECT_GE(seconds, 1.5);
    EXPECT_LT(seconds, 4.0) << "the families' hanging variants were probed one family after another";
}

// The same for libraries that hang while being closed (a destructor that
// never returns, after their score came), and behind libraries that are
// slow but fine (300 ms each: each hands the rest on, and its group ends
// after it, so the slow ones do not use up the groups that run at once).
TEST_P(PluginProbe, SlowAndUnloadHangingVariantsAreProbedAtTheSameTime) {
    const double saved = detail::probe_timeout_s();
    detail::set_probe_timeout_s(1.5);
    for (const int n_slow : {0, 9}) {
        SCOPED_TRACE(std::to_string(n_slow) + " slow variants first");
        temp_dir tmp;
        // Named so that the folder lists them slow ones first (a, b), then the good one (z).
        for (int i = 0; i < n_slow; ++i) {
            fs::copy_file(fake_plugin("slowprobe", "libtessera-slowprobe-slow"), tmp.path() / ("libtessera-slowprobe-a" + std::to_string(i) + ".so"));
        }
        for (int i = 0; i < 4; ++i) {
            fs::copy_file(fake_plugin("slowprobe", "libtessera-slowprobe-unloadhang"), tmp.path() / ("libtessera-slowprobe-b" + std::to_string(i) + ".so"));
        }
        const fs::path ok = tmp.path() / "libtessera-slowprobe-z.so";
        fs::copy_file(fake_plugin("slowprobe", "libtessera-slowprobe-ok"), ok);
        registry reg;
        const auto t0 = std::chrono::steady_clock::now();
        const load_report rep = reg.load_best("slowprobe", tmp.path());
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        ASSERT_EQ(rep.candidates.size(), static_cast<size_t>(n_slow + 5));
        int scored_slow = 0, refused = 0;
        for (const load_candidate & c : rep.candidates) {
            const std::string leaf = fs::path(c.path).filename().string();
            if (leaf.find("-a") != std::string::npos) {
                EXPECT_EQ(c.score, 3) << c.path << ": " << c.error;
                ++scored_slow;
            } else if (leaf.find("-b") != std::string::npos) {
                EXPECT_NE(c.error.find("within 1.5 s"), std::string::npos) << c.path << ": " << c.error;
                ++refused;
            }
        }
        EXPECT_EQ(scored_slow, n_slow);
        EXPECT_EQ(refused, 4);
        // The slow ones are the best: one of them is loaded.
        ASSERT_TRUE(rep.loaded);
        EXPECT_EQ(rep.loaded.path(), n_slow > 0 ? rep.candidates[0].path : ok.string());
        // In turn: 9 x 0.3 + 4 x 1.5 = 8.7 s; side by side about 4.5 s with
        // the slow ones, 2.4 s without.
        EXPECT_LT(seconds, n_slow > 0 ? 6.5 : 4.5) << "the hanging variants were probed one after another";
    }
    detail::set_probe_timeout_s(saved);
}

// Paths beyond what one command line takes (here 300 copies of a variant
// in a folder with a 600-byte name: 190 KiB of paths) are probed by
// successive helpers: every copy is scored.
TEST_F(PluginExit, ManyLongPathsAreProbedByHelpersInTurn) {
    temp_dir tmp;
    fs::path dir = tmp.path();
    for (int i = 0; i < 6; ++i) dir /= std::string(99, char('a' + i));
    fs::create_directories(dir);
    const fs::path ok = fake_plugin("variants", "libtessera-fakevar-high");
    for (int i = 0; i < 300; ++i) fs::copy_file(ok, dir / ("libtessera-fakevar-v" + std::to_string(1000 + i) + ".so"));
    detail::set_probe_helper(helper_path());
    registry reg;
    const load_report rep = reg.load_best("fakevar", dir);
    detail::set_probe_helper(std::nullopt);
    ASSERT_TRUE(rep.loaded);
    ASSERT_EQ(rep.candidates.size(), 300u);
    for (const load_candidate & c : rep.candidates) EXPECT_EQ(c.score, 7) << c.path << ": " << c.error;
}

// The helper run by hand (or with a descriptor that is not open) says what
// it is and exits with 64, opening nothing.
TEST_F(PluginExit, TheHelperRunByHandSaysWhatItIs) {
    for (const std::vector<std::string> & args :
         {std::vector<std::string>{}, {"3"}, {"x", "0", "/nonexistent.so"}, {"987", "0", "/nonexistent.so"},
          {"2", "0"}, {" 3", "0", "a.so"}, {"+3", "0", "a.so"}, {"3", "-0", "a.so"}}) {
        const process_result r = run_process(helper_path(), args);
        EXPECT_EQ(r.exit_code, 64) << r.err;
        EXPECT_NE(r.err.find("tessera-probe: opens and scores tessera backend plugins for the program that starts it"),
                  std::string::npos)
            << r.err;
    }
}

// An exit() outside a call into a plugin, after one was loaded, keeps its
// status and says nothing.
TEST_F(PluginExit, OrdinaryExitAfterLoadingIsUntouched) {
    EXPECT_EXIT(
        {
            registry reg;
            reg.load(fake_plugin("gpu", "libtessera-fakegpu"));
            std::exit(0);
        },
        ::testing::ExitedWithCode(0), "^$");
    EXPECT_EXIT(
        {
            registry reg;
            reg.load(fake_plugin("gpu", "libtessera-fakegpu"));
            std::exit(5);
        },
        ::testing::ExitedWithCode(5), "^$");
}

} // namespace
} // namespace tessera::test

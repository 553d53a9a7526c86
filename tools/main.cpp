// tools/main.cpp — the `tessera` command line program.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <functional>
#include <optional>
#include <exception>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <fmt/core.h>

#include "build_info.hpp"
#include "commands.hpp"
#include "tessera/core/error.hpp"
#include "tessera/core/printable.hpp"
#ifdef TESSERA_HAVE_CMD_GGUF
#include "tessera/gguf/reader.hpp"
#endif
#ifdef TESSERA_HAVE_CMD_DEVICES
#include "devices.hpp"
#endif

namespace {

// The argument where a command that needs a subcommand got something else
// ("tessera nosuch", "tessera gguf bogus", "tessera --bogus"), with the
// command it was given to; empty when there is none (CLI11 reports these
// only as "A subcommand is required", without the argument).
std::pair<std::string, std::string> unknown_subcommand(CLI::App & app, int argc, char ** argv) {
    CLI::App * cur = &app;
    std::string where = "tessera";
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help" || a == "--version") return {};
        CLI::App * next = nullptr;
        for (CLI::App * sub : cur->get_subcommands([](CLI::App *) { return true; })) {
            if (sub->check_name(a)) next = sub;
        }
        if (next == nullptr) return cur->get_require_subcommand_min() > 0 ? std::pair{a, where} : std::pair<std::string, std::string>{};
        cur = next;
        where += " " + a;
    }
    return {};
}

// The deepest subcommand the parse chose (the app itself when none).
CLI::App * parsed_app(CLI::App & app) {
    for (CLI::App * cur = &app;;) {
        CLI::App * next = nullptr;
        for (CLI::App * sub : cur->get_subcommands([](CLI::App * s) { return s->parsed(); })) next = sub;
        if (next == nullptr) return cur;
        cur = next;
    }
}

// CLI11's message for e, reworded where it reads as the library's rather
// than the command's: a missing subcommand lists the choices, an option
// given more often than it takes says so, a value that does not convert
// names the option and the value (a flag: what it takes).
std::string parser_message(CLI::App & app, const CLI::ParseError & e) {
    const std::string what = e.what();
    // "Could not convert: --pieces = banana"
    if (const std::string_view conv = "Could not convert: "; what.rfind(conv, 0) == 0) {
        if (const size_t eq = what.find(" = ", conv.size()); eq != std::string::npos) {
            const std::string name = what.substr(conv.size(), eq - conv.size()), value = what.substr(eq + 3);
            // The option, wherever it is (the subcommand whose parse failed
            // may not count as parsed): a flag by that name anywhere.
            bool flag = false;
            const std::function<void(CLI::App *)> find = [&](CLI::App * a) {
                if (const CLI::Option * opt = a->get_option_no_throw(name); opt != nullptr && opt->get_expected_max() == 0) flag = true;
                for (CLI::App * sub : a->get_subcommands([](CLI::App *) { return true; })) find(sub);
            };
            find(&app);
            if (flag) {
                return name + " '" + value + "': a flag takes no value, or true or false";
            }
            return name + " '" + value + "': not a value this option takes";
        }
    }
    if (what == "A subcommand is required") {
        std::string names;
        for (CLI::App * sub : parsed_app(app)->get_subcommands([](CLI::App *) { return true; })) {
            names += (names.empty() ? "" : ", ") + sub->get_name();
        }
        return "a subcommand is required: " + names;
    }
    // "--n-predict: At Most 1 required but received 2"
    const std::string_view most = "At Most ", but = " required but received ";
    if (const size_t at = what.find(most), b = what.find(but); at != std::string::npos && b != std::string::npos && b > at) {
        const std::string n = what.substr(at + most.size(), b - at - most.size()), got = what.substr(b + but.size());
        return what.substr(0, at) + (n == "1" ? "takes one value" : "takes at most " + n + " values") + ", but was given " + got;
    }
    return what;
}

// The subcommands the parse chose, from the app down ("tessera gguf info").
std::string parsed_command(CLI::App & app) {
    std::string names;
    for (const CLI::App * cur = parsed_app(app); cur != &app; cur = cur->get_parent()) names = " " + cur->get_name() + names;
    return "tessera" + names;
}

// An argument nobody takes, the command it was given to ("tessera
// bench"), and whether it reads as an option ('-...' before any "--";
// after "--" every argument is a value).
struct unexpected {
    std::string arg, where;
    bool option = false;
};

// For a parse that left arguments nobody takes (CLI::ExtrasError): the
// first of them in command-line order, an option before any stray value
// (which may be empty: `run -m M ''`). Nothing when there are none.
std::optional<unexpected> unexpected_argument(CLI::App & app, int argc, char ** argv) {
    const std::string where = parsed_command(app);
    const std::vector<std::string> extras = app.remaining(true);
    // Which arguments are the extras (a subsequence of argv, in order):
    // matched from the end, so that an extra after "--" spelled like an
    // option given before it (`-p hi -- -p`) is taken for the value it is.
    std::vector<char> extra(static_cast<size_t>(argc), 0);
    for (int i = argc - 1, k = static_cast<int>(extras.size()) - 1; i >= 1 && k >= 0; --i) {
        if (extras[static_cast<size_t>(k)] == argv[i]) {
            extra[static_cast<size_t>(i)] = 1;
            --k;
        }
    }
    std::optional<std::string> stray;
    bool values_only = false; // past "--"
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--" && !values_only) {
            values_only = true;
            continue;
        }
        if (extra[static_cast<size_t>(i)] == 0) continue;
        if (!values_only && a.size() > 1 && a[0] == '-') return unexpected{a, where, true};
        if (!stray) stray = a;
    }
    if (!stray) return std::nullopt;
    return unexpected{*stray, where, false};
}

// llama-bench's one-dash multi-letter options that bench takes, with the
// long names main() gives them for CLI11.
char k_flash_attn_long[] = "--flash-attn", k_repack_long[] = "--repack", k_prompt_gen_long[] = "--pg",
     k_ubatch_long[] = "--ubatch-size", k_ctk_long[] = "--cache-type-k", k_ctv_long[] = "--cache-type-v",
     k_ngl_long[] = "--n-gpu-layers", k_output_err_long[] = "--output-err";
const std::pair<std::string_view, char *> k_bench_spellings[] = {
    {"-fa", k_flash_attn_long}, {"-rp", k_repack_long}, {"-pg", k_prompt_gen_long}, {"-ub", k_ubatch_long},
    {"-ctk", k_ctk_long},       {"-ctv", k_ctv_long},   {"-ngl", k_ngl_long},       {"-oe", k_output_err_long}};

// True when option `name` ("-n", "--model") of `app` or of an app above it
// (fallthrough) takes a value, so that the next argument is that value.
bool takes_value(CLI::App * app, std::string_view name) {
    for (CLI::App * c = app; c != nullptr; c = c->get_parent()) {
        // (Flags expect no items; CLI11 2.1 gives them a type size of 1.)
        if (const CLI::Option * o = c->get_option_no_throw(std::string(name)); o != nullptr) return o->get_items_expected_min() > 0;
    }
    return false;
}

// A one-dash argument of more than two characters whose third is not part
// of a number ("-ts", "-mg", "-fa" for run, "-p=x"), with the command it was
// given to; an empty arg when there is none. CLI11 reads such a
// token as a one-letter option with its value glued on ("-ts" as "-t s",
// "-mg" as "-m g"), which turns the other tool's options (llama-bench's
// "-ts", "-mg", "-nkvo"...) into wrong values rather than unknown options.
// Glued numbers ("-t2", "-n-1") still reach CLI11, and so do the values of
// options that take one ("-p -ts" is a prompt, "-p --" too), everything
// after "--", and any command line with -h, --help or --version (CLI11
// answers those first).
struct glued {
    std::string arg, where;
    std::string hint; // " (an option's value goes after a space: ...)" or empty
};
glued glued_option(CLI::App & app, int argc, char ** argv) {
    CLI::App * cur = &app;
    std::string where = "tessera";
    bool value_next = false; // argv[i] is the value of the option before it
    for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        if (value_next) {
            value_next = false;
            continue;
        }
        if (a == "--") break;
        if (a == "-h" || a == "--help" || a == "--version") return {};
        CLI::App * sub = nullptr;
        for (CLI::App * s : cur->get_subcommands([](CLI::App *) { return true; })) {
            if (s->check_name(std::string(a))) sub = s;
        }
        if (sub != nullptr) {
            cur = sub;
            where += " " + std::string(a);
            continue;
        }
        if (a.size() < 2 || a[0] != '-') continue;
        if (a[1] == '-' || a.size() == 2) {
            // "--name VALUE", "-n VALUE": the next argument is the value
            // unless the option is a flag or has "=value".
            if (a.find('=') == std::string_view::npos) value_next = takes_value(cur, a);
            continue;
        }
        const char third = a[2];
        const bool number = (third >= '0' && third <= '9') || third == '.' || third == '-' || third == '+' || third == ',';
        if (!std::isalpha(static_cast<unsigned char>(a[1])) || number) continue;
        // "-mmodel.gguf", "-p=x", bench's "-ngl=99": a value glued to an
        // option the command has that takes one.
        glued g{std::string(a), where, ""};
        const auto value_hint = [&](std::string_view option, std::string_view rest) {
            if (!rest.empty() && rest[0] == '=') rest.remove_prefix(1);
            g.hint = fmt::format(" (an option's value goes after a space: '{} {}')", option, tessera::printable_utf8(rest, 256));
        };
        if (where == "tessera bench") {
            for (const auto & [spelling, long_name] : k_bench_spellings) {
                if (g.hint.empty() && a.size() > spelling.size() && a.starts_with(spelling)) value_hint(spelling, a.substr(spelling.size()));
            }
        }
        const std::string_view rest = a.substr(2);
        const bool word = std::all_of(rest.begin(), rest.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)); });
        if (g.hint.empty() && (third == '=' || !word) && takes_value(cur, a.substr(0, 2))) value_hint(a.substr(0, 2), rest);
        if (g.hint.empty() && !word) g.hint = " (a file name that begins with '-' needs './' before it)";
        return g;
    }
    return {};
}

// The exit code `code`, or 1 with a message when what went to stdout could
// not all be written (a full disk, `> /dev/full`): the buffered output is
// flushed here, so a failed write would otherwise go unnoticed. `earlier`:
// the reason (errno) of a write that failed before, where the output was
// already flushed (CLI11 ends --version with std::endl), 0 when none.
int finish(int code, int earlier = 0) {
    errno = 0;
    std::cout.flush();
    const bool failed = std::fflush(stdout) != 0 || std::ferror(stdout) != 0 || std::cout.fail();
    const int err = errno != 0 ? errno : earlier;
    if (failed && code == 0) {
        tessera::tools::eprint("error: could not write the output to stdout{}{}\n", err != 0 ? ": " : "",
                               err != 0 ? std::strerror(err) : "");
        return 1;
    }
    return code;
}

} // namespace

// Gives each standard descriptor the caller closed (`2>&-`, `>&-`) a
// stand-in: /dev/null opened read-only, so that writes to it still fail
// as they would on the closed descriptor (and are reported as such), but
// no file the program opens later (a quantize temporary) can take the
// number and receive the diagnostics. False when one could not be had.
bool occupy_closed_std_fds() {
    for (int fd = 0; fd <= 2; ++fd) {
        if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
        if (fd == 0) tessera::tools::g_stdin_closed = true; // `-f -` refuses it rather than read it as empty
        const int got = ::open("/dev/null", O_RDONLY | O_CLOEXEC); // the lowest free number: fd
        if (got != fd) {
            if (got >= 0) ::close(got);
            return false;
        }
    }
    return true;
}

#ifdef TESSERA_HAVE_CMD_GGUF
namespace {

// SIGBUS on a read of a mapped model file: the file shrank (was truncated
// or rewritten in place) while in use, and the page read now lies past its
// end. Names the file and exits 1 instead of dying with "Bus error"; any
// other SIGBUS is re-raised with the default action (a crash, as before).
// Only async-signal-safe calls (write, _exit, signal, raise).
void on_sigbus(int sig, siginfo_t * info, void *) {
    const char * file = tessera::gguf::mapped_file_at(info != nullptr ? info->si_addr : nullptr);
    if (file == nullptr) {
        ::signal(sig, SIG_DFL);
        ::raise(sig);
        return;
    }
    const auto put = [](const char * t) {
        size_t n = 0;
        while (t[n] != '\0') ++n;
        while (n > 0) {
            const ssize_t w = ::write(STDERR_FILENO, t, n);
            if (w <= 0) return;
            t += w;
            n -= static_cast<size_t>(w);
        }
    };
    put("error: gguf: ");
    put(file);
    put(": the file shrank while in use (truncated or rewritten in place), so its mapped bytes can no longer be read; "
        "it must stay unchanged while tessera runs (replace it by renaming a new file over it instead)\n");
    ::_exit(1);
}

void install_sigbus_handler() {
    struct sigaction sa{};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    (void)::sigaction(SIGBUS, &sa, nullptr);
}

} // namespace
#endif

int main(int argc, char ** argv) {
    using namespace tessera::tools;
    if (!occupy_closed_std_fds()) return 1; // nowhere to report it, and nothing safe to write
#ifdef TESSERA_HAVE_CMD_GGUF
    install_sigbus_handler();
#endif
    CLI::App app{"tessera: an on-device tensor runtime for GGUF language models"};
    app.require_subcommand(1);
    // Options a subcommand does not know go up to this app, so `tessera run
    // --version` prints the version as `tessera --version` does (unknown
    // ones are still refused, by name).
    app.fallthrough();
    app.set_version_flag("--version", fmt::format("tessera {} (commit {}, build {})", k_version, k_build_commit, k_build_number),
                         "print the version, the git commit built and the number of commits up to it, then exit");
    std::vector<command> commands;
#ifdef TESSERA_HAVE_CMD_GGUF
    commands.push_back(register_gguf(app));
#endif
#ifdef TESSERA_HAVE_CMD_DEVICES
    commands.push_back(register_devices(app));
#endif
#ifdef TESSERA_HAVE_CMD_RUN
    commands.push_back(register_run(app));
    commands.push_back(register_tokenize(app));
#endif
#ifdef TESSERA_HAVE_CMD_PERPLEXITY
    commands.push_back(register_perplexity(app));
#endif
#ifdef TESSERA_HAVE_CMD_QUANTIZE
    commands.push_back(register_quantize(app));
#endif
#ifdef TESSERA_HAVE_CMD_BENCH
    commands.push_back(register_bench(app));
#endif
#ifdef TESSERA_HAVE_CMD_DEVICES
    // Every other subcommand accepts --list-devices (tools/devices.hpp).
    for (auto & c : commands) {
        if (c.sub->get_name() != "devices") add_list_devices_flag(c.sub);
    }
#endif
    // llama-bench's one-dash multi-letter options (`bench -fa 0,1 -ub 256`):
    // CLI11 has none, so each such token (before "--") is read as its long name.
    std::vector<char *> args(argv, argv + argc);
    for (int i = 2; i < argc && std::string_view(argv[1]) == "bench" && std::string_view(argv[i]) != "--"; ++i) {
        for (const auto & [spelling, long_name] : k_bench_spellings) {
            if (std::string_view(argv[i]) == spelling) args[size_t(i)] = long_name;
        }
    }
    if (const glued g = glued_option(app, argc, args.data()); !g.arg.empty()) {
        eprint("error: {}: unknown option '{}'{} (see {} --help)\n", g.where, tessera::printable_utf8(g.arg, 256), g.hint, g.where);
        return 1;
    }
    try {
        app.parse(argc, args.data());
    } catch (const CLI::ParseError & e) {
        // A flag that finishes the command (--help, --list-devices) is a
        // success even where a subcommand would otherwise be required.
        if (e.get_exit_code() == 0) {
            errno = 0;
            const int code = app.exit(e);
            return finish(code == 0 ? 0 : 1, std::cout.fail() ? errno : 0);
        }
        if (const auto [arg, where] = unknown_subcommand(app, argc, args.data()); !arg.empty()) {
            eprint("error: {}: unknown {} '{}' (see {} --help)\n", where, arg[0] == '-' ? "option" : "subcommand",
                   tessera::printable_utf8(arg, 256), where);
            return 1;
        }
        // An unknown option is named also where it left a required
        // argument missing (`quantize IN -out.gguf TYPE` said "TYPE is
        // required"): a file name that begins with '-' reads as an option.
        const bool extras = dynamic_cast<const CLI::ExtrasError *>(&e) != nullptr;
        if (extras || dynamic_cast<const CLI::RequiredError *>(&e) != nullptr) {
            if (const auto u = unexpected_argument(app, argc, args.data());
                u && (extras || (!u->arg.empty() && u->arg[0] == '-'))) {
                eprint("error: {}: {} '{}'{} (see {} --help)\n", u->where, u->option ? "unknown option" : "unexpected argument",
                       tessera::printable_utf8(u->arg, 256), u->option && !extras && u->arg[1] != '-' ? " (a file name that begins with '-' needs './' before it)" : "",
                       u->where);
                return 1;
            }
        }
        const std::string where = parsed_command(app);
        eprint("error: {}: {} (see {} --help)\n", where, parser_message(app, e), where);
        return 1;
    }
    try {
        for (auto & c : commands) {
            if (c.sub->parsed()) return finish(c.run());
        }
    } catch (const option_error & e) { // worded as the parser's own errors above
        const std::string where = parsed_command(app);
        eprint("error: {}: {} (see {} --help)\n", where, e.what(), where);
        return 1;
    } catch (const tessera::error & e) {
        eprint("error: {}\n", e.what());
        return 1;
    } catch (const std::system_error & e) {
        // fmt::print's failed write (stdout on a full disk, -oe on a closed
        // stderr) says "cannot write to file: <reason>"; worded as finish()
        // does, naming the stream whose error indicator the write set.
        const std::string_view what = e.what(), fmt_prefix = "cannot write to file: ";
        if (what.starts_with(fmt_prefix)) {
            const char * stream = std::ferror(stdout) != 0 ? " to stdout" : std::ferror(stderr) != 0 ? " to stderr" : "";
            eprint("error: could not write the output{}: {}\n", stream, what.substr(fmt_prefix.size()));
        } else {
            eprint("error: {}\n", what);
        }
        return 1;
    } catch (const std::exception & e) {
        eprint("error: {}\n", e.what());
        return 1;
    }
    return 1;
}

// tools/commands.hpp — each `tessera` subcommand lives in its own file
// (tools/cmd_<name>.cpp) and registers itself on the CLI11 app here.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <sys/stat.h>

#include <fmt/core.h>

#include "tessera/core/error.hpp"
#include "tessera/core/printable.hpp"

namespace tessera::tools {

// An option value the command cannot take, found after parsing (a list
// entry, a combination of options): main() reports it as it reports the
// parser's own errors, "error: <command>: <what> (see <command> --help)",
// exit code 1.
struct option_error : error {
    using error::error;
};

// A subcommand's registration: adds a CLI11 subcommand to `app` and returns
// the function to run when it was chosen (its return value is the exit code).
using command_fn = std::function<int()>;
struct command {
    CLI::App * sub;
    command_fn run;
};

namespace detail {

// An eprint argument as it is printed: text (std::string, string_view, a C
// string) through printable_lines, so that a file name, an option's value
// or a message built from them cannot drive the terminal; anything else
// (numbers, fmt::join) as given.
template <class A>
decltype(auto) shown_arg(A && a) {
    if constexpr (std::is_convertible_v<const std::remove_cvref_t<A> &, std::string_view>) {
        return printable_lines(std::string_view(a));
    } else {
        return std::forward<A>(a);
    }
}

} // namespace detail

// Prints a diagnostic (warning, progress, error) on stderr without ever
// throwing: fmt::print throws when the write fails (stderr closed, a full
// disk, `2>/dev/full`), and a lost message must not cost the work itself
// (a generated text, a written file) nor end in std::terminate from the
// handler that reports the error. Every text argument is shown through
// printable_lines (control bytes but '\n' as \xNN, text already escaped
// unchanged): the format string, the program's own text, is printed as it
// is ('\r' of a progress line included).
template <class... T>
void eprint(fmt::format_string<T...> format, T &&... args) noexcept {
    try {
        auto shown = std::make_tuple(detail::shown_arg(std::forward<T>(args))...);
        const std::string text =
            std::apply([&](auto &... a) { return fmt::vformat(fmt::string_view(format), fmt::make_format_args(a...)); }, shown);
        (void)std::fwrite(text.data(), 1, text.size(), stderr);
    } catch (...) { // formatting ran out of memory: nothing to report with
    }
}

// Most threads `run` and `bench` accept (-t): the CPU backend's pool limit.
inline constexpr int k_max_threads = 512;

// Warns on stderr when -t asks for more threads than the machine runs at
// once: every graph step waits for all of its threads, so the extra ones
// make a run many times slower (measured: 2 cores, -t 3 about 20x, -t 64
// about 300x), not faster.
inline void warn_if_oversubscribed(int n_threads) {
    const unsigned hw = std::thread::hardware_concurrency();
    if (hw > 0 && n_threads > int(hw)) {
        eprint("warning: -t {} is more than the {} hardware threads of this machine; expect a much slower run\n",
                   n_threads, hw);
    }
}

// The value of a --seed option (run, bench, gguf synth), taken as text so
// that every bad value gets this message rather than CLI11's bare "Could not
// convert" (or, from its strtoull, -1 and too-large values read as
// 2^64 - 1 and "" as 0): a decimal whole number from 0 to 2^64 - 1, an
// optional '+' (as the other whole-number options take), no spaces or other
// base. Throws tessera::error naming `flag`, the text and
// the range, e.g. "--seed 'abc': expected a whole number from 0 to
// 18446744073709551615".
inline uint64_t parse_seed(const std::string & text, const char * flag = "--seed") {
    uint64_t v = 0;
    const char * end = text.data() + text.size();
    const char * digits = text.data() + (text.size() > 1 && text[0] == '+' ? 1 : 0);
    const auto [at, ec] = std::from_chars(digits, end, v);
    if (text.empty() || ec != std::errc() || at != end) {
        throw option_error(fmt::format("{} '{}': expected a whole number from 0 to {}", flag, text,
                                       std::numeric_limits<uint64_t>::max()));
    }
    return v;
}

// A CLI11 transform (attach it with ->transform, not ->check, which would
// discard its rewrite) that checks that an integer option's text is a whole
// number in decimal (an optional sign, then digits) that fits in 64 bits,
// for CLI11's Range checks to follow: those read "1e3" or "2.5" as a number
// and then call it out of range. It drops leading zeros ("010" -> "10"),
// since CLI11 converts with strtoll's base 0, which reads them as octal:
// "-n 010" generated 8 tokens and "-n 08" failed with "Could not convert".
inline const CLI::Validator k_whole_number(
    [](std::string & text) -> std::string {
        size_t i = !text.empty() && (text[0] == '-' || text[0] == '+') ? 1 : 0;
        if (i == text.size()) return "'" + text + "' is not a whole number";
        for (size_t j = i; j < text.size(); ++j) {
            if (text[j] < '0' || text[j] > '9') return "'" + text + "' is not a whole number";
        }
        const size_t first_digit = i;
        while (i + 1 < text.size() && text[i] == '0') ++i;
        text.erase(first_digit, i - first_digit);
        // Past 64 bits every option's Range is exceeded, but CLI11's own
        // conversion saturates such a value to the type's largest.
        int64_t v = 0;
        const size_t skip = text[0] == '+' ? 1 : 0; // from_chars takes '-' but not '+'
        if (std::from_chars(text.data() + skip, text.data() + text.size(), v).ec != std::errc()) {
            return "'" + text + "' is out of range";
        }
        return std::string();
    },
    "");

// A CLI11 check that a real-valued option's text is a finite number in
// decimal (the whole text), for CLI11's Range checks to follow: those call
// "abc" or "" out of range and let "nan" through (every comparison with
// NaN is false).
inline const CLI::Validator k_finite_number(
    [](std::string & text) -> std::string {
        double v = 0;
        const char * end = text.data() + text.size();
        // from_chars takes '-' but not '+' ("+0.5"), and no "+-".
        const char * begin = text.data() + (text.size() > 1 && text[0] == '+' && text[1] != '-' ? 1 : 0);
        const auto [at, ec] = std::from_chars(begin, end, v);
        if (text.empty() || (ec != std::errc() && ec != std::errc::result_out_of_range) || at != end) {
            return "'" + text + "' is not a number";
        }
        // Out of range: too large (not finite), or too small (1e-999: 0).
        if (ec == std::errc::result_out_of_range) v = std::strtod(std::string(begin, end).c_str(), nullptr);
        if (!std::isfinite(v)) return "'" + text + "' is not a finite number";
        return std::string();
    },
    "");

// A CLI11 check that a number option's value lies in [lo, hi], after
// k_whole_number or k_finite_number checked its form: "'-1' is outside
// the range 0 to 100" (CLI::Range said "Value -1 not in range 0.000000 to
// 100.000000"). Its description, shown by --help, is "in [lo - hi]".
template <class T>
CLI::Validator in_range(T lo, T hi) {
    return CLI::Validator(
        [lo, hi](std::string & text) -> std::string {
            bool ok = false;
            T v{};
            if constexpr (std::is_integral_v<T>) {
                const size_t skip = !text.empty() && text[0] == '+' ? 1 : 0; // from_chars takes '-' but not '+'
                const char * end = text.data() + text.size();
                const auto [at, ec] = std::from_chars(text.data() + skip, end, v);
                ok = ec == std::errc() && at == end && skip < text.size();
            } else {
                char * end = nullptr;
                v = static_cast<T>(std::strtod(text.c_str(), &end));
                ok = !text.empty() && end == text.c_str() + text.size();
            }
            if (ok && v >= lo && v <= hi) return std::string();
            return fmt::format("'{}' is outside the range {} to {}", text, lo, hi);
        },
        fmt::format("in [{} - {}]", lo, hi));
}

// A CLI11 transform that takes one of `names` in any case and gives the
// name as written here ("on" for "ON"); anything else: "'maybe' is not
// one of on, off". Its description, shown by --help, is "{on,off}".
inline CLI::Validator one_of(std::vector<std::string> names) {
    std::string list, braces;
    for (const auto & n : names) {
        list += (list.empty() ? "" : ", ") + n;
        braces += (braces.empty() ? "" : ",") + n;
    }
    return CLI::Validator(
        [names, list](std::string & text) -> std::string {
            for (const auto & n : names) {
                const bool same = n.size() == text.size() &&
                                  std::equal(n.begin(), n.end(), text.begin(), [](char a, char b) {
                                      return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
                                  });
                if (same) {
                    text = n;
                    return std::string();
                }
            }
            return fmt::format("'{}' is not one of {}", text, list);
        },
        "{" + braces + "}");
}

// True when the program started with its standard input closed (`<&-`);
// main() then gave descriptor 0 a stand-in, which reads as empty.
inline bool g_stdin_closed = false;

// Most bytes read_text_file takes (256 MiB). The text is held whole and
// tokenized at once (about 5 bytes of memory a byte of text for SPM
// vocabularies, 4 for byte-level BPE: tokenize_step.hpp), and an endless source (/dev/zero, `yes |`) must end in an error,
// not in all of the machine's memory.
inline constexpr size_t k_max_text_bytes = size_t(256) << 20;

// The whole of the file at `path` ("-": standard input) as bytes, for an
// option `flag` that names a text file. Throws tessera::error naming the
// flag, the file and the system's reason ("-f 'x': cannot open it: No such
// file or directory"; a folder: "cannot read it: Is a directory"), or the
// limit for one of more than k_max_text_bytes (a regular file by its size,
// before reading; a pipe or device once that much was read).
inline std::string read_text_file(const std::string & path, const char * flag) {
    const bool std_in = path == "-";
    const std::string shown = printable_utf8(path); // (a name with control bytes must not drive the terminal)
    // (/dev/stdin and its like would open the stand-in main() put there.)
    const bool names_stdin = std_in || path == "/dev/stdin" || path == "/dev/fd/0" || path == "/proc/self/fd/0";
    if (names_stdin && g_stdin_closed) throw error(fmt::format("{} '{}': standard input is closed", flag, shown));
    std::FILE * f = std_in ? stdin : std::fopen(path.c_str(), "rb");
    if (f == nullptr) throw error(fmt::format("{} '{}': cannot open it: {}", flag, shown, std::strerror(errno)));
    struct stat st {};
    const auto too_long = [&] {
        if (!std_in) std::fclose(f);
        return error(fmt::format("{} '{}': longer than {} MiB, the most a text file may hold here", flag, shown,
                                 k_max_text_bytes >> 20));
    };
    if (::fstat(::fileno(f), &st) == 0 && S_ISREG(st.st_mode) && uint64_t(st.st_size) > k_max_text_bytes) throw too_long();
    std::string text;
    char buf[1 << 16];
    size_t got = 0;
    while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) {
        if (got > k_max_text_bytes - text.size()) throw too_long();
        text.append(buf, got);
    }
    const bool failed = std::ferror(f) != 0;
    const int err = errno;
    if (!std_in) std::fclose(f);
    if (failed) throw error(fmt::format("{} '{}': cannot read it: {}", flag, shown, std::strerror(err)));
    return text;
}

// "1 token", "2 tokens": a count with its noun, plural unless 1.
inline std::string count_text(uint64_t n, const char * noun) { return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s"); }

// A byte count for people: "1.02 GiB" from 1 GiB up, else "12.34 MiB"
// (run's load lines, bench's size column).
inline std::string size_text(uint64_t bytes) {
    const double mib = 1024.0 * 1024.0;
    if (double(bytes) >= 1024.0 * mib) return fmt::format("{:.2f} GiB", double(bytes) / (1024.0 * mib));
    return fmt::format("{:.2f} MiB", double(bytes) / mib);
}

// `s` with ASCII letters in lower case (case-insensitive option values).
inline std::string lower(std::string s) {
    for (char & c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

// --device as given to run or bench: `given` = it was on the command line.
// An empty name is refused (the library would read it as "the best
// device"). Throws option_error naming --device.
inline void check_device_option(bool given, const std::string & name) {
    if (given && name.empty()) {
        throw option_error("--device '': expected a device name (see `tessera devices`); leave --device out for the best device");
    }
}

command register_gguf(CLI::App & app);
command register_devices(CLI::App & app);
command register_run(CLI::App & app);
command register_tokenize(CLI::App & app);
command register_quantize(CLI::App & app);
command register_perplexity(CLI::App & app);
command register_bench(CLI::App & app);
// `tessera gguf synth`: added to the `gguf` subcommand by register_gguf
// (tools/cmd_synth.cpp, compiled in when TESSERA_HAVE_GGUF_SYNTH).
command add_gguf_synth(CLI::App & gguf_sub);

} // namespace tessera::tools

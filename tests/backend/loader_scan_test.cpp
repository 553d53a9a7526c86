// Loading from a folder of thousands of files: each search folder is listed
// once for all families and the same file under several names is dropped by
// its identity, so the outcome is that of a small folder (the time is not
// asserted: 10,000 files took about 10 minutes when every family listed
// the folder again and variants were compared pairwise).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include <fmt/core.h>

#include "backend/test_support.hpp"

namespace tessera::test {
namespace {

void write_file(const fs::path & p, std::string_view bytes) {
    std::ofstream out(p, std::ios::binary);
    out.write(bytes.data(), std::streamsize(bytes.size()));
}

// Lines of `text` that contain `part`.
size_t count_lines_with(const std::string & text, const std::string & part) {
    size_t n = 0;
    for (size_t at = 0; at < text.size();) {
        const size_t end = std::min(text.find('\n', at), text.size());
        if (text.substr(at, end - at).find(part) != std::string::npos) ++n;
        at = end + 1;
    }
    return n;
}

// TESSERA_BACKEND_PATH names a folder with, beside the fakevar variants
// high (score 7) and low (3): n files named as fakevar variants that are
// not libraries, n symbolic links to the low variant, n empty files each
// naming a family of its own (libtessera-junkNNNN.so) and n unrelated files.
// load_all loads high, lists low once (under its first name, the first
// link) and refuses every other file with its reason.
TEST(LoaderScan, AFolderOfThousandsOfFilesLoadsTheRightLibraryAndReportsTheRest) {
    constexpr int n = 1000;
    temp_dir tmp("many");
    const fs::path dir = tmp.path();
    const fs::path high = dir / "libtessera-fakevar-high.so";
    const fs::path low = dir / "libtessera-fakevar-low.so";
    fs::copy_file(fake_plugin("variants", "libtessera-fakevar-high"), high);
    fs::copy_file(fake_plugin("variants", "libtessera-fakevar-low"), low);
    for (int i = 0; i < n; ++i) {
        write_file(dir / fmt::format("libtessera-fakevar-junk{:04}.so", i), "not a library\n");
        fs::create_symlink(low.filename(), dir / fmt::format("libtessera-fakevar-link{:04}.so", i));
        write_file(dir / fmt::format("libtessera-junk{:04}.so", i), "");
        write_file(dir / fmt::format("readme{:04}.txt", i), "not a plugin\n");
    }

    registry reg;
    log_capture log;
    log.attach(reg);
    ASSERT_EQ(setenv("TESSERA_BACKEND_PATH", dir.c_str(), 1), 0);
    const std::vector<load_report> reports = reg.load_all();
    unsetenv("TESSERA_BACKEND_PATH");

    // The known families first, then fakevar and the junk families in the
    // order of their files' names.
    const size_t known = registry::known_names().size();
    ASSERT_EQ(reports.size(), known + 1 + n);
    for (size_t i = 0; i < known; ++i) EXPECT_EQ(reports[i].name, registry::known_names()[i]);

    const load_report & var = reports[known];
    EXPECT_EQ(var.name, "fakevar");
    ASSERT_TRUE(var.loaded);
    EXPECT_EQ(var.loaded.path(), high.string());
    EXPECT_EQ(var.loaded.score(), 7);
    ASSERT_EQ(var.candidates.size(), size_t(2 + n));
    EXPECT_EQ(var.candidates[0].path, high.string());
    EXPECT_EQ(var.candidates[0].error, "");
    const fs::path link0 = dir / "libtessera-fakevar-link0000.so";
    EXPECT_EQ(var.candidates[1].path, link0.string());
    EXPECT_EQ(var.candidates[1].score, 3);
    EXPECT_EQ(var.candidates[1].error, "not chosen: score 3 is below 7");
    for (int i = 0; i < n; ++i) {
        const load_candidate & c = var.candidates[size_t(2 + i)];
        const fs::path junk = dir / fmt::format("libtessera-fakevar-junk{:04}.so", i);
        EXPECT_EQ(c.path, junk.string());
        EXPECT_EQ(c.score, -1);
        EXPECT_EQ(c.error, fmt::format("cannot open: {}: not an ELF file (it does not begin with the ELF magic "
                                       "bytes 7f 45 4c 46)",
                                       junk.string()));
    }

    for (int i = 0; i < n; ++i) {
        const load_report & r = reports[known + 1 + size_t(i)];
        const fs::path junk = dir / fmt::format("libtessera-junk{:04}.so", i);
        EXPECT_EQ(r.name, fmt::format("junk{:04}", i));
        EXPECT_FALSE(r.loaded);
        ASSERT_EQ(r.candidates.size(), 1u);
        EXPECT_EQ(r.candidates[0].path, junk.string());
        EXPECT_EQ(r.candidates[0].error, fmt::format("backend library '{}': cannot open: {}: empty file, not a "
                                                     "shared library",
                                                     junk.string(), junk.string()));
    }

    // Only high is registered (and mapped) from that folder; each refused
    // file is logged once.
    for (const auto & r : reg.regs()) {
        if (fs::path(r.path()).parent_path() == dir) EXPECT_EQ(r.path(), high.string());
    }
    EXPECT_TRUE(reg.find_reg("fakevar"));
    EXPECT_FALSE(is_loaded(low));
    EXPECT_EQ(count_lines_with(log.all(), dir.string()), size_t(2 * n)) << log.all().substr(0, 2000);
}

// load_all's folder and TESSERA_BACKEND_PATH naming one directory under two
// spellings (a link to it, and its own name): it is listed once, and each
// family's files are named as before under the spelling its search used
// (the families found only in TESSERA_BACKEND_PATH under that one).
TEST(LoaderScan, AFolderNamedTwoWaysIsListedOnceAndKeepsEachSpelling) {
    temp_dir tmp("twice");
    const fs::path real = tmp.path() / "real";
    const fs::path alias = tmp.path() / "alias";
    fs::create_directory(real);
    fs::create_directory_symlink(real, alias);
    fs::copy_file(fake_plugin("variants", "libtessera-fakevar-high"), real / "libtessera-fakevar-high.so");
    fs::copy_file(fake_plugin("variants", "libtessera-fakevar-low"), real / "libtessera-fakevar-low.so");
    registry reg;
    log_capture log;
    log.attach(reg);
    ASSERT_EQ(setenv("TESSERA_BACKEND_PATH", real.c_str(), 1), 0);
    const auto reports = reg.load_all(alias);
    unsetenv("TESSERA_BACKEND_PATH");
    ASSERT_EQ(reports.size(), registry::known_names().size() + 1);
    const load_report & rep = reports.back();
    EXPECT_EQ(rep.name, "fakevar");
    ASSERT_TRUE(rep.loaded);
    ASSERT_EQ(rep.candidates.size(), 2u);
    EXPECT_EQ(rep.candidates[0].path, (real / "libtessera-fakevar-high.so").string());
    EXPECT_EQ(rep.candidates[1].path, (real / "libtessera-fakevar-low.so").string());
    EXPECT_EQ(rep.candidates[1].error, "not chosen: score 3 is below 7");
    EXPECT_EQ(log.all(), "");

    // load_best on its own searches the given spelling first.
    registry other;
    const load_report again = other.load_best("fakevar", alias);
    ASSERT_EQ(again.candidates.size(), 2u);
    EXPECT_EQ(again.candidates[0].path, (alias / "libtessera-fakevar-high.so").string());
}

} // namespace
} // namespace tessera::test

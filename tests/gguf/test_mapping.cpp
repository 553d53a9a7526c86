// gguf::mapping::release and populate. release: the pages wholly inside a range leave the
// process's resident set (read from /proc/self/smaps, the kernel's own
// count for the mapping), the bytes stay what the file holds, and ranges
// that are empty, outside the mapping or in the in-memory stand-in change
// nothing.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/smaps.hpp"
#include "tessera/core/error.hpp"
#include "tessera/gguf/reader.hpp"

namespace {

namespace fs = std::filesystem;
using tessera::test::resident_kb;

// A file of n bytes, byte i = (i * 131 + 7) mod 251.
fs::path write_pattern(const std::string & name, size_t n) {
    const fs::path p = fs::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
    std::vector<char> bytes(n);
    for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<char>((i * 131 + 7) % 251);
    std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(n));
    return p;
}

uint64_t checksum(const uint8_t * p, size_t n) {
    uint64_t s = 0;
    for (size_t i = 0; i < n; ++i) s = s * 1099511628211u + p[i];
    return s;
}

TEST(GgufMapping, ReleaseDropsTheWholePagesOfARangeAndKeepsTheBytes) {
    const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    const size_t n = 256 * page;
    const fs::path path = write_pattern("tessera-mapping-release", n);
    {
        tessera::gguf::mapping m(path);
        ASSERT_EQ(m.size(), n);
        const uint64_t before = checksum(m.data(), n); // reads every page
        const long full = resident_kb(m.data());
        ASSERT_GE(full, static_cast<long>(n / 1024) * 9 / 10) << "the read pages should be resident";

        // Pages 10 .. 209 lie wholly inside [10 pages - 100 bytes, 210 pages + 100 bytes):
        // the partial pages at both ends stay.
        m.release(m.data() + 10 * page - 100, 200 * page + 200);
        const long after = resident_kb(m.data());
        EXPECT_LE(after, full - static_cast<long>(200 * page / 1024) + 8) << "200 pages should have left: " << full << " -> " << after;
        EXPECT_GE(after, full - static_cast<long>(200 * page / 1024) - 8) << "only the pages wholly inside the range";

        // The bytes read back as the file holds them (the released pages come back from the file).
        EXPECT_EQ(checksum(m.data(), n), before);
        for (size_t i : {size_t{0}, 10 * page - 101, 10 * page, 150 * page + 3, n - 1}) {
            EXPECT_EQ(m.data()[i], static_cast<uint8_t>((i * 131 + 7) % 251)) << "byte " << i;
        }

        // Empty, misplaced and overlong ranges are ignored.
        const long again = resident_kb(m.data());
        m.release(m.data(), 0);
        m.release(nullptr, page);
        m.release(m.data() + n - page, 2 * page); // runs past the end
        m.release(m.data() - page, 2 * page);     // starts before the mapping
        m.release(m.data(), n + 1);
        EXPECT_EQ(resident_kb(m.data()), again);
    }
    fs::remove(path);
}

// populate maps the pages of a range in at once (the mapping's resident
// set grows by them before any is read), the bytes stay the file's, and
// ranges that are empty or not inside the mapping are ignored.
TEST(GgufMapping, PopulateMapsTheRangesPagesInBeforeTheyAreRead) {
    const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    const size_t n = 256 * page;
    const fs::path path = write_pattern("tessera-mapping-populate", n);
    {
        tessera::gguf::mapping m(path);
        ASSERT_EQ(m.size(), n);
        void * probe = const_cast<uint8_t *>(m.data());
        if (::madvise(probe, page, MADV_POPULATE_READ) != 0) GTEST_SKIP() << "this kernel has no MADV_POPULATE_READ";
        const long before = resident_kb(m.data());
        m.populate(m.data() + 20 * page + 100, 100 * page); // pages 20 .. 120
        m.populate(m.data(), 0);
        m.populate(nullptr, page);
        m.populate(m.data() + n - page, 2 * page); // runs past the end
        m.populate(m.data() - page, 2 * page);     // starts before the mapping
        const long after = resident_kb(m.data());
        EXPECT_GE(after - before, static_cast<long>(101 * page / 1024)) << before << " -> " << after;
        EXPECT_LE(after - before, static_cast<long>(200 * page / 1024)) << "only the range (and what fault-around adds)";
        for (size_t i : {size_t{0}, 20 * page, 20 * page + 100, 120 * page + 99, n - 1}) {
            EXPECT_EQ(m.data()[i], static_cast<uint8_t>((i * 131 + 7) % 251)) << "byte " << i;
        }
    }
    fs::remove(path);
    // The in-memory stand-in: nothing to do.
    const std::vector<uint8_t> bytes(3 * page, 7);
    tessera::gguf::mapping mem(bytes, "bytes");
    mem.populate(mem.data(), bytes.size());
    EXPECT_EQ(mem.data()[2 * page], 7);
}

// A FIFO (or a directory) is refused as "not a regular file" at once: the
// open must not wait for a writer that never comes.
TEST(GgufMapping, FifoAndDirectoryAreRefusedWithoutWaiting) {
    const fs::path fifo = fs::temp_directory_path() / ("tessera-mapping-fifo-" + std::to_string(::getpid()));
    fs::remove(fifo);
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    for (const fs::path & p : {fifo, fs::temp_directory_path()}) {
        try {
            tessera::gguf::mapping m(p);
            ADD_FAILURE() << p << " was accepted";
        } catch (const tessera::error & e) {
            EXPECT_NE(std::string(e.what()).find(p.string() + ": not a regular file"), std::string::npos) << e.what();
        }
    }
    fs::remove(fifo);
}

TEST(GgufMapping, ReleaseLeavesTheInMemoryStandInAlone) {
    std::vector<uint8_t> bytes(3 * 4096);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7);
    tessera::gguf::mapping m(bytes, "memory");
    m.release(m.data(), m.size());
    for (size_t i = 0; i < bytes.size(); ++i) ASSERT_EQ(m.data()[i], bytes[i]) << "byte " << i;
}

} // namespace

namespace {

// mapped_file_at (the SIGBUS handler's lookup): an address inside a live
// file mapping gives its file's name (escaped when it holds control bytes),
// one outside it or in the in-memory stand-in null, and nothing once the
// mapping is gone.
TEST(GgufMapping, MappedFileAtNamesTheFileOfALiveMapping) {
    const fs::path path = write_pattern("tessera-mapping-name\x1b", 3 * 4096 + 5);
    const std::string shown = path.parent_path().string() + "/tessera-mapping-name\\x1b-" + std::to_string(::getpid());
    const uint8_t * base = nullptr;
    {
        tessera::gguf::mapping m(path);
        base = m.data();
        ASSERT_NE(tessera::gguf::mapped_file_at(base), nullptr);
        EXPECT_EQ(std::string(tessera::gguf::mapped_file_at(base)), shown);
        EXPECT_EQ(std::string(tessera::gguf::mapped_file_at(base + m.size() - 1)), shown);
        EXPECT_EQ(tessera::gguf::mapped_file_at(base + m.size()), nullptr);
        EXPECT_EQ(tessera::gguf::mapped_file_at(base - 1), nullptr);
        const std::vector<uint8_t> bytes(100, 7);
        const tessera::gguf::mapping mem(bytes, "in memory");
        EXPECT_EQ(tessera::gguf::mapped_file_at(mem.data()), nullptr);
        {
            tessera::gguf::mapping again(path); // a second mapping of the same file
            EXPECT_EQ(std::string(tessera::gguf::mapped_file_at(again.data() + 3)), shown);
        }
        EXPECT_EQ(std::string(tessera::gguf::mapped_file_at(base + 3)), shown);
    }
    EXPECT_EQ(tessera::gguf::mapped_file_at(base), nullptr);
    fs::remove(path);
}

} // namespace

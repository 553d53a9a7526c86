// gguf::writer: exact bytes of a small file, round trips (the real files are
// rewritten byte for byte), every value type, validation, atomic replacement.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <cmath>
#include <csignal>
#include <algorithm>
#include <filesystem>
#include <limits>
#include <random>
#include <utility>

#include <fcntl.h>
#include <grp.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gguf/gguf_bytes.hpp"
#include "gguf/writer_hooks.hpp"
#include "tessera/core/error.hpp"
#include "tessera/gguf/reader.hpp"
#include "tessera/gguf/writer.hpp"
#include "support/error_of.hpp"
#include "support/temp_dir.hpp"

using namespace tessera;
using namespace tessera::test;
namespace fs = std::filesystem;

namespace {

std::vector<uint8_t> f32_bytes(std::initializer_list<float> v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.begin(), b.size());
    return b;
}

// A writer with one tensor "t" of 64 F32 elements computed while writing
// (every byte `byte`); `filled` turns true when that fill runs.
gguf::writer writer_with_fill(bool & filled, uint8_t byte) {
    gguf::writer w;
    const int64_t ne[1] = {64};
    w.add_tensor_fill("t", TSR_TYPE_F32, ne, [&filled, byte](std::span<uint8_t> b) {
        filled = true;
        std::fill(b.begin(), b.end(), byte);
    });
    return w;
}

} // namespace

TEST(GgufWriter, ExactBytesOfASmallFile) {
    gguf::writer w;
    w.set_string("general.architecture", "test");
    w.set("test.list", gguf::value::array_u32(std::vector<uint32_t>{1, 2, 3}));
    const int64_t ne_a[] = {4, 2};
    const int64_t ne_b[] = {8};
    w.add_tensor("a", TSR_TYPE_F32, ne_a, f32_bytes({0, 1, 2, 3, 4, 5, 6, 7}));
    w.add_tensor("b", TSR_TYPE_F32, ne_b, f32_bytes({100, 101, 102, 103, 104, 105, 106, 107}));
    // make_simple_file() builds the same file field by field.
    EXPECT_EQ(w.to_bytes(), make_simple_file().bytes);
}

TEST(GgufWriter, RewritesEveryRealFileByteForByte) {
    temp_dir dir;
    for (const auto & f : shared_gguf_files()) {
        SCOPED_TRACE(f.string());
        gguf::reader r(f);
        gguf::writer w;
        w.copy_all_kv(r);
        for (const auto & t : r.tensors()) w.copy_tensor(r, t.name);
        const fs::path out = dir.path / f.filename();
        w.write(out);
        // The originals are laid out the same way (aligned, in order, padded).
        const auto a = read_file(f);
        const auto b = read_file(out);
        ASSERT_EQ(a.size(), b.size());
        EXPECT_TRUE(a == b);
        // And read back: same metadata in the same order, same tensors.
        gguf::reader back(out);
        ASSERT_EQ(back.n_kv(), r.n_kv());
        for (size_t i = 0; i < r.n_kv(); ++i) {
            EXPECT_EQ(back.metadata()[i].key, r.metadata()[i].key);
            EXPECT_TRUE(back.metadata()[i].val == r.metadata()[i].val) << r.metadata()[i].key;
        }
        ASSERT_EQ(back.n_tensors(), r.n_tensors());
        for (size_t i = 0; i < r.n_tensors(); ++i) {
            const auto & x = r.tensors()[i];
            const auto & y = back.tensors()[i];
            EXPECT_EQ(x.name, y.name);
            EXPECT_EQ(x.type, y.type);
            EXPECT_EQ(x.n_dims, y.n_dims);
            EXPECT_TRUE(std::equal(x.ne, x.ne + 4, y.ne));
            EXPECT_EQ(x.offset, y.offset);
            EXPECT_EQ(std::memcmp(x.data, y.data, x.size), 0);
        }
    }
    EXPECT_EQ(dir.n_entries(), shared_gguf_files().size()); // no temporaries left behind
}

TEST(GgufWriter, EveryValueTypeRoundTrips) {
    using gguf::value;
    const float nan_bits = std::bit_cast<float>(0x7fc01234u);
    const bool bools[] = {true, false, true};
    std::vector<std::pair<std::string, value>> kvs = {
        {"u8", value::u8(255)},
        {"i8", value::i8(-128)},
        {"u16", value::u16(65535)},
        {"i16", value::i16(-32768)},
        {"u32", value::u32(0xffffffffu)},
        {"i32", value::i32(std::numeric_limits<int32_t>::min())},
        {"u64", value::u64(std::numeric_limits<uint64_t>::max())},
        {"i64", value::i64(std::numeric_limits<int64_t>::min())},
        {"f32", value::f32(nan_bits)},
        {"f64", value::f64(-0.0)},
        {"bool", value::boolean(true)},
        {"str.empty", value::string("")},
        {"str", value::string(std::string("a\0b\xff", 4))},
        {"arr.f32", value::array_f32(std::vector<float>{1.5f, -2.0f, std::numeric_limits<float>::infinity()})},
        {"arr.i64", value::array_i64(std::vector<int64_t>{-1, 1})},
        {"arr.u64", value::array_u64(std::vector<uint64_t>{7})},
        {"arr.f64", value::array_f64(std::vector<double>{0.1})},
        {"arr.i32", value::array_i32(std::vector<int32_t>{})},
        {"arr.u8", value::array_u8(std::vector<uint8_t>{0, 255})},
        {"arr.bool", value::array_bool(bools)},
        {"arr.str", value::array_string(std::vector<std::string>{"x", "", "long string"})},
        {"arr.nested", value::array_array({value::array_string(std::vector<std::string>{"q"}),
                                           value::array_array({value::array_i32(std::vector<int32_t>{3})})})},
    };
    gguf::writer w;
    for (const auto & [k, v] : kvs) w.set(k, v);
    w.set_alignment(64);
    const int64_t ne_q[] = {64, 3};
    std::vector<uint8_t> q8(2 * 34 * 3);
    for (size_t i = 0; i < q8.size(); ++i) q8[i] = static_cast<uint8_t>(i * 7);
    w.add_tensor("q", TSR_TYPE_Q8_0, ne_q, q8);
    const int64_t ne_h[] = {1, 1, 1, 5};
    std::vector<uint8_t> h(10, 0xab);
    w.add_tensor("h", TSR_TYPE_F16, ne_h, std::move(h));
    const auto bytes = w.to_bytes();
    auto r = gguf::reader::from_memory(bytes);
    EXPECT_EQ(r.alignment(), 64u);
    EXPECT_EQ(r.data_offset() % 64, 0u);
    EXPECT_EQ(bytes.size() % 64, 0u);
    ASSERT_EQ(r.n_kv(), kvs.size() + 1);
    for (size_t i = 0; i < kvs.size(); ++i) {
        EXPECT_EQ(r.metadata()[i].key, kvs[i].first);
        EXPECT_TRUE(r.metadata()[i].val == kvs[i].second) << kvs[i].first;
    }
    EXPECT_EQ(std::bit_cast<uint32_t>(r.get_f32("f32")), 0x7fc01234u); // NaN payload kept
    EXPECT_TRUE(std::signbit(r.get_f64("f64")));
    EXPECT_EQ(r.get_string("str"), std::string_view("a\0b\xff", 4));
    EXPECT_EQ(r.get_i64("i64"), std::numeric_limits<int64_t>::min());
    const auto & q = r.tensor("q");
    EXPECT_EQ(q.type, TSR_TYPE_Q8_0);
    EXPECT_EQ(q.size, q8.size());
    EXPECT_EQ(std::memcmp(q.data, q8.data(), q8.size()), 0);
    EXPECT_EQ(r.tensor("h").n_dims, 4u);
    EXPECT_EQ(r.tensor("h").ne[3], 5);
    EXPECT_EQ(r.tensor("h").offset % 64, 0u);
    EXPECT_EQ(r.tensor("h").data[9], 0xab);
}

// The writer refuses the arrays the reader refuses, at the same limits: a
// file it writes at the limits reads back, one past them is not written.
TEST(GgufWriter, ArraysTheReaderRefusesAreNotWritten) {
    using gguf::value;
    const auto nest = [](int levels) { // `levels` arrays, each the only element of the next
        value v = value::array_i32(std::vector<int32_t>{7});
        for (int i = 1; i < levels; ++i) v = value::array_array({v});
        return v;
    };
    gguf::writer w;
    w.set("deep", nest(gguf::max_array_depth));
    try {
        w.set("deeper", nest(gguf::max_array_depth + 1));
        FAIL() << "9 levels written";
    } catch (const error & e) {
        EXPECT_EQ(std::string(e.what()), "gguf writer: key 'deeper': arrays nested 9 levels deep, more than the 8 a GGUF "
                                         "reader takes");
    }
    // max_nested_arrays over all the keys: "deep" holds 7 of them.
    const auto empties = [](uint64_t n) { return value::array_array(std::vector<value>(n, value::array_u8({}))); };
    w.set("many", empties(gguf::max_nested_arrays - 7));
    w.set("many", empties(gguf::max_nested_arrays - 7)); // replacing a key does not count it twice
    try {
        w.set("one.more", empties(1));
        FAIL() << "one array past the limit written";
    } catch (const error & e) {
        EXPECT_EQ(std::string(e.what()), "gguf writer: key 'one.more': 1 arrays nested in arrays, with the other keys' "
                                         "65536 more than the 65536 a GGUF file may hold");
    }
    EXPECT_EQ(w.n_kv(), 2u);
    const auto bytes = w.to_bytes();
    auto r = gguf::reader::from_memory(bytes); // exactly at both limits: read back
    EXPECT_EQ(r.get("deep"), nest(gguf::max_array_depth));
    EXPECT_EQ(r.get("many").array_size(), gguf::max_nested_arrays - 7);
}

// At most max_kv_count keys (what the reader takes): one more is refused,
// replacing one is not; the file at the limit reads back.
TEST(GgufWriter, KeysAreBoundedAsTheReaderBoundsThem) {
    gguf::writer w;
    for (uint64_t i = 0; i < gguf::max_kv_count; ++i) w.set_u32("k" + std::to_string(i), 1);
    w.set_u32("k0", 2);
    try {
        w.set_u32("one.more", 1);
        FAIL() << "a key past the limit written";
    } catch (const error & e) {
        EXPECT_EQ(std::string(e.what()), "gguf writer: key 'one.more': more than the 65536 key/value pairs a GGUF reader takes");
    }
    EXPECT_EQ(w.n_kv(), gguf::max_kv_count);
    const auto r = gguf::reader::from_memory(w.to_bytes());
    EXPECT_EQ(r.n_kv(), gguf::max_kv_count);
    EXPECT_EQ(r.get("k0").as_u32(), 2u);
}

TEST(GgufWriter, SetReplacesInPlaceAndRemoves) {
    gguf::writer w;
    w.set_u32("a", 1);
    w.set_u32("b", 2);
    w.set_string("a", "now a string");
    EXPECT_EQ(w.n_kv(), 2u);
    EXPECT_TRUE(w.remove("b"));
    EXPECT_FALSE(w.remove("b"));
    auto r = gguf::reader::from_memory(w.to_bytes());
    ASSERT_EQ(r.n_kv(), 1u);
    EXPECT_EQ(r.get_string("a"), "now a string");
    EXPECT_EQ(r.n_tensors(), 0u);
    // No tensors: the file ends right after the metadata (24 + 8 + 1 + 4 + 8 + 12 bytes), no padding.
    EXPECT_EQ(w.to_bytes().size(), 57u);
    EXPECT_EQ(r.data_offset(), 64u);
}

// Random sets (new keys and replacements), removes and finds against a
// plain list of (key, value) kept in writing order: the writer's index
// (writer.cpp) must give the same answers and write the same keys, in the
// same order, with the same values. Removing a key with nested arrays gives
// its share of max_nested_arrays back.
TEST(GgufWriter, SetsRemovesAndFindsMatchAPlainList) {
    gguf::writer w;
    std::vector<std::pair<std::string, uint32_t>> want;
    std::mt19937 rng(12345);
    for (int step = 0; step < 3000; ++step) {
        const std::string key = "k" + std::to_string(rng() % 40);
        const auto at = std::find_if(want.begin(), want.end(), [&](const auto & kv) { return kv.first == key; });
        switch (rng() % 3) {
        case 0:
        case 1: {
            const auto v = static_cast<uint32_t>(rng());
            w.set_u32(key, v);
            if (at != want.end()) {
                at->second = v;
            } else {
                want.emplace_back(key, v);
            }
            break;
        }
        default:
            EXPECT_EQ(w.remove(key), at != want.end()) << key;
            if (at != want.end()) want.erase(at);
            break;
        }
        const std::string probe = "k" + std::to_string(rng() % 40);
        const auto found = std::find_if(want.begin(), want.end(), [&](const auto & kv) { return kv.first == probe; });
        const gguf::value * got = w.find(probe);
        ASSERT_EQ(got != nullptr, found != want.end()) << probe << " at step " << step;
        if (got != nullptr) EXPECT_EQ(got->as_u32(), found->second);
    }
    ASSERT_EQ(w.n_kv(), want.size());
    auto r = gguf::reader::from_memory(w.to_bytes());
    ASSERT_EQ(r.metadata().size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(r.metadata()[i].key, want[i].first);
        EXPECT_EQ(r.metadata()[i].val.as_u32(), want[i].second);
    }
    // The nested-array budget follows removals.
    const auto empties = [](uint64_t n) { return gguf::value::array_array(std::vector<gguf::value>(n, gguf::value::array_u8({}))); };
    w.set("all", empties(gguf::max_nested_arrays));
    EXPECT_THROW(w.set("more", empties(1)), error);
    EXPECT_TRUE(w.remove("all"));
    w.set("more", empties(1));
    w.set("rest", empties(gguf::max_nested_arrays - 1));
    EXPECT_THROW(w.set("over", empties(1)), error);
}

TEST(GgufWriter, RejectsBadInput) {
    gguf::writer w;
    const int64_t ne[] = {4};
    const auto data = f32_bytes({1, 2, 3, 4});
    w.add_tensor("x", TSR_TYPE_F32, ne, data);
    EXPECT_THROW(w.add_tensor("x", TSR_TYPE_F32, ne, data), error);                        // duplicate
    EXPECT_THROW(w.add_tensor("", TSR_TYPE_F32, ne, data), error);                         // empty name
    EXPECT_THROW(w.add_tensor(std::string(65, 'n'), TSR_TYPE_F32, ne, data), error);       // name too long
    EXPECT_THROW(w.add_tensor("y", TSR_TYPE_F16, ne, data), error);                        // size mismatch
    EXPECT_THROW(w.add_tensor("y", TSR_TYPE_Q8_0, ne, data), error);                       // not a block multiple
    EXPECT_THROW(w.add_tensor("y", static_cast<type>(4), ne, data), error);                // retired type id
    const int64_t bad_ne[] = {4, 0};
    EXPECT_THROW(w.add_tensor("y", TSR_TYPE_F32, bad_ne, data), error);                    // zero dimension
    const int64_t five[] = {4, 1, 1, 1, 1};
    EXPECT_THROW(w.add_tensor("y", TSR_TYPE_F32, five, data), error);                      // 5 dims
    EXPECT_THROW(w.set_alignment(48), error);
    EXPECT_THROW(w.set("general.alignment", gguf::value::u64(32)), error);
    EXPECT_THROW(w.set("", gguf::value::u8(1)), error);
    EXPECT_THROW(w.set(std::string(65536, 'k'), gguf::value::u8(1)), error);
    EXPECT_THROW(gguf::value::array_raw(gguf::value_type::UINT32, 3, std::vector<uint8_t>(11)), error);
    EXPECT_THROW(gguf::value::array_raw(gguf::value_type::BOOL, 1, std::vector<uint8_t>{2}), error);
    EXPECT_THROW(gguf::value::array_raw(gguf::value_type::STRING, 0, {}), error);
    EXPECT_THROW(gguf::value::array_array({gguf::value::u8(1)}), error);
    try {
        gguf::writer w2;
        w2.add_tensor("z", TSR_TYPE_F16, ne, data);
        FAIL();
    } catch (const error & e) {
        EXPECT_NE(std::string(e.what()).find("tensor 'z': 16 bytes of data given, the shape needs 8"), std::string::npos)
            << e.what();
    }
    EXPECT_EQ(w.n_tensors(), 1u);
}

TEST(GgufWriter, AtomicReplace) {
    temp_dir dir;
    const fs::path out = dir.path / "model.gguf";
    gguf::writer w1;
    w1.set_string("general.architecture", "first");
    w1.write(out);
    const auto first = read_file(out);
    EXPECT_EQ(gguf::reader(out).get_string("general.architecture"), "first");

    // A write that fails half-way (file size limit) leaves the old file intact
    // and no temporary behind.
    gguf::writer w2;
    w2.set_string("general.architecture", "second");
    const int64_t ne[] = {1 << 16};
    w2.add_tensor("big", TSR_TYPE_F32, ne, std::vector<uint8_t>(4 << 16, 1));
    rlimit old{};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
    auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit small = old;
    small.rlim_cur = 4096;
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
    bool threw = false;
    try {
        w2.write(out);
    } catch (const error & e) {
        threw = true;
        EXPECT_NE(std::string(e.what()).find("write failed"), std::string::npos) << e.what();
    }
    ::setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_handler);
    EXPECT_TRUE(threw);
    EXPECT_EQ(read_file(out), first);
    EXPECT_EQ(dir.n_entries(), 1u);

    // Without the limit it replaces the file.
    w2.write(out);
    gguf::reader r(out);
    EXPECT_EQ(r.get_string("general.architecture"), "second");
    EXPECT_EQ(r.tensor("big").size, 4u << 16);
    EXPECT_EQ(dir.n_entries(), 1u);

    // A directory that does not exist: clear error, nothing created.
    try {
        w1.write(dir.path / "missing" / "x.gguf");
        FAIL();
    } catch (const error & e) {
        EXPECT_NE(std::string(e.what()).find("cannot create a temporary file"), std::string::npos) << e.what();
    }

    // An empty path, an existing directory and a path ending in '/' are
    // refused before the tensors' fill functions run; nothing is created.
    bool filled = false;
    gguf::writer w3 = writer_with_fill(filled, 0);
    const std::pair<std::filesystem::path, std::string> bad[] = {
        {"", "the output path is empty"},
        {dir.path, dir.path.string() + ": is a directory"},
        {dir.path.string() + "/", dir.path.string() + "/: is a directory"},
        {dir.path / "sub/", (dir.path / "sub/").string() + ": ends in '/', a directory's name, not a file name"},
    };
    for (const auto & [p, want] : bad) {
        try {
            w3.write(p);
            ADD_FAILURE() << p << " was accepted";
        } catch (const error & e) {
            EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
        }
    }
    EXPECT_FALSE(filled);
    EXPECT_EQ(dir.n_entries(), 1u);
}

// The output is renamed into place, so anything but a regular file at the
// path is refused untouched (a FIFO here; /dev/null alike), a symbolic link
// is written through (the link stays a link), a dangling one is refused,
// and a replaced file keeps its permissions.
TEST(GgufWriter, SpecialFilesLinksAndPermissions) {
    temp_dir dir;
    bool filled = false;
    gguf::writer w = writer_with_fill(filled, 7);
    const fs::path fifo = dir.path / "fifo.gguf";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    const std::string fifo_error = error_of([&] { w.write(fifo); });
    EXPECT_NE(fifo_error.find(fifo.string() + ": not a regular file"), std::string::npos) << fifo_error;
    EXPECT_FALSE(filled);
    EXPECT_TRUE(fs::is_fifo(fifo));

    const fs::path target = dir.path / "target.gguf", link = dir.path / "link.gguf";
    gguf::writer first;
    first.set_string("general.architecture", "first");
    first.write(target);
    ASSERT_EQ(::chmod(target.c_str(), 0640), 0);
    fs::create_symlink("target.gguf", link);
    w.write(link);
    EXPECT_TRUE(fs::is_symlink(fs::symlink_status(link)));
    EXPECT_EQ(gguf::reader(target).tensor("t").size, 256u);
    struct stat st {};
    ASSERT_EQ(::stat(target.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0640u);

    // A dangling link creates its target, as a shell's > would; one into
    // a missing folder is refused naming the folder; a loop is refused.
    const fs::path dangling = dir.path / "dangling.gguf";
    fs::create_symlink("created.gguf", dangling);
    w.write(dangling);
    EXPECT_TRUE(fs::is_symlink(fs::symlink_status(dangling)));
    EXPECT_EQ(gguf::reader(dir.path / "created.gguf").tensor("t").size, 256u);
    const fs::path nowhere = dir.path / "nowhere.gguf";
    fs::create_symlink("missing/x.gguf", nowhere);
    const std::string nowhere_error = error_of([&] { w.write(nowhere); });
    EXPECT_NE(nowhere_error.find("cannot create a temporary file in " + (dir.path / "missing").string()), std::string::npos)
        << nowhere_error;
    // ... and names the link given as well as the file it names.
    EXPECT_EQ(nowhere_error.rfind("gguf writer: " + nowhere.string() + " (its link names " + (dir.path / "missing" / "x.gguf").string() +
                                      "): cannot create",
                                  0),
              0u)
        << nowhere_error;
    const fs::path loop_a = dir.path / "loop_a.gguf", loop_b = dir.path / "loop_b.gguf";
    fs::create_symlink("loop_b.gguf", loop_a);
    fs::create_symlink("loop_a.gguf", loop_b);
    const std::string loop_error = error_of([&] { w.write(loop_a); });
    EXPECT_NE(loop_error.find(loop_a.string() + ": too many levels of symbolic links"), std::string::npos) << loop_error;
    // fifo, target, link, dangling, created, nowhere, two loop links: no temporaries
    EXPECT_EQ(dir.n_entries(), 8u);
}

// /proc/self/fd/N of a deleted file reads "NAME (deleted)", of a memfd
// "/memfd:NAME (deleted)": renaming over that text made a new file of that
// name (in / for the memfd) and left the open file empty. Both are refused
// before any data is made; a descriptor of a file that still has its name
// is written through.
TEST(GgufWriter, ProcFdOfADeletedOrUnnamedFileIsRefused) {
    temp_dir dir;
    bool filled = false;
    gguf::writer w = writer_with_fill(filled, 7);
    const fs::path gone = dir.path / "gone.gguf";
    const int fd = ::open(gone.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::unlink(gone.c_str()), 0);
    const std::string via_fd = "/proc/self/fd/" + std::to_string(fd);
    EXPECT_EQ(error_of([&] { w.write(via_fd); }),
              "gguf writer: " + via_fd + ": names a deleted or unnamed file (its link reads '" + gone.string() +
                  " (deleted)', which is not that file): cannot replace it by name");
    EXPECT_FALSE(filled);
    struct stat st {};
    ASSERT_EQ(::fstat(fd, &st), 0);
    EXPECT_EQ(st.st_size, 0);
    ::close(fd);
    EXPECT_EQ(dir.n_entries(), 0u); // no "gone.gguf (deleted)", no temporary

    const int mfd = ::memfd_create("tessera_writer_test", MFD_CLOEXEC);
    ASSERT_GE(mfd, 0);
    const std::string via_memfd = "/proc/self/fd/" + std::to_string(mfd);
    EXPECT_EQ(error_of([&] { w.write(via_memfd); }),
              "gguf writer: " + via_memfd + ": names a deleted or unnamed file (its link reads '/memfd:tessera_writer_test "
              "(deleted)', which is not that file): cannot replace it by name");
    EXPECT_FALSE(filled);
    EXPECT_FALSE(fs::exists("/memfd:tessera_writer_test (deleted)"));
    ::close(mfd);

    const fs::path live = dir.path / "live.gguf";
    const int lfd = ::open(live.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    ASSERT_GE(lfd, 0);
    w.write("/proc/self/fd/" + std::to_string(lfd));
    ::close(lfd);
    EXPECT_TRUE(filled);
    EXPECT_EQ(gguf::reader(live).tensor("t").size, 256u);
    EXPECT_EQ(dir.n_entries(), 1u);
}

// Replacing a file: refused, as `>` would be, when this user may not write
// it (renaming over it needs only the directory's permission); else the
// new file keeps the old one's owner, group and mode (it became root's
// when root replaced another user's file). "file.gguf/" names no directory.
// As root the refusal is checked in a child running as nobody (65534).
TEST(GgufWriter, ReplacingKeepsTheOwnerAndNeedsWritePermission) {
    temp_dir dir;
    ASSERT_EQ(::chmod(dir.path.c_str(), 0777), 0);
    gguf::writer w;
    w.set_string("general.architecture", "new");
    const fs::path file = dir.path / "old.gguf";
    gguf::writer old;
    old.set_string("general.architecture", "old");
    old.write(file);
    const bool root = ::geteuid() == 0;
    const uid_t user = root ? 65534 : ::geteuid();
    const gid_t group = root ? 65534 : ::getegid();
    if (root) ASSERT_EQ(::chown(file.c_str(), user, group), 0);

    // The error of w.write(path) run as `user` (error_of: "(no error)" on success).
    const auto write_as_user = [&](const fs::path & path) -> std::string {
        if (!root) return tessera::test::error_of([&] { w.write(path); });
        int fds[2];
        if (::pipe(fds) != 0) return "pipe failed";
        const pid_t pid = ::fork();
        if (pid == 0) {
            ::close(fds[0]);
            std::string e = "cannot become the user";
            if (::setgroups(0, nullptr) == 0 && ::setgid(group) == 0 && ::setuid(user) == 0) {
                e = tessera::test::error_of([&] { w.write(path); });
            }
            (void)!::write(fds[1], e.data(), e.size());
            ::_exit(0);
        }
        ::close(fds[1]);
        std::string e;
        char buf[512];
        for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) e.append(buf, size_t(n));
        ::close(fds[0]);
        int status = 0;
        ::waitpid(pid, &status, 0);
        return e;
    };
    ASSERT_EQ(::chmod(file.c_str(), 0444), 0);
    const std::string refused = write_as_user(file);
    EXPECT_NE(refused.find(file.string() + ": cannot replace it: Permission denied"), std::string::npos) << refused;
    EXPECT_EQ(gguf::reader(file).get_string("general.architecture"), "old");
    EXPECT_EQ(dir.n_entries(), 1u); // no temporary left

    ASSERT_EQ(::chmod(file.c_str(), 0640), 0);
    EXPECT_EQ(write_as_user(file), "(no error)");
    EXPECT_EQ(gguf::reader(file).get_string("general.architecture"), "new");
    w.write(file); // by this process (root: another user's file)
    struct stat st {};
    ASSERT_EQ(::stat(file.c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, user);
    EXPECT_EQ(st.st_gid, group);
    EXPECT_EQ(st.st_mode & 07777, 0640u);

    const std::string slash = tessera::test::error_of([&] { w.write(file.string() + "/"); });
    EXPECT_NE(slash.find(file.string() + "/: not a directory (the trailing '/' names one)"), std::string::npos) << slash;
    EXPECT_EQ(dir.n_entries(), 1u);
}

// A new file's mode is 0666 less the umask (as open(2) gives it).
TEST(GgufWriter, NewFileHonoursTheUmask) {
    temp_dir dir;
    gguf::writer w;
    w.set_string("general.architecture", "x");
    for (const mode_t mask : {mode_t{077}, mode_t{022}, mode_t{0}}) {
        const mode_t old = ::umask(mask);
        const fs::path out = dir.path / ("m" + std::to_string(mask) + ".gguf");
        w.write(out);
        ::umask(old);
        struct stat st {};
        ASSERT_EQ(::stat(out.c_str(), &st), 0);
        EXPECT_EQ(st.st_mode & 07777, 0666u & ~mask) << "umask " << mask;
    }
}

// A signal that ends the process, sent in the middle of a write, removes
// the temporary file, then ends the process by the signal as before
// (SIGQUIT, SIGPIPE, SIGALRM, SIGUSR1/2, SIGXCPU and a sent SIGBUS left it
// behind before). So does one that comes while the temporary is being
// created, before its guard is in place: it waits for the guard (it ended
// the process at once and left the empty temporary behind).
TEST(GgufWriter, SignalMidWriteLeavesNoTemporary) {
    temp_dir dir;
    const fs::path out = dir.path / "model.gguf";
    for (const bool at_creation : {false, true}) {
        for (const int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE, SIGALRM, SIGUSR1, SIGUSR2, SIGXCPU, SIGBUS}) {
            const pid_t pid = ::fork();
            ASSERT_GE(pid, 0);
            if (pid == 0) {
                const rlimit no_core{0, 0}; // SIGQUIT, SIGXCPU and SIGBUS would dump core
                ::setrlimit(RLIMIT_CORE, &no_core);
                static int which = 0;
                which = sig;
                if (at_creation) gguf::detail::after_temp_created = [] { ::raise(which); };
                gguf::writer w;
                const int64_t ne[1] = {1 << 16};
                w.add_tensor("a", TSR_TYPE_F32, ne, std::vector<uint8_t>(4 << 16, 1));
                w.add_tensor_fill("b", TSR_TYPE_F32, ne, [](std::span<uint8_t>) { ::raise(which); });
                try {
                    w.write(out);
                } catch (...) {
                }
                ::_exit(0); // not reached when the signal ends the process
            }
            int status = 0;
            ASSERT_EQ(::waitpid(pid, &status, 0), pid);
            // (SIGBUS under AddressSanitizer: its handler, the previous
            // disposition, reports the signal and exits non-zero.)
            EXPECT_TRUE((WIFSIGNALED(status) && WTERMSIG(status) == sig) ||
                        (sig == SIGBUS && WIFEXITED(status) && WEXITSTATUS(status) != 0))
                << "signal " << sig << " status " << status << (at_creation ? " at the creation" : "");
            EXPECT_EQ(dir.n_entries(), 0u) << "signal " << sig << (at_creation ? " at the creation" : "");
        }
    }
}

// A fault while a tensor's bytes are read (SIGBUS: a mapped input file cut
// short under the writer, as a model being quantized while another program
// truncates it) removes the temporary file; the access then faults again
// under the previous disposition, which ends the process (or, under
// AddressSanitizer, reports it and exits non-zero).
TEST(GgufWriter, FaultReadingAMappedInputLeavesNoTemporary) {
    temp_dir dir;
    const fs::path in = dir.path / "input.bin";
    const fs::path out = dir.path / "model.gguf";
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        const rlimit no_core{0, 0};
        ::setrlimit(RLIMIT_CORE, &no_core);
        const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
        const int fd = ::open(in.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(4 * page)) != 0) ::_exit(10);
        void * map = ::mmap(nullptr, 4 * page, PROT_READ, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED) ::_exit(11);
        gguf::writer w;
        const int64_t ne[1] = {1 << 10};
        w.add_tensor("a", TSR_TYPE_F32, ne, std::vector<uint8_t>(4 << 10, 1));
        w.add_tensor_fill("b", TSR_TYPE_F32, ne, [&](std::span<uint8_t> d) {
            if (::ftruncate(fd, 0) != 0) ::_exit(12);
            std::memcpy(d.data(), static_cast<const char *>(map) + 2 * page, d.size()); // past the end now: SIGBUS
        });
        try {
            w.write(out);
        } catch (...) {
        }
        ::_exit(0); // not reached: the copy faults
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE((WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS) ||
                (WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) < 10))
        << "status " << status;
    EXPECT_FALSE(fs::exists(out));
    EXPECT_EQ(dir.n_entries(), 1u) << "only the input file is left";
}

// Under a file size limit (`ulimit -f`) whose SIGXFSZ would end the process
// silently (the default), the write fails with an error naming the cause
// and leaves no temporary; SIGXFSZ's disposition is restored afterwards.
TEST(GgufWriter, FileSizeLimitIsAnErrorNotASignal) {
    temp_dir dir;
    const fs::path out = dir.path / "model.gguf";
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        ::signal(SIGXFSZ, SIG_DFL);
        const rlimit small{4096, RLIM_INFINITY};
        if (::setrlimit(RLIMIT_FSIZE, &small) != 0) ::_exit(10);
        gguf::writer w;
        const int64_t ne[1] = {1 << 16};
        w.add_tensor("big", TSR_TYPE_F32, ne, std::vector<uint8_t>(4 << 16, 1));
        std::string what;
        try {
            w.write(out);
        } catch (const error & e) {
            what = e.what();
        }
        if (what.find(out.string() + ": write failed: File too large") == std::string::npos) ::_exit(11);
        struct sigaction now {};
        ::sigaction(SIGXFSZ, nullptr, &now);
        ::_exit(now.sa_handler == SIG_DFL ? 0 : 12);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
    EXPECT_EQ(dir.n_entries(), 0u);
}

// An output name of up to NAME_MAX (255) bytes is written: the temporary's
// name (the output's with ".tmp.XXXXXX" added) is cut to fit. 245 bytes and
// more failed with "File name too long".
TEST(GgufWriter, LongestFileNamesAreWritten) {
    temp_dir dir;
    for (const size_t len : {size_t{244}, size_t{245}, size_t{250}, size_t{255}}) {
        const fs::path out = dir.path / (std::string(len - 5, 'a') + ".gguf");
        gguf::writer w;
        w.set_string("general.architecture", "long");
        ASSERT_NO_THROW(w.write(out)) << len;
        EXPECT_EQ(gguf::reader(out).get_string("general.architecture"), "long") << len;
        fs::remove(out);
    }
    EXPECT_EQ(dir.n_entries(), 0u);
}

// A name one byte past NAME_MAX is refused before any tensor data is made,
// naming the output (it failed after the whole write, at the rename, naming
// the temporary); through a symbolic link the message names the target.
TEST(GgufWriter, TooLongFileNameIsRefusedBeforeAnyData) {
    temp_dir dir;
    bool filled = false;
    gguf::writer w = writer_with_fill(filled, 7);
    const fs::path out = dir.path / (std::string(251, 'b') + ".gguf");
    EXPECT_EQ(error_of([&] { w.write(out); }),
              "gguf writer: " + out.string() + ": file name is 256 bytes, longer than the file system allows (255)");
    EXPECT_FALSE(filled);
    const fs::path link = dir.path / "link.gguf";
    fs::create_symlink(out.filename(), link);
    EXPECT_EQ(error_of([&] { w.write(link); }), "gguf writer: " + link.string() + " (its link names " + out.string() +
                                                    "): file name is 256 bytes, longer than the file system allows (255)");
    EXPECT_FALSE(filled);
    EXPECT_EQ(dir.n_entries(), 1u); // the link: no temporary
}

// A signal the process ignores (as under nohup) neither ends the write nor
// removes its file: the output is complete and in place, no temporary left.
TEST(GgufWriter, IgnoredSignalMidWriteCompletesTheFile) {
    temp_dir dir;
    for (const int sig : {SIGTERM, SIGINT, SIGHUP}) {
        const fs::path out = dir.path / ("model" + std::to_string(sig) + ".gguf");
        const pid_t pid = ::fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            ::signal(sig, SIG_IGN);
            gguf::writer w;
            const int64_t ne[1] = {1 << 16};
            w.add_tensor("a", TSR_TYPE_F32, ne, std::vector<uint8_t>(4 << 16, 1));
            w.add_tensor_fill("b", TSR_TYPE_F32, ne, [sig](std::span<uint8_t> d) {
                ::raise(sig);
                std::fill(d.begin(), d.end(), uint8_t{2});
            });
            try {
                w.write(out);
            } catch (...) {
                ::_exit(2);
            }
            // still ignored after the write
            struct sigaction now {};
            ::sigaction(sig, nullptr, &now);
            ::_exit(now.sa_handler == SIG_IGN ? 0 : 3);
        }
        int status = 0;
        ASSERT_EQ(::waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "signal " << sig << " status " << status;
        gguf::reader r(out);
        const auto b = r.tensor("b");
        ASSERT_EQ(b.size, 4u << 16);
        EXPECT_EQ(b.data[0], 2u);
        EXPECT_EQ(b.data[b.size - 1], 2u);
    }
    EXPECT_EQ(dir.n_entries(), 3u);
}

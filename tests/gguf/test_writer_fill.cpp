// gguf::writer::add_tensor_fill: bytes produced while writing land at the
// right offsets (same file as add_tensor with the same bytes), and a fill that
// throws leaves the destination as it was with no temporary behind.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/core/error.hpp"
#include "tessera/gguf/reader.hpp"
#include "tessera/gguf/writer.hpp"

namespace {

using namespace tessera;
namespace fs = std::filesystem;

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = uint8_t(seed + i * 7);
    return v;
}

std::vector<uint8_t> read_all(const fs::path & p) {
    std::ifstream f(p, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

} // namespace

TEST(WriterFill, SameBytesAsAddTensor) {
    const int64_t ne_a[] = {3, 5};    // F32: 60 bytes (padded to 64)
    const int64_t ne_b[] = {64, 2};   // Q8_0: 2 * 2 blocks * 34 = 136 bytes
    const auto a = pattern(60, 1), b = pattern(136, 9);
    gguf::writer w1, w2;
    for (auto * w : {&w1, &w2}) w->set_string("general.architecture", "test");
    w1.add_tensor("a", TSR_TYPE_F32, ne_a, std::span<const uint8_t>(a));
    w1.add_tensor("b", TSR_TYPE_Q8_0, ne_b, std::span<const uint8_t>(b));
    int calls = 0;
    w2.add_tensor_fill("a", TSR_TYPE_F32, ne_a, [&](std::span<uint8_t> out) {
        ++calls;
        ASSERT_EQ(out.size(), 60u);
        std::copy(a.begin(), a.end(), out.begin());
    });
    w2.add_tensor_fill("b", TSR_TYPE_Q8_0, ne_b, [&](std::span<uint8_t> out) {
        ++calls;
        ASSERT_EQ(out.size(), 136u);
        std::copy(b.begin(), b.end(), out.begin());
    });
    EXPECT_EQ(w2.to_bytes(), w1.to_bytes());
    EXPECT_EQ(calls, 2);

    const fs::path p = fs::temp_directory_path() / ("tessera_fill_" + std::to_string(::getpid()) + ".gguf");
    w2.write(p);
    EXPECT_EQ(calls, 4);
    EXPECT_EQ(read_all(p), w1.to_bytes());
    const gguf::reader r(p);
    EXPECT_EQ(std::vector<uint8_t>(r.tensor("b").data, r.tensor("b").data + 136), b);
    fs::remove(p);
}

TEST(WriterFill, ThrowingFillLeavesDestinationAlone) {
    const fs::path dir = fs::temp_directory_path() / ("tessera_fill_dir_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    { std::ofstream(dir / "out.gguf") << "old"; }
    gguf::writer w;
    const int64_t ne[] = {4};
    w.add_tensor_fill("ok", TSR_TYPE_F32, ne, [](std::span<uint8_t> out) { std::fill(out.begin(), out.end(), 1); });
    w.add_tensor_fill("bad", TSR_TYPE_F32, ne, [](std::span<uint8_t>) { throw error("fill failed on purpose"); });
    try {
        w.write(dir / "out.gguf");
        FAIL() << "expected the fill's error";
    } catch (const error & e) {
        EXPECT_STREQ(e.what(), "fill failed on purpose");
    }
    EXPECT_EQ(read_all(dir / "out.gguf"), (std::vector<uint8_t>{'o', 'l', 'd'}));
    size_t n = 0;
    for ([[maybe_unused]] const auto & e : fs::directory_iterator(dir)) ++n;
    EXPECT_EQ(n, 1u); // the temporary is gone
    fs::remove_all(dir);
}

TEST(WriterFill, ChecksShapeAndFunction) {
    gguf::writer w;
    const int64_t bad[] = {33, 1}; // not a multiple of the Q8_0 block
    EXPECT_THROW(w.add_tensor_fill("x", TSR_TYPE_Q8_0, bad, [](std::span<uint8_t>) {}), error);
    const int64_t ok[] = {32};
    EXPECT_THROW(w.add_tensor_fill("y", TSR_TYPE_Q8_0, ok, nullptr), error);
    EXPECT_EQ(w.n_tensors(), 0u);
}

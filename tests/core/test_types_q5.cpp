// The Q5_0 block format (GGUF type 6): decoding of blocks packed by hand
// from the layout in types.hpp (f16 d, 4 bytes qh, 16 bytes qs), the
// reference quantizer's bytes on fixed vectors worked out from its
// definition, and its round-trip error against a bound derived from it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tessera/core/error.hpp"
#include "tessera/core/types.hpp"

using namespace tessera;

namespace {

// Packs 32 quants q (0..31) and an F16 scale into the 22 bytes of a block,
// written from the layout description independently of the core: byte
// 2 + i of qh holds the fifth bits of elements 8i .. 8i + 7 (bit j of the
// little-endian uint32), byte 6 + j of qs element j's low four bits in its
// low nibble and element j + 16's in its high nibble.
std::vector<uint8_t> pack_block(uint16_t d, const int * q) {
    std::vector<uint8_t> b(22, 0);
    b[0] = static_cast<uint8_t>(d & 0xff);
    b[1] = static_cast<uint8_t>(d >> 8);
    for (int j = 0; j < 32; ++j) {
        if (q[j] & 16) b[2 + j / 8] = static_cast<uint8_t>(b[2 + j / 8] | (1 << (j % 8)));
        const int nib = q[j] & 15;
        b[6 + j % 16] = static_cast<uint8_t>(b[6 + j % 16] | (j < 16 ? nib : nib << 4));
    }
    return b;
}

std::vector<uint8_t> quantize_bytes(const std::vector<float> & x) {
    std::vector<block_q5_0> y(x.size() / 32);
    quantize_row_q5_0_ref(x.data(), y.data(), static_cast<int64_t>(x.size()));
    std::vector<uint8_t> bytes(y.size() * sizeof(block_q5_0));
    std::memcpy(bytes.data(), y.data(), bytes.size());
    return bytes;
}

} // namespace

TEST(Q5_0, TraitsDescribeTheGgufBlock) {
    const type_traits & t = get_type_traits(TSR_TYPE_Q5_0);
    EXPECT_STREQ(t.name, "Q5_0");
    EXPECT_EQ(TSR_TYPE_Q5_0, 6);
    EXPECT_EQ(t.block_size, 32);
    EXPECT_EQ(t.type_size, 22u);
    EXPECT_TRUE(t.is_quantized);
    EXPECT_NE(t.to_float, nullptr);
    EXPECT_NE(t.from_float, nullptr);
    EXPECT_EQ(type_from_name("Q5_0"), TSR_TYPE_Q5_0);
    EXPECT_EQ(row_size(TSR_TYPE_Q5_0, 576), 18u * 22u);
    EXPECT_THROW(row_size(TSR_TYPE_Q5_0, 48), error);
}

// One block given byte by byte: d = 1 (0x3c00); qh bits 0 and 31 set;
// qs[0] = 0x21 (element 0: 1, element 16: 2), qs[15] = 0xf0 (element 15: 0,
// element 31: 15), every other nibble 0.
TEST(Q5_0, LiteralBytesDecodeToKnownValues) {
    const uint8_t blk[22] = {0x00, 0x3c, 0x01, 0x00, 0x00, 0x80, 0x21, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xf0};
    float y[32];
    get_type_traits(TSR_TYPE_Q5_0).to_float(blk, y, 32);
    for (int j = 0; j < 32; ++j) {
        float want = -16.0f; // q = 0
        if (j == 0) want = 1.0f;        // q = 1 | 16 = 17
        if (j == 16) want = -14.0f;     // q = 2
        if (j == 31) want = 15.0f;      // q = 15 | 16 = 31
        EXPECT_EQ(y[j], want) << "element " << j;
    }
}

TEST(Q5_0, HandPackedBlocksDecodeToKnownValues) {
    // Block 0 covers every quant 0..31 once in a scrambled order; block 1
    // repeats a pattern with a negative scale.
    int q0[32], q1[32];
    for (int j = 0; j < 32; ++j) {
        q0[j] = (j * 13 + 5) % 32;
        q1[j] = (j * 7) % 32;
    }
    const std::vector<uint8_t> b0 = pack_block(f32_to_f16(0.25f), q0);
    const std::vector<uint8_t> b1 = pack_block(f32_to_f16(-1.5f), q1);
    std::vector<uint8_t> row(b0);
    row.insert(row.end(), b1.begin(), b1.end());
    std::vector<float> y(64);
    dequantize_row_q5_0(reinterpret_cast<const block_q5_0 *>(row.data()), y.data(), 64);
    for (int j = 0; j < 32; ++j) {
        // Small integers times 0.25 or 1.5: exact in F32.
        ASSERT_EQ(y[static_cast<size_t>(j)], 0.25f * static_cast<float>(q0[j] - 16)) << "block 0 element " << j;
        ASSERT_EQ(y[static_cast<size_t>(32 + j)], -1.5f * static_cast<float>(q1[j] - 16)) << "block 1 element " << j;
    }
}

// The reference quantizer on fixed vectors. Per block (definition in
// types.hpp): max = the first value of largest |x|, d = max / -16 stored as
// F16, id = 1 / d, q = min(31, trunc(x * id + 16.5)). The expected quants
// below are worked out by hand from that rule, the bytes packed by
// pack_block.
TEST(Q5_0, ReferenceQuantizerBytes) {
    std::vector<float> x(32 * 4, 0.0f);
    int want_q[4][32];
    // Block 0: x = j - 16, max = -16 (x[0]) -> d = 1, id = 1, q = j.
    for (int j = 0; j < 32; ++j) {
        x[static_cast<size_t>(j)] = static_cast<float>(j - 16);
        want_q[0][j] = j;
    }
    // Block 1: max = +8 (x[0]) -> d = -0.5, id = -2, q = trunc(16.5 - 2x).
    float * b1 = x.data() + 32;
    const float v1[8] = {8.0f, -8.0f, 0.25f, -0.25f, 0.3f, 3.0f, -3.0f, -7.9f};
    const int q1[8] = {0, 31 /* 32.5 clamped */, 16, 17, 15, 10, 22, 31 /* 32.3 clamped */};
    for (int j = 0; j < 32; ++j) want_q[1][j] = 16; // zeros: 16.5 -> 16
    for (int j = 0; j < 8; ++j) {
        b1[j] = v1[j];
        want_q[1][j] = q1[j];
    }
    b1[20] = 7.9f; // 0.7 -> 0
    want_q[1][20] = 0;
    b1[31] = -1.1f; // 18.7 -> 18
    want_q[1][31] = 18;
    // Block 2: |-4| == |4|: the first wins, max = -4 -> d = 0.25, id = 4.
    float * b2 = x.data() + 64;
    b2[0] = -4.0f; // 0.5 -> 0
    b2[1] = 4.0f;  // 32.5 -> clamped 31
    b2[2] = 1.1f;  // 20.9 -> 20
    b2[3] = -1.1f; // 12.1 -> 12
    for (int j = 0; j < 32; ++j) want_q[2][j] = 16;
    want_q[2][0] = 0;
    want_q[2][1] = 31;
    want_q[2][2] = 20;
    want_q[2][3] = 12;
    // Block 3: all zero -> d = 0 / -16 = -0 (0x8000), id = 0, q = 16.
    for (int j = 0; j < 32; ++j) want_q[3][j] = 16;

    const uint16_t want_d[4] = {0x3c00, 0xb800, 0x3400, 0x8000};
    std::vector<uint8_t> want;
    for (int b = 0; b < 4; ++b) {
        const std::vector<uint8_t> blk = pack_block(want_d[b], want_q[b]);
        want.insert(want.end(), blk.begin(), blk.end());
    }
    // Block 0 spelled out: qs byte j = j | j << 4, qh = 0xffff0000.
    const uint8_t block0[22] = {0x00, 0x3c, 0x00, 0x00, 0xff, 0xff, 0x00, 0x11, 0x22, 0x33, 0x44,
                                0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff};
    ASSERT_EQ(std::vector<uint8_t>(want.begin(), want.begin() + 22), std::vector<uint8_t>(block0, block0 + 22));

    const std::vector<uint8_t> got = quantize_bytes(x);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << "byte " << i << " (block " << i / 22 << ")";

    // The traits' from_float writes the same bytes.
    std::vector<uint8_t> via_traits(got.size());
    get_type_traits(TSR_TYPE_Q5_0).from_float(x.data(), via_traits.data(), 128);
    EXPECT_EQ(via_traits, got);

    // Decoded: exact values of d * (q - 16).
    std::vector<float> back(128);
    dequantize_row_q5_0(reinterpret_cast<const block_q5_0 *>(got.data()), back.data(), 128);
    EXPECT_EQ(back[0], -16.0f);
    EXPECT_EQ(back[31], 15.0f);
    EXPECT_EQ(back[32 + 1], -7.5f); // clamped: error |d| = 0.5
    EXPECT_EQ(back[32 + 3], -0.5f);
    EXPECT_EQ(back[64 + 2], 1.0f);
    EXPECT_EQ(back[96], 0.0f);
}

// |x - y| <= |d| / 2 where x * id + 16.5 stays below 32, <= |d| for the
// clamped element (x = -max), plus 16 |d - d16| for the F16 rounding of the
// scale (|q - 16| <= 16) and 1e-4 |d| of float-rounding slack.
TEST(Q5_0, RoundTripErrorBound) {
    std::mt19937 rng(17);
    std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
    const int n = 32 * 256;
    std::vector<float> x(n), y(n);
    for (int i = 0; i < n; ++i) x[static_cast<size_t>(i)] = ud(rng) * std::pow(10.0f, static_cast<float>(i / 32 % 7) - 3.0f);
    std::vector<block_q5_0> q(n / 32);
    quantize_row_q5_0_ref(x.data(), q.data(), n);
    dequantize_row_q5_0(q.data(), y.data(), n);
    double worst_ratio = 0;
    int n_clamped = 0;
    for (int b = 0; b < n / 32; ++b) {
        float amax = 0, max = 0;
        for (int j = 0; j < 32; ++j) {
            const float v = x[static_cast<size_t>(b * 32 + j)];
            if (amax < std::fabs(v)) {
                amax = std::fabs(v);
                max = v;
            }
        }
        const double d = max / -16.0;
        const double d16 = f16_to_f32(q[static_cast<size_t>(b)].d);
        for (int j = 0; j < 32; ++j) {
            const double xv = x[static_cast<size_t>(b * 32 + j)];
            const bool clamped = xv / d + 16.5 >= 32.0;
            const double bound = (clamped ? 1.0 : 0.5) * std::fabs(d) + 16 * std::fabs(d - d16) + 1e-4 * std::fabs(d);
            const double err = std::fabs(xv - y[static_cast<size_t>(b * 32 + j)]);
            ASSERT_LE(err, bound) << "block " << b << " elem " << j;
            if (!clamped) worst_ratio = std::max(worst_ratio, err / std::fabs(d));
            n_clamped += clamped ? 1 : 0;
        }
    }
    EXPECT_GT(worst_ratio, 0.4); // the bound is not loose by a factor
    EXPECT_GT(n_clamped, 0);     // the clamp case was exercised
}

TEST(Q5_0, RejectsPartialBlocks) {
    std::vector<float> x(48, 1.0f);
    block_q5_0 y[2];
    EXPECT_THROW(quantize_row_q5_0_ref(x.data(), y, 48), error);
    EXPECT_THROW(dequantize_row_q5_0(y, x.data(), 33), error);
    EXPECT_THROW(quantize_row_q5_0_ref(x.data(), y, -32), error);
}

// NaN and infinities do not trap (UBSan build) and give quants in 0..31:
// a NaN element gets q = 0 (the guarded conversion maps NaN to 0), an
// infinite max makes id 0, so every finite element gets q = 16.
TEST(Q5_0, NonFiniteInputIsQuantizedWithoutTrapping) {
    std::vector<float> x(64, 0.5f);
    x[3] = std::nanf("");
    x[32 + 5] = -INFINITY;
    std::vector<block_q5_0> y(2);
    quantize_row_q5_0_ref(x.data(), y.data(), 64);
    std::vector<float> back(64);
    dequantize_row_q5_0(y.data(), back.data(), 64);
    EXPECT_EQ(f16_to_f32(y[1].d), INFINITY); // -inf / -16
    EXPECT_EQ(y[1].qs[0] & 15, 0);           // element 32: q = 16, low bits 0
    EXPECT_EQ(y[1].qh[0] & 1, 1);            // ... fifth bit set
    EXPECT_EQ(back[0], 0.5f);                // block 0: max = 0.5, d = -1/32, q = 0 -> 0.5
}

// ---- Q5_1 (GGUF type 7): f16 d, f16 m, then qh and qs as in Q5_0;
// x = d q + m ----

namespace {

// The 24 bytes of a Q5_1 block: d and m, then Q5_0's qh and qs bytes.
std::vector<uint8_t> pack_block_q5_1(uint16_t d, uint16_t m, const int * q) {
    std::vector<uint8_t> b = pack_block(d, q); // [d][qh 4][qs 16]
    b.insert(b.begin() + 2, {static_cast<uint8_t>(m & 0xff), static_cast<uint8_t>(m >> 8)});
    return b;
}

std::vector<uint8_t> quantize_bytes_q5_1(const std::vector<float> & x) {
    std::vector<block_q5_1> y(x.size() / 32);
    quantize_row_q5_1_ref(x.data(), y.data(), static_cast<int64_t>(x.size()));
    std::vector<uint8_t> bytes(y.size() * sizeof(block_q5_1));
    std::memcpy(bytes.data(), y.data(), bytes.size());
    return bytes;
}

} // namespace

TEST(Q5_1, TraitsDescribeTheGgufBlock) {
    const type_traits & tr = get_type_traits(TSR_TYPE_Q5_1);
    EXPECT_STREQ(tr.name, "Q5_1");
    EXPECT_EQ(tr.block_size, 32);
    EXPECT_EQ(tr.type_size, 24u);
    EXPECT_EQ(sizeof(block_q5_1), 24u);
    EXPECT_TRUE(tr.is_quantized);
    EXPECT_NE(tr.to_float, nullptr);
    EXPECT_NE(tr.from_float, nullptr);
    EXPECT_EQ(row_size(TSR_TYPE_Q5_1, 96), 72u);
}

TEST(Q5_1, HandPackedBlockDecodesToKnownValues) {
    int q[32];
    for (int j = 0; j < 32; ++j) q[j] = (7 * j + 3) % 32;
    const std::vector<uint8_t> bytes = pack_block_q5_1(0x3800 /* 0.5 */, 0xc280 /* -3.25 */, q);
    std::vector<float> y(32);
    get_type_traits(TSR_TYPE_Q5_1).to_float(bytes.data(), y.data(), 32);
    for (int j = 0; j < 32; ++j) EXPECT_EQ(y[static_cast<size_t>(j)], 0.5f * static_cast<float>(q[j]) - 3.25f) << j;
}

// Bytes worked out from the quantizer's definition (types.hpp):
// lo = min, d = (max - min) / 31, q = (int)((x - lo) / d + 0.5).
TEST(Q5_1, ReferenceQuantizerBytes) {
    // x_j = -2 + j / 4: d = 0.25, m = -2, q_j = j.
    std::vector<float> x(32);
    for (int j = 0; j < 32; ++j) x[static_cast<size_t>(j)] = -2.0f + 0.25f * static_cast<float>(j);
    int q[32];
    for (int j = 0; j < 32; ++j) q[j] = j;
    EXPECT_EQ(quantize_bytes_q5_1(x), pack_block_q5_1(0x3400, 0xc000, q));
    // A constant block: d = 0, every q = 0, m = the value.
    std::vector<float> c(32, 1.5f);
    int zero[32] = {};
    EXPECT_EQ(quantize_bytes_q5_1(c), pack_block_q5_1(0x0000, 0x3e00, zero));
    // Range [0, 31] (d = 1): halves round up, the rest to nearest.
    std::vector<float> h(32, 0.0f);
    h[1] = 2.5f;
    h[2] = 3.49f;
    h[3] = 16.51f;
    h[31] = 31.0f;
    int qh[32] = {};
    qh[1] = 3;
    qh[2] = 3;
    qh[3] = 17;
    qh[31] = 31;
    EXPECT_EQ(quantize_bytes_q5_1(h), pack_block_q5_1(0x3c00, 0x0000, qh));
}

TEST(Q5_1, RoundTripErrorBound) {
    std::mt19937 rng(17);
    std::normal_distribution<float> dist(0.3f, 2.0f);
    std::vector<float> x(32 * 64);
    for (float & v : x) v = dist(rng);
    std::vector<block_q5_1> q(64);
    quantize_row_q5_1_ref(x.data(), q.data(), 32 * 64);
    std::vector<float> y(x.size());
    dequantize_row_q5_1(q.data(), y.data(), 32 * 64);
    for (size_t b = 0; b < 64; ++b) {
        float lo = x[32 * b], hi = x[32 * b];
        for (size_t j = 0; j < 32; ++j) {
            lo = std::min(lo, x[32 * b + j]);
            hi = std::max(hi, x[32 * b + j]);
        }
        const double d = (static_cast<double>(hi) - lo) / 31;
        const double d16 = f16_to_f32(q[b].d), m16 = f16_to_f32(q[b].m);
        // Half a step, plus the F16 rounding of d (times at most 31) and of m.
        const double bound = d / 2 + 31 * std::fabs(d16 - d) + std::fabs(m16 - lo) + 1e-6;
        for (size_t j = 0; j < 32; ++j) ASSERT_LE(std::fabs(static_cast<double>(y[32 * b + j]) - x[32 * b + j]), bound) << b << " " << j;
    }
    EXPECT_THROW(quantize_row_q5_1_ref(x.data(), q.data(), 33), error);
    EXPECT_THROW(dequantize_row_q5_1(q.data(), y.data(), 40), error);
}

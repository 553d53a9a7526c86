// The K-quant super-block formats (Q4_K, Q5_K, Q6_K, Q8_K): decoding of blocks
// built by hand from the layout (types.hpp), and the reference quantizers'
// round-trip error against bounds derived from their definitions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tessera/core/error.hpp"
#include "tessera/core/types.hpp"

using namespace tessera;

namespace {

std::vector<float> random_values(int64_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(static_cast<size_t>(n));
    for (float & x : v) x = dist(rng);
    return v;
}

// Packs 6-bit scales and mins into the 12 bytes of a Q4_K block, written
// independently of the quantizer from the bit description in types.hpp.
void pack_scales(const int * sc, const int * m, uint8_t * out) {
    std::memset(out, 0, 12);
    for (int j = 0; j < 8; ++j) {
        if (j < 4) {
            out[j] |= static_cast<uint8_t>(sc[j]);
            out[j + 4] |= static_cast<uint8_t>(m[j]);
        } else {
            out[j + 4] |= static_cast<uint8_t>((sc[j] & 15) | ((m[j] & 15) << 4));
            out[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
            out[j] |= static_cast<uint8_t>((m[j] >> 4) << 6);
        }
    }
}

} // namespace

TEST(Q4K, ScaleMinUnpackingCoversAllSixBitValues) {
    for (int j = 0; j < 8; ++j) {
        for (int v = 0; v < 64; ++v) {
            int sc[8], m[8];
            for (int i = 0; i < 8; ++i) {
                sc[i] = (v + 7 * i) % 64;
                m[i] = (63 - v + 5 * i) % 64;
            }
            uint8_t bytes[12];
            pack_scales(sc, m, bytes);
            uint8_t got_sc, got_m;
            q4_k_scale_min(bytes, j, got_sc, got_m);
            ASSERT_EQ(got_sc, sc[j]) << "j " << j << " v " << v;
            ASSERT_EQ(got_m, m[j]) << "j " << j << " v " << v;
        }
    }
}

TEST(Q4K, HandBuiltBlockDecodesToKnownValues) {
    block_q4_k blk{};
    blk.d = f32_to_f16(0.5f);
    blk.dmin = f32_to_f16(0.25f);
    const int sc[8] = {1, 2, 3, 63, 10, 20, 33, 0};
    const int m[8] = {0, 4, 8, 1, 63, 32, 17, 5};
    pack_scales(sc, m, blk.scales);
    for (int i = 0; i < 128; ++i) blk.qs[i] = static_cast<uint8_t>((i * 7 + 3) & 0xff);
    std::vector<float> y(256);
    dequantize_row_q4_k(&blk, y.data(), 256);
    for (int e = 0; e < 256; ++e) {
        const int j = e / 32, l = e % 32;
        const uint8_t byte = blk.qs[32 * (j / 2) + l];
        const int q = j % 2 == 0 ? byte & 15 : byte >> 4;
        // Small integers times powers of two: exact in F32.
        const double want = 0.5 * sc[j] * q - 0.25 * m[j];
        ASSERT_EQ(y[static_cast<size_t>(e)], static_cast<float>(want)) << "element " << e;
    }
}

// Q5_K: Q4_K's scales plus a fifth bit per element, qh[l] bit j for
// element l of sub-block j; the bytes placed from that description.
TEST(Q5K, HandBuiltBlockDecodesToKnownValues) {
    block_q5_k blk{};
    blk.d = f32_to_f16(0.25f);
    blk.dmin = f32_to_f16(0.5f);
    const int sc[8] = {63, 1, 2, 40, 17, 0, 9, 33};
    const int m[8] = {5, 63, 0, 12, 1, 44, 30, 2};
    pack_scales(sc, m, blk.scales);
    auto quant = [](int e) { return (e * 11 + 7) % 32; };
    for (int e = 0; e < 256; ++e) {
        const int j = e / 32, l = e % 32, q = quant(e);
        blk.qs[32 * (j / 2) + l] = static_cast<uint8_t>(blk.qs[32 * (j / 2) + l] | ((q & 15) << (4 * (j % 2))));
        blk.qh[l] = static_cast<uint8_t>(blk.qh[l] | ((q >> 4) << j));
    }
    std::vector<float> y(256);
    dequantize_row_q5_k(&blk, y.data(), 256);
    for (int e = 0; e < 256; ++e) {
        const int j = e / 32;
        const double want = 0.25 * sc[j] * quant(e) - 0.5 * m[j]; // exact in F32
        ASSERT_EQ(y[static_cast<size_t>(e)], static_cast<float>(want)) << "element " << e;
    }
}

// The Q5_K quantizer uses the fifth bit (31 levels per sub-block): on
// Gaussian data its round trip is about twice as accurate as Q4_K's, and
// every element lies within the grid bound of its sub-block.
TEST(Q5K, QuantizeRoundTripWithinTheBlockGrid) {
    const int64_t n = 256 * 8;
    std::vector<float> x = random_values(n, 21);
    for (int i = 512; i < 768; ++i) x[static_cast<size_t>(i)] = -std::fabs(x[static_cast<size_t>(i)]); // max 0
    std::vector<block_q5_k> q(static_cast<size_t>(n / 256));
    quantize_row_q5_k_ref(x.data(), q.data(), n);
    std::vector<float> y(static_cast<size_t>(n));
    dequantize_row_q5_k(q.data(), y.data(), n);
    double err2 = 0.0, sig2 = 0.0;
    int high = 0;
    for (int64_t b = 0; b < n / 256; ++b) {
        const block_q5_k & blk = q[static_cast<size_t>(b)];
        const float d = f16_to_f32(blk.d), dmin = f16_to_f32(blk.dmin);
        for (int l = 0; l < 32; ++l) high += __builtin_popcount(blk.qh[l]);
        for (int j = 0; j < 8; ++j) {
            uint8_t sc, m;
            q4_k_scale_min(blk.scales, j, sc, m);
            // As for Q4_K with 31 levels: rounding sc and m by half a unit
            // can push an extreme value past the grid by 15.5 d + dmin / 2.
            const double bound = static_cast<double>(d) * sc / 2 + 15.5 * d + 0.5 * dmin + 1e-3;
            for (int l = 0; l < 32; ++l) {
                const size_t e = static_cast<size_t>(b * 256 + 32 * j + l);
                ASSERT_LE(std::fabs(static_cast<double>(y[e]) - x[e]), bound) << "element " << e;
                err2 += (static_cast<double>(y[e]) - x[e]) * (static_cast<double>(y[e]) - x[e]);
                sig2 += static_cast<double>(x[e]) * x[e];
            }
        }
    }
    EXPECT_GT(high, 256 * 8 / 4); // many quants >= 16
    EXPECT_LT(std::sqrt(err2 / sig2), 0.075);
}

TEST(Q6K, HandBuiltBlockDecodesToKnownValues) {
    // Element e gets quant (e * 5 + 1) % 64; the bytes are placed from the
    // bit description in types.hpp.
    block_q6_k blk{};
    blk.d = f32_to_f16(0.125f);
    for (int j = 0; j < 16; ++j) blk.scales[j] = static_cast<int8_t>(j * 17 - 128);
    auto quant = [](int e) { return (e * 5 + 1) % 64; };
    for (int h = 0; h < 2; ++h) {
        for (int l = 0; l < 32; ++l) {
            const int q0 = quant(128 * h + l), q1 = quant(128 * h + l + 32);
            const int q2 = quant(128 * h + l + 64), q3 = quant(128 * h + l + 96);
            blk.ql[64 * h + l] = static_cast<uint8_t>((q0 & 15) | ((q2 & 15) << 4));
            blk.ql[64 * h + l + 32] = static_cast<uint8_t>((q1 & 15) | ((q3 & 15) << 4));
            blk.qh[32 * h + l] = static_cast<uint8_t>((q0 >> 4) | ((q1 >> 4) << 2) | ((q2 >> 4) << 4) | ((q3 >> 4) << 6));
        }
    }
    std::vector<float> y(256);
    dequantize_row_q6_k(&blk, y.data(), 256);
    for (int e = 0; e < 256; ++e) {
        const double want = 0.125 * blk.scales[e / 16] * (quant(e) - 32);
        ASSERT_EQ(y[static_cast<size_t>(e)], static_cast<float>(want)) << "element " << e;
    }
}

TEST(Q4K, QuantizeRoundTripWithinTheBlockGrid) {
    const int64_t n = 256 * 8;
    std::vector<float> x = random_values(n, 11);
    x[5] = 0.0f;
    for (int i = 256; i < 512; ++i) x[static_cast<size_t>(i)] = std::fabs(x[static_cast<size_t>(i)]); // min 0
    std::vector<block_q4_k> q(static_cast<size_t>(n / 256));
    quantize_row_q4_k_ref(x.data(), q.data(), n);
    std::vector<float> y(static_cast<size_t>(n));
    dequantize_row_q4_k(q.data(), y.data(), n);
    double err2 = 0.0, sig2 = 0.0;
    for (int64_t b = 0; b < n / 256; ++b) {
        const float d = f16_to_f32(q[static_cast<size_t>(b)].d);
        const float dmin = f16_to_f32(q[static_cast<size_t>(b)].dmin);
        for (int j = 0; j < 8; ++j) {
            uint8_t sc, m;
            q4_k_scale_min(q[static_cast<size_t>(b)].scales, j, sc, m);
            // Inside the sub-block's range the grid step is d sc; rounding
            // of sc and m (by at most half a unit each) can push an extreme
            // value past the grid by up to 7.5 d + dmin / 2 plus the F16 rounding.
            const double step = static_cast<double>(d) * sc;
            const double bound = step / 2 + 7.5 * d + 0.5 * dmin + 1e-3;
            for (int l = 0; l < 32; ++l) {
                const size_t e = static_cast<size_t>(b * 256 + 32 * j + l);
                ASSERT_LE(std::fabs(static_cast<double>(y[e]) - x[e]), bound) << "element " << e;
                err2 += (static_cast<double>(y[e]) - x[e]) * (static_cast<double>(y[e]) - x[e]);
                sig2 += static_cast<double>(x[e]) * x[e];
            }
        }
    }
    // 4-bit quantization of Gaussian data: relative RMS error ~ 0.1.
    EXPECT_LT(std::sqrt(err2 / sig2), 0.15);
}

TEST(Q6K, QuantizeRoundTripWithinTheBlockGrid) {
    const int64_t n = 256 * 8;
    std::vector<float> x = random_values(n, 12, 3.0f);
    for (int i = 256; i < 272; ++i) x[static_cast<size_t>(i)] = 0.0f; // an all-zero sub-block
    std::vector<block_q6_k> q(static_cast<size_t>(n / 256));
    quantize_row_q6_k_ref(x.data(), q.data(), n);
    std::vector<float> y(static_cast<size_t>(n));
    dequantize_row_q6_k(q.data(), y.data(), n);
    double err2 = 0.0, sig2 = 0.0;
    for (int64_t b = 0; b < n / 256; ++b) {
        const double d = f16_to_f32(q[static_cast<size_t>(b)].d);
        for (int j = 0; j < 16; ++j) {
            const double step = std::fabs(d * q[static_cast<size_t>(b)].scales[j]);
            // Half a step, plus up to 32 times half a unit of the rounded scale (d / 2).
            const double bound = step / 2 + 16 * d + 1e-4;
            for (int l = 0; l < 16; ++l) {
                const size_t e = static_cast<size_t>(b * 256 + 16 * j + l);
                ASSERT_LE(std::fabs(static_cast<double>(y[e]) - x[e]), bound) << "element " << e;
                err2 += (static_cast<double>(y[e]) - x[e]) * (static_cast<double>(y[e]) - x[e]);
                sig2 += static_cast<double>(x[e]) * x[e];
            }
        }
    }
    for (int i = 256; i < 272; ++i) EXPECT_EQ(y[static_cast<size_t>(i)], 0.0f);
    EXPECT_LT(std::sqrt(err2 / sig2), 0.03); // 6 bits
}

// Q8_K as the reference implementation quantizes activations: v = the
// first value of largest magnitude (sign kept), iscale = -127 / v,
// q = round-half-even(iscale x) clamped to +-127, d = 1 / iscale.
TEST(Q8K, QuantizeValuesAndBlockSums) {
    const int64_t n = 512;
    std::vector<float> x = random_values(n, 13);
    x[7] = std::nanf("");
    x[300] = 0.0f;
    std::vector<block_q8_k> q(2);
    quantize_row_q8_k_ref(x.data(), q.data(), n);
    for (int b = 0; b < 2; ++b) {
        const block_q8_k & qb = q[static_cast<size_t>(b)];
        float amax = 0.0f, v = 0.0f;
        for (int e = 0; e < 256; ++e) {
            const float a = std::fabs(x[static_cast<size_t>(b * 256 + e)]);
            if (a > amax) {
                amax = a;
                v = x[static_cast<size_t>(b * 256 + e)];
            }
        }
        const float iscale = -127.0f / v;
        EXPECT_EQ(qb.d, 1.0f / iscale);
        EXPECT_EQ(std::signbit(qb.d), v > 0.0f);
        for (int j = 0; j < 16; ++j) {
            int s = 0;
            for (int l = 0; l < 16; ++l) s += qb.qs[16 * j + l];
            EXPECT_EQ(qb.bsums[j], s);
        }
        int n_max = 0;
        for (int e = 0; e < 256; ++e) {
            const float xe = x[static_cast<size_t>(b * 256 + e)];
            const int8_t got = qb.qs[e];
            if (std::isnan(xe)) {
                EXPECT_EQ(got, 0);
                continue;
            }
            n_max += got == -127;
            EXPECT_LE(std::fabs(got * static_cast<double>(qb.d) - xe), std::fabs(qb.d) * 0.5001) << e;
        }
        EXPECT_GE(n_max, 1); // the value of largest magnitude maps to -127
    }
    EXPECT_EQ(q[1].qs[300 - 256], 0);
}

// Exactly known quants: with the first largest-magnitude value 127 the
// scale is -1, so q = -x rounded half to even; with -127 it is +1 (the
// negated values then give the same quants and d changes sign). A later
// value of the same magnitude and other sign does not change the choice.
// An all-zero super-block gets d = 0.
TEST(Q8K, TiesRoundToEvenAgainstTheSignedMaximum) {
    std::vector<float> x(768, 0.0f);
    const float vals[] = {127.0f, 2.5f, 3.5f, -0.5f, 0.5f, 1.5f, -2.5f, 126.5f, -127.0f, 10.0f};
    const int8_t want_pos[] = {-127, -2, -4, 0, 0, -2, 2, -126, 127, -10};
    for (int i = 0; i < 10; ++i) x[static_cast<size_t>(i)] = vals[i];
    for (int i = 0; i < 10; ++i) x[static_cast<size_t>(256 + i)] = -vals[i];
    std::vector<block_q8_k> q(3);
    quantize_row_q8_k_ref(x.data(), q.data(), 768);
    EXPECT_EQ(q[0].d, -1.0f);
    EXPECT_EQ(q[1].d, 1.0f);
    for (int i = 0; i < 10; ++i) {
        EXPECT_EQ(q[0].qs[i], want_pos[i]) << vals[i];
        EXPECT_EQ(q[1].qs[i], want_pos[i]) << -vals[i]; // iscale +1 times -vals[i]: the same products
    }
    EXPECT_EQ(q[0].bsums[0], -127 - 2 - 4 + 0 + 0 - 2 + 2 - 126 + 127 - 10);
    EXPECT_EQ(q[2].d, 0.0f);
    for (int e = 0; e < 256; ++e) ASSERT_EQ(q[2].qs[e], 0);
    for (int j = 0; j < 16; ++j) ASSERT_EQ(q[2].bsums[j], 0);
}

TEST(KQuants, RowLengthMustBeWholeSuperBlocks) {
    std::vector<float> x(300);
    std::vector<block_q4_k> q4(2);
    std::vector<block_q6_k> q6(2);
    std::vector<block_q5_k> q5(2);
    EXPECT_THROW(quantize_row_q5_k_ref(x.data(), q5.data(), 288), error);
    EXPECT_THROW(dequantize_row_q5_k(q5.data(), x.data(), 100), error);
    EXPECT_THROW(quantize_row_q4_k_ref(x.data(), q4.data(), 300), error);
    EXPECT_THROW(dequantize_row_q6_k(q6.data(), x.data(), 128), error);
    try {
        quantize_row_q6_k_ref(x.data(), q6.data(), 255);
        FAIL() << "no error";
    } catch (const error & e) {
        EXPECT_NE(std::string(e.what()).find("256"), std::string::npos) << e.what();
    }
}

TEST(KQuants, TraitsConvertersMatchTheRowFunctions) {
    const std::vector<float> x = random_values(512, 14);
    for (tsr_type t : {TSR_TYPE_Q4_K, TSR_TYPE_Q5_K, TSR_TYPE_Q6_K, TSR_TYPE_Q8_K}) {
        const type_traits & tr = get_type_traits(t);
        std::vector<uint8_t> bytes(row_size(t, 512));
        tr.from_float(x.data(), bytes.data(), 512);
        std::vector<float> y(512), z(512);
        tr.to_float(bytes.data(), y.data(), 512);
        switch (t) {
        case TSR_TYPE_Q4_K: {
            std::vector<block_q4_k> q(2);
            quantize_row_q4_k_ref(x.data(), q.data(), 512);
            ASSERT_EQ(std::memcmp(q.data(), bytes.data(), bytes.size()), 0);
            dequantize_row_q4_k(q.data(), z.data(), 512);
            break;
        }
        case TSR_TYPE_Q5_K: {
            std::vector<block_q5_k> q(2);
            quantize_row_q5_k_ref(x.data(), q.data(), 512);
            ASSERT_EQ(std::memcmp(q.data(), bytes.data(), bytes.size()), 0);
            dequantize_row_q5_k(q.data(), z.data(), 512);
            break;
        }
        case TSR_TYPE_Q6_K: {
            std::vector<block_q6_k> q(2);
            quantize_row_q6_k_ref(x.data(), q.data(), 512);
            ASSERT_EQ(std::memcmp(q.data(), bytes.data(), bytes.size()), 0);
            dequantize_row_q6_k(q.data(), z.data(), 512);
            break;
        }
        default: {
            std::vector<block_q8_k> q(2);
            quantize_row_q8_k_ref(x.data(), q.data(), 512);
            ASSERT_EQ(std::memcmp(q.data(), bytes.data(), bytes.size()), 0);
            dequantize_row_q8_k(q.data(), z.data(), 512);
        }
        }
        EXPECT_EQ(y, z) << type_name(t);
    }
}

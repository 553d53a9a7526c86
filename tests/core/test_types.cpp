// Type traits table and the reference Q8_0 / Q4_0 block formats.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tessera/core/error.hpp"
#include "tessera/core/types.hpp"
#include "support/error_of.hpp"

using namespace tessera;

namespace {

struct expected_traits {
    int id;
    const char * name;
    int64_t block_size;
    size_t type_size;
    bool quantized;
};

// Block geometry of every GGUF type id (GGUF spec / ggml-common.h block structs).
const expected_traits k_expected[] = {
    {0, "F32", 1, 4, false},        {1, "F16", 1, 2, false},         {2, "Q4_0", 32, 18, true},
    {3, "Q4_1", 32, 20, true},      {6, "Q5_0", 32, 22, true},       {7, "Q5_1", 32, 24, true},
    {8, "Q8_0", 32, 34, true},      {9, "Q8_1", 32, 36, true},       {10, "Q2_K", 256, 84, true},
    {11, "Q3_K", 256, 110, true},   {12, "Q4_K", 256, 144, true},    {13, "Q5_K", 256, 176, true},
    {14, "Q6_K", 256, 210, true},   {15, "Q8_K", 256, 292, true},    {16, "IQ2_XXS", 256, 66, true},
    {17, "IQ2_XS", 256, 74, true},  {18, "IQ3_XXS", 256, 98, true},  {19, "IQ1_S", 256, 50, true},
    {20, "IQ4_NL", 32, 18, true},   {21, "IQ3_S", 256, 110, true},   {22, "IQ2_S", 256, 82, true},
    {23, "IQ4_XS", 256, 136, true}, {24, "I8", 1, 1, false},         {25, "I16", 1, 2, false},
    {26, "I32", 1, 4, false},       {27, "I64", 1, 8, false},        {28, "F64", 1, 8, false},
    {29, "IQ1_M", 256, 56, true},   {30, "BF16", 1, 2, false},       {34, "TQ1_0", 256, 54, true},
    {35, "TQ2_0", 256, 66, true},   {39, "MXFP4", 32, 17, true},
};

using tessera::test::error_of; // support/error_of.hpp

} // namespace

TEST(TypeTraits, EveryGgufTypeHasItsBlockGeometry) {
    int valid = 0;
    for (const auto & e : k_expected) {
        SCOPED_TRACE(e.name);
        ASSERT_TRUE(type_is_valid(e.id));
        const type_traits & t = get_type_traits(e.id);
        EXPECT_STREQ(t.name, e.name);
        EXPECT_EQ(t.block_size, e.block_size);
        EXPECT_EQ(t.type_size, e.type_size);
        EXPECT_EQ(t.is_quantized, e.quantized);
        EXPECT_EQ(type_name(e.id), e.name);
        EXPECT_EQ(type_from_name(e.name), e.id);
        ++valid;
    }
    int n_valid = 0;
    for (int id = -5; id < TSR_TYPE_COUNT + 5; ++id) n_valid += type_is_valid(id) ? 1 : 0;
    EXPECT_EQ(n_valid, valid);
}

TEST(TypeTraits, ConvertersPresentWhereImplemented) {
    for (int id : {TSR_TYPE_F32, TSR_TYPE_F16, TSR_TYPE_BF16, TSR_TYPE_Q8_0, TSR_TYPE_Q4_0, TSR_TYPE_Q5_0, TSR_TYPE_Q5_1,
                   TSR_TYPE_Q4_K, TSR_TYPE_Q5_K, TSR_TYPE_Q6_K, TSR_TYPE_Q8_K}) {
        EXPECT_NE(get_type_traits(id).to_float, nullptr) << id;
        EXPECT_NE(get_type_traits(id).from_float, nullptr) << id;
    }
    EXPECT_EQ(get_type_traits(TSR_TYPE_Q3_K).to_float, nullptr);
}

TEST(TypeTraits, InvalidIdsAndNames) {
    for (int id : {-1, 4, 5, 31, 32, 33, 36, 37, 38, 40, 1000}) {
        EXPECT_FALSE(type_is_valid(id)) << id;
        EXPECT_EQ(type_name(id), "unknown(" + std::to_string(id) + ")");
        EXPECT_NE(error_of([&] { get_type_traits(id); }).find(std::to_string(id)), std::string::npos);
    }
    EXPECT_NE(error_of([] { type_from_name("Q4_X"); }).find("Q4_X"), std::string::npos);
    EXPECT_THROW(type_from_name("q4_0"), tessera::error); // case-sensitive
}

TEST(TypeTraits, RowSize) {
    EXPECT_EQ(row_size(TSR_TYPE_F32, 7), 28u);
    EXPECT_EQ(row_size(TSR_TYPE_Q4_0, 4096), 4096u / 32 * 18);
    EXPECT_EQ(row_size(TSR_TYPE_Q4_K, 512), 288u);
    EXPECT_EQ(row_size(TSR_TYPE_Q8_0, 0), 0u);
    const std::string msg = error_of([] { row_size(TSR_TYPE_Q4_0, 33); });
    EXPECT_NE(msg.find("33"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Q4_0"), std::string::npos) << msg;
    EXPECT_THROW(row_size(TSR_TYPE_Q6_K, 255), tessera::error);
    EXPECT_THROW(row_size(static_cast<type>(4), 32), tessera::error);
}

// --- Q8_0 ---------------------------------------------------------------------

TEST(Q8_0, ExactBytes) {
    std::vector<float> x(32 * 3, 0.0f);
    // Block 0: amax = 127 -> d = 1 (f16 0x3c00), q = roundf(x) (ties away from 0).
    const float b0[8] = {127.0f, 2.5f, -2.5f, 0.49f, -127.0f, 0.5f, -0.5f, 100.4999f};
    for (int i = 0; i < 8; ++i) x[i] = b0[i];
    for (int i = 8; i < 32; ++i) x[i] = static_cast<float>(i - 16);
    // Block 1: amax = 63.5 -> d = 0.5 (f16 0x3800), id = 2, q = roundf(2x).
    float * b1 = x.data() + 32;
    b1[0] = 63.5f;  // 127
    b1[1] = -0.25f; // -0.5 -> -1
    b1[2] = 0.75f;  // 1.5 -> 2
    b1[3] = 1.25f;  // 2.5 -> 3
    b1[4] = 0.2f;   // 0.4 -> 0
    b1[5] = -10.0f; // -20
    for (int i = 6; i < 32; ++i) b1[i] = static_cast<float>(i - 16) * 0.5f; // i - 16
    // Block 2: all zero -> d = 0, q = 0.

    const uint8_t expected[34 * 3] = {
        // block 0
        0x00, 0x3c, 0x7f, 0x03, 0xfd, 0x00, 0x81, 0x01, 0xff, 0x64, 0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe,
        0xff, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
        // block 1
        0x00, 0x38, 0x7f, 0xff, 0x02, 0x03, 0x00, 0xec, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe,
        0xff, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
        // block 2
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    };
    block_q8_0 y[3];
    quantize_row_q8_0_ref(x.data(), y, 96);
    uint8_t got[sizeof y];
    std::memcpy(got, y, sizeof y);
    for (size_t i = 0; i < sizeof y; ++i) EXPECT_EQ(got[i], expected[i]) << "byte " << i;

    // The same bytes through the traits' from_float.
    block_q8_0 y2[3];
    get_type_traits(TSR_TYPE_Q8_0).from_float(x.data(), y2, 96);
    EXPECT_EQ(std::memcmp(y, y2, sizeof y), 0);

    float back[96];
    dequantize_row_q8_0(y, back, 96);
    EXPECT_EQ(back[1], 3.0f);
    EXPECT_EQ(back[32 + 1], -0.5f);
    EXPECT_EQ(back[32 + 3], 1.5f);
}

TEST(Q8_0, DequantizeUsesTheF16RoundedScale) {
    // amax = 1: d = 1/127 rounds to f16 0x2008 = 2^-7 * (1 + 8/1024).
    float x[32] = {1.0f};
    block_q8_0 y;
    quantize_row_q8_0_ref(x, &y, 32);
    EXPECT_EQ(y.d, 0x2008);
    EXPECT_EQ(y.qs[0], 127);
    float back[32];
    dequantize_row_q8_0(&y, back, 32);
    EXPECT_EQ(back[0], 0.99993896484375f); // 127 * 1032 / 131072, not 1.0
    EXPECT_EQ(back[1], 0.0f);
}

TEST(Q8_0, ErrorBound) {
    // Per block: |x - y| <= d/2 (rounding to the nearest quant) + 127 |d - d16|
    // (the stored scale is f16-rounded) + a float-rounding slack of 1e-4 d.
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const int n = 32 * 256;
    std::vector<float> x(n), y(n);
    for (int i = 0; i < n; ++i) x[i] = nd(rng) * std::pow(10.0f, static_cast<float>(i / 32 % 9) - 4.0f);
    std::vector<block_q8_0> q(n / 32);
    quantize_row_q8_0_ref(x.data(), q.data(), n);
    dequantize_row_q8_0(q.data(), y.data(), n);
    double worst_ratio = 0;
    for (int b = 0; b < n / 32; ++b) {
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
        const double d = amax / 127.0;
        const double d16 = f16_to_f32(q[b].d);
        const double bound = 0.5 * d + 127 * std::fabs(d - d16) + 1e-4 * d;
        for (int j = 0; j < 32; ++j) {
            const double err = std::fabs(static_cast<double>(x[b * 32 + j]) - y[b * 32 + j]);
            ASSERT_LE(err, bound) << "block " << b << " elem " << j;
            worst_ratio = std::max(worst_ratio, err / d);
        }
    }
    EXPECT_GT(worst_ratio, 0.4); // the bound is not vacuous
}

TEST(Q8_0, RejectsPartialBlock) {
    float x[40] = {};
    block_q8_0 y[2];
    EXPECT_THROW(quantize_row_q8_0_ref(x, y, 40), tessera::error);
}

// --- Q4_0 ---------------------------------------------------------------------

TEST(Q4_0, ExactBytes) {
    std::vector<float> x(32 * 4, 0.0f);
    // Block 0: max = -8 (x[0]) -> d = 1 (0x3c00), q = min(15, (int)(x + 8.5)).
    for (int j = 0; j < 16; ++j) {
        x[j] = static_cast<float>(j - 8);       // q = j
        x[16 + j] = static_cast<float>(7 - j);  // q = 15 - j
    }
    // Block 1: max = +8 -> d = -1 (0xbc00), id = -1, q = min(15, (int)(8.5 - x)).
    float * b1 = x.data() + 32;
    const float v1[8] = {8.0f, -8.0f, 0.4f, -0.6f, 0.5f, 0.6f, 3.0f, -3.0f}; // q: 0 15(clamped) 8 9 8 7 5 11
    for (int j = 0; j < 8; ++j) b1[j] = v1[j];                                // b1[8..15] = 0 -> q = 8
    b1[16] = 7.9f;                                                            // q = 0
    b1[17] = -7.9f;                                                           // 16.4 -> clamped 15
    for (int j = 18; j < 32; ++j) b1[j] = 1.0f;                               // 7.5 -> 7
    // Block 2: |4| == |-4|: the first wins, max = 4 -> d = -0.5 (0xb800), id = -2.
    float * b2 = x.data() + 64;
    b2[0] = 4.0f;  // 0.5 -> 0
    b2[1] = -4.0f; // 16.5 -> clamped 15
    b2[2] = 1.3f;  // 5.9 -> 5
    b2[3] = -1.3f; // 11.1 -> 11;   the rest 0 -> 8
    // Block 3: all zero -> d = 0 / -8 = -0.0 (0x8000), id = 0, q = 8.

    const uint8_t expected[18 * 4] = {
        0x00, 0x3c, 0xf0, 0xe1, 0xd2, 0xc3, 0xb4, 0xa5, 0x96, 0x87, 0x78, 0x69, 0x5a, 0x4b, 0x3c, 0x2d, 0x1e, 0x0f,
        0x00, 0xbc, 0x00, 0xff, 0x78, 0x79, 0x78, 0x77, 0x75, 0x7b, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
        0x00, 0xb8, 0x80, 0x8f, 0x85, 0x8b, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88,
        0x00, 0x80, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88,
    };
    block_q4_0 y[4];
    quantize_row_q4_0_ref(x.data(), y, 128);
    uint8_t got[sizeof y];
    std::memcpy(got, y, sizeof y);
    for (size_t i = 0; i < sizeof y; ++i) EXPECT_EQ(got[i], expected[i]) << "byte " << i;

    float back[128];
    get_type_traits(TSR_TYPE_Q4_0).to_float(y, back, 128);
    EXPECT_EQ(back[0], -8.0f);
    EXPECT_EQ(back[31], -8.0f);
    EXPECT_EQ(back[32 + 1], -7.0f); // clamped: error |d| = 1
    EXPECT_EQ(back[32 + 3], -1.0f);
    EXPECT_EQ(back[64 + 2], 1.5f);
    EXPECT_EQ(back[96], 0.0f);
}

TEST(Q4_0, ErrorBound) {
    // |x - y| <= |d|/2 for elements whose x/d + 8.5 stays below 16, and
    // <= |d| for the clamped ones (x = -max); plus 8 |d - d16| for the f16
    // scale and a 1e-4 |d| float-rounding slack.
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
    const int n = 32 * 256;
    std::vector<float> x(n), y(n);
    for (int i = 0; i < n; ++i) x[i] = ud(rng) * std::pow(10.0f, static_cast<float>(i / 32 % 7) - 3.0f);
    std::vector<block_q4_0> q(n / 32);
    quantize_row_q4_0_ref(x.data(), q.data(), n);
    dequantize_row_q4_0(q.data(), y.data(), n);
    double worst_ratio = 0;
    int n_clamped = 0;
    for (int b = 0; b < n / 32; ++b) {
        float amax = 0, max = 0;
        for (int j = 0; j < 32; ++j) {
            if (amax < std::fabs(x[b * 32 + j])) {
                amax = std::fabs(x[b * 32 + j]);
                max = x[b * 32 + j];
            }
        }
        const double d = max / -8.0;
        const double d16 = f16_to_f32(q[b].d);
        for (int j = 0; j < 32; ++j) {
            const double xv = x[b * 32 + j];
            const bool clamped = xv / d + 8.5 >= 16.0;
            const double bound = (clamped ? 1.0 : 0.5) * std::fabs(d) + 8 * std::fabs(d - d16) + 1e-4 * std::fabs(d);
            const double err = std::fabs(xv - y[b * 32 + j]);
            ASSERT_LE(err, bound) << "block " << b << " elem " << j;
            if (!clamped) worst_ratio = std::max(worst_ratio, err / std::fabs(d));
            n_clamped += clamped ? 1 : 0;
        }
    }
    EXPECT_GT(worst_ratio, 0.4);
    EXPECT_GT(n_clamped, 0); // the clamp case was exercised
}

// F16 / BF16 conversion: exhaustive round trips and comparison with a
// separately written double-precision round-to-nearest-even reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "tessera/core/types.hpp"

using namespace tessera;

namespace {

float float_of(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// --- reference: a 16-bit format described by its exponent/mantissa widths ---
// Value of a non-negative pattern p (below the Inf pattern) in double, by the
// IEEE 754 definition; the Inf pattern itself gets the value it would have with
// an unbounded exponent (2^(emax+1)), so that "nearest, ties to even" across
// the top of the range gives Inf exactly where IEEE rounding overflows.
struct fmt16 {
    int mbits; // mantissa bits (10 for binary16, 7 for bfloat16)
    int bias;  // exponent bias (15, 127)
    uint16_t inf_bits() const { return static_cast<uint16_t>(((1u << (15 - mbits)) - 1) << mbits); }
    double value(uint16_t p) const {
        const int e = p >> mbits;
        const int m = p & ((1 << mbits) - 1);
        if (e == 0) return std::ldexp(static_cast<double>(m), 1 - bias - mbits);
        return std::ldexp(static_cast<double>((1 << mbits) + m), e - bias - mbits);
    }
};

const fmt16 k_f16{10, 15};
const fmt16 k_bf16{7, 127};

// Round a finite float to the format: nearest representable, ties to the even
// pattern; the result may be the Inf pattern.
uint16_t ref_round(const fmt16 & fm, float f) {
    const double a = std::fabs(static_cast<double>(f));
    const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    const uint16_t top = fm.inf_bits();
    if (a >= fm.value(top)) return sign | top;
    // Largest p with value(p) <= a (values increase with p).
    uint16_t lo = 0, hi = top; // value(lo) <= a < value(hi)
    while (hi - lo > 1) {
        const uint16_t mid = static_cast<uint16_t>((lo + hi) / 2);
        if (fm.value(mid) <= a) lo = mid; else hi = mid;
    }
    const double dlo = a - fm.value(lo), dhi = fm.value(hi) - a;
    uint16_t p;
    if (dlo < dhi) p = lo;
    else if (dhi < dlo) p = hi;
    else p = (lo & 1) ? hi : lo;
    return sign | p;
}

std::vector<float> edge_floats() {
    std::vector<float> v = {
        0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.996f, 65520.0f, -65520.0f, 65536.0f, 1e6f, FLT_MAX,
        -FLT_MAX, FLT_MIN, -FLT_MIN, std::numeric_limits<float>::denorm_min(), 0x1p-14f, 0x1p-24f, 0x1p-25f,
        0x1.000002p-25f, 0x1.8p-24f /* tie 1.5 ulp -> 2 */, 0x1.4p-24f, 0x3p-25f, 0x1p-14f - 0x1p-25f,
        1.0f + 0x1p-11f /* tie -> even (1.0) */, 1.0f + 0x3p-11f /* tie -> even (up) */, 0.1f, 1.0f / 3.0f,
        3.3895314e38f, 0x1.fffffep127f, 0x1.fe0000p127f, 0x1.ff0000p127f, 0x1.ff0002p127f,
        0x1p-126f, 0x1p-133f, 0x1.8p-133f, 0x1p-134f, 0x1.000002p-134f};
    return v;
}

// Every midpoint between adjacent finite patterns, and its float neighbours.
std::vector<float> midpoints(const fmt16 & fm) {
    std::vector<float> v;
    for (uint32_t p = 0; p < fm.inf_bits(); ++p) {
        const double mid = (fm.value(static_cast<uint16_t>(p)) + fm.value(static_cast<uint16_t>(p + 1))) / 2;
        const float m = static_cast<float>(mid);
        if (static_cast<double>(m) != mid || std::isinf(m)) continue; // not exactly representable
        for (float x : {m, std::nextafter(m, 0.0f), std::nextafter(m, INFINITY)}) {
            v.push_back(x);
            v.push_back(-x);
        }
    }
    return v;
}

std::vector<float> random_floats(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<float> v;
    std::uniform_int_distribution<uint32_t> any;
    std::uniform_int_distribution<uint32_t> exp16(98, 145); // around the binary16 range
    for (size_t i = 0; i < n; ++i) {
        uint32_t u = any(rng);
        if (i % 2 == 0) u = (u & 0x807fffffu) | (exp16(rng) << 23);
        const float f = float_of(u);
        if (!std::isnan(f)) v.push_back(f);
    }
    return v;
}

} // namespace

TEST(F16, ToF32ExactForAllPatterns) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const float f = f16_to_f32(static_cast<f16_bits>(h));
        const uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
        const bool neg = (h & 0x8000) != 0;
        ASSERT_EQ(std::signbit(f), neg) << std::hex << h;
        if (e == 31 && m == 0) {
            ASSERT_TRUE(std::isinf(f)) << std::hex << h;
        } else if (e == 31) {
            ASSERT_TRUE(std::isnan(f)) << std::hex << h;
        } else {
            ASSERT_EQ(static_cast<double>(std::fabs(f)), k_f16.value(static_cast<uint16_t>(h & 0x7fff)))
                << std::hex << h;
        }
    }
}

TEST(F16, RoundTripAllPatterns) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const f16_bits back = f32_to_f16(f16_to_f32(static_cast<f16_bits>(h)));
        const bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
        if (is_nan) {
            // Still a NaN, same sign, same payload with the quiet bit set.
            ASSERT_EQ(back & 0x7c00, 0x7c00) << std::hex << h;
            ASSERT_EQ(back, h | 0x0200) << std::hex << h;
        } else {
            ASSERT_EQ(back, h) << std::hex << h;
        }
    }
}

TEST(F16, FromF32MatchesReference) {
    std::vector<float> xs = edge_floats();
    for (float f : midpoints(k_f16)) xs.push_back(f);
    for (float f : random_floats(200000, 1234)) xs.push_back(f);
    for (float f : xs) {
        ASSERT_EQ(f32_to_f16(f), ref_round(k_f16, f)) << std::hexfloat << f;
    }
    // Spot checks written out by hand.
    EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
    EXPECT_EQ(f32_to_f16(65519.996f), 0x7bff);
    EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);
    EXPECT_EQ(f32_to_f16(-1e10f), 0xfc00);
    EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);         // tie between 0 and 2^-24 -> 0 (even)
    EXPECT_EQ(f32_to_f16(0x1.000002p-25f), 0x0001);  // just above the tie
    EXPECT_EQ(f32_to_f16(0x3p-25f), 0x0002);         // 1.5 * 2^-24: tie -> 2 (even)
    EXPECT_EQ(f32_to_f16(0x1p-14f - 0x1p-25f), 0x0400); // tie between 0x3ff and 0x400 -> even
    EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
    EXPECT_EQ(f32_to_f16(1.0f + 0x3p-11f), 0x3c02);
    EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
}

TEST(F16, NanAndInf) {
    EXPECT_EQ(f32_to_f16(INFINITY), 0x7c00);
    EXPECT_EQ(f32_to_f16(-INFINITY), 0xfc00);
    // Quiet NaN with payload: top 10 payload bits kept, quiet bit set.
    EXPECT_EQ(f32_to_f16(float_of(0x7fc00000u)), 0x7e00);
    EXPECT_EQ(f32_to_f16(float_of(0xffc00000u)), 0xfe00);
    EXPECT_EQ(f32_to_f16(float_of(0x7f802000u)), 0x7e01);          // signaling, payload bit 13
    EXPECT_EQ(f32_to_f16(float_of(0x7f800001u)), 0x7e00);          // payload only in low bits
    EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(float_of(0x7f800001u)))));
}

TEST(BF16, ToF32ExactForAllPatterns) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const float f = bf16_to_f32(static_cast<bf16_bits>(h));
        const uint32_t e = (h >> 7) & 0xff, m = h & 0x7f;
        ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0);
        if (e == 255) {
            ASSERT_EQ(std::isnan(f), m != 0) << std::hex << h;
            ASSERT_EQ(std::isinf(f), m == 0) << std::hex << h;
        } else {
            ASSERT_EQ(static_cast<double>(std::fabs(f)), k_bf16.value(static_cast<uint16_t>(h & 0x7fff)))
                << std::hex << h;
        }
    }
}

TEST(BF16, RoundTripAllPatterns) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const bf16_bits back = f32_to_bf16(bf16_to_f32(static_cast<bf16_bits>(h)));
        const bool is_nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0;
        if (is_nan) {
            ASSERT_EQ(back, h | 0x0040) << std::hex << h; // quiet bit set, sign and payload kept
        } else {
            ASSERT_EQ(back, h) << std::hex << h;
        }
    }
}

TEST(BF16, FromF32MatchesReference) {
    std::vector<float> xs = edge_floats();
    for (float f : midpoints(k_bf16)) xs.push_back(f);
    for (float f : random_floats(200000, 99)) xs.push_back(f);
    for (float f : xs) {
        ASSERT_EQ(f32_to_bf16(f), ref_round(k_bf16, f)) << std::hexfloat << f;
    }
    EXPECT_EQ(f32_to_bf16(FLT_MAX), 0x7f80);            // rounds up to Inf
    EXPECT_EQ(f32_to_bf16(float_of(0x7f7f7fffu)), 0x7f7f);
    EXPECT_EQ(f32_to_bf16(float_of(0x3f808000u)), 0x3f80); // tie -> even (down)
    EXPECT_EQ(f32_to_bf16(float_of(0x3f818000u)), 0x3f82); // tie -> even (up)
    EXPECT_EQ(f32_to_bf16(float_of(0x00008000u)), 0x0000); // subnormal tie -> 0
    EXPECT_EQ(f32_to_bf16(float_of(0x00018000u)), 0x0002);
    EXPECT_EQ(f32_to_bf16(float_of(0x7fc00000u)), 0x7fc0);
    EXPECT_EQ(f32_to_bf16(float_of(0xff800001u)), 0xffc0); // signaling NaN -> quiet, sign kept
    EXPECT_EQ(f32_to_bf16(float_of(0x7fa10000u)), 0x7fe1); // payload kept
}

TEST(F16, RowConvertersThroughTraits) {
    const type_traits & f16 = get_type_traits(TSR_TYPE_F16);
    const type_traits & bf16 = get_type_traits(TSR_TYPE_BF16);
    const float x[4] = {1.0f, -2.5f, 65504.0f, 0.1f};
    uint16_t h[4];
    float y[4];
    f16.from_float(x, h, 4);
    EXPECT_EQ(h[0], 0x3c00);
    EXPECT_EQ(h[1], 0xc100);
    EXPECT_EQ(h[2], 0x7bff);
    EXPECT_EQ(h[3], 0x2e66); // 0.1 -> 0.0999755859375
    f16.to_float(h, y, 4);
    EXPECT_EQ(y[3], 0.0999755859375f);
    bf16.from_float(x, h, 4);
    EXPECT_EQ(h[0], 0x3f80);
    EXPECT_EQ(h[1], 0xc020);
    EXPECT_EQ(h[3], 0x3dcd); // 0.1 = 0x3dcccccd -> rounds up
    bf16.to_float(h, y, 4);
    EXPECT_EQ(y[1], -2.5f);
}

// The element-wise kernels' vector paths (AVX2 builds: simd::exp8 in
// SILU and SOFT_MAX, F16C conversion in SET_ROWS) over the whole input
// range, special values included, against references computed here: SiLU
// and soft-max in double, F32 -> F16 by the IEEE 754 rule (round to
// nearest even) implemented test-side. The baseline build checks the
// portable code on the same inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "backends/cpu/ref_util.hpp"

namespace tessera::cpu::test {
namespace {

constexpr float k_inf = std::numeric_limits<float>::infinity();
constexpr float k_nan = std::numeric_limits<float>::quiet_NaN();

// SiLU on a dense sweep of [-120, 120] (e^-x overflowing and vanishing,
// results subnormal) and special values, rows long enough for the vector
// loop plus a tail.
TEST(VectorMath, SiluWholeRange) {
    context ctx(data_ctx());
    const int64_t n = 4803; // not a multiple of 8
    tsr_tensor * a = ctx.new_tensor(TSR_TYPE_F32, {n, 2});
    for (int64_t i = 0; i < n; ++i) {
        set_f32(a, -120.0f + 240.0f * static_cast<float>(i) / static_cast<float>(n - 1), i, 0);
        set_f32(a, static_cast<float>(i % 97) * 0.37f - 18.0f, i, 1);
    }
    const float specials[] = {0.0f, -0.0f, k_inf, -k_inf, k_nan, 88.7f, -88.7f, 103.9f, -103.9f, 1e-30f, -1e-30f};
    for (size_t j = 0; j < std::size(specials); ++j) set_f32(a, specials[j], static_cast<int64_t>(j * 37), 1);
    tsr_tensor * out = silu(ctx, a);
    ASSERT_EQ(compute(out, 2), TSR_STATUS_SUCCESS);
    for (int64_t r = 0; r < 2; ++r) {
        for (int64_t i = 0; i < n; ++i) {
            const double x = get(a, i, r);
            const double got = get(out, i, r);
            if (std::isnan(x) || x == -INFINITY) { // -inf / (1 + inf) is NaN, as in IEEE arithmetic
                EXPECT_TRUE(std::isnan(got)) << "x=" << x << " got " << got;
                continue;
            }
            const double want = x == INFINITY ? INFINITY : x / (1.0 + std::exp(-x));
            if (std::isinf(want)) {
                EXPECT_EQ(got, want) << "x=" << x;
                continue;
            }
            // 2 ulp of e^-x plus the roundings of the sum and the quotient;
            // below x = -88.72 e^-x overflows F32 and the result is -0
            // where the true value is under 3e-37 in magnitude.
            ASSERT_NEAR(got, want, 6e-7 * std::fabs(want) + 3e-37) << "x=" << x;
        }
    }
}

// Soft-max of rows with a wide spread (differences far below -104, the
// point where e^x vanishes), -inf mask entries and one row entirely
// masked.
TEST(VectorMath, SoftMaxWideSpreadAndMasks) {
    context ctx(data_ctx());
    const int64_t n = 203, rows = 4;
    std::mt19937 rng(9);
    std::uniform_real_distribution<float> dist(-150.0f, 20.0f);
    tsr_tensor * a = ctx.new_tensor(TSR_TYPE_F32, {n, rows});
    tsr_tensor * mask = ctx.new_tensor(TSR_TYPE_F32, {n, rows});
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t i = 0; i < n; ++i) {
            set_f32(a, dist(rng), i, r);
            set_f32(mask, r == 3 || (i % 5 == 0 && r == 1) ? -k_inf : 0.0f, i, r);
        }
    }
    tsr_tensor * out = soft_max(ctx, a, mask, 1.5f);
    ASSERT_EQ(compute(out, 3), TSR_STATUS_SUCCESS);
    for (int64_t r = 0; r < rows; ++r) {
        double max = -INFINITY;
        std::vector<double> v(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
            v[i] = 1.5 * static_cast<double>(static_cast<float>(get(a, i, r))) + get(mask, i, r);
            max = std::max(max, v[i]);
        }
        double sum = 0;
        for (int64_t i = 0; i < n; ++i) sum += max == -INFINITY ? 0.0 : std::exp(v[i] - max);
        for (int64_t i = 0; i < n; ++i) {
            const double want = max == -INFINITY ? 0.0 : std::exp(v[i] - max) / sum;
            ASSERT_NEAR(get(out, i, r), want, 1e-6 * want + 1e-9) << "row " << r << " i " << i;
        }
    }
}

// IEEE 754 binary32 -> binary16, round to nearest even; NaN -> quiet NaN
// keeping the sign and the top 9 payload bits.
uint16_t ref_f32_to_f16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x1ffu));
    const double v = std::fabs(static_cast<double>(f));
    if (v >= 65520.0) return sign | 0x7c00u; // 65504 + half an ulp and beyond (and Inf)
    // Scale to units of the F16 ulp at v's binade and round half to even.
    int e = v == 0 ? -24 : std::ilogb(v);
    e = std::max(e, -14);
    const double ulp = std::ldexp(1.0, e - 10);
    const double q = std::nearbyint(v / ulp); // default rounding mode: ties to even
    const double r = q * ulp;
    if (r == 0) return sign;
    int re = std::ilogb(r);
    if (re < -14) return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::lround(r / std::ldexp(1.0, -24))));
    const auto mant = static_cast<uint16_t>(std::lround(r / std::ldexp(1.0, re - 10)) - 1024);
    return static_cast<uint16_t>(sign | ((re + 15) << 10) | mant);
}

// SET_ROWS into an F16 cache converts exactly like IEEE rounding: ties,
// subnormals, overflow to infinity, NaN.
TEST(VectorMath, SetRowsF16ConversionExact) {
    context ctx(data_ctx());
    const int64_t n = 1000, rows = 3;
    std::mt19937 rng(4);
    std::uniform_int_distribution<uint32_t> bits;
    tsr_tensor * src = ctx.new_tensor(TSR_TYPE_F32, {n, rows});
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t i = 0; i < n; ++i) {
            float v;
            if (r == 0) { // random bit patterns with exponents near F16's range
                uint32_t u = bits(rng);
                u = (u & 0x807fffffu) | ((100u + u % 50u) << 23);
                std::memcpy(&v, &u, 4);
            } else if (r == 1) { // exact ties between F16 neighbours, and subnormals
                v = std::ldexp(static_cast<float>(2 * (i % 2048) + 1), static_cast<int>(i % 40) - 35);
            } else {
                const float special[] = {0.0f, -0.0f, k_inf, -k_inf, k_nan, -k_nan, 65504.0f, 65519.99f, 65520.0f,
                                         1e-8f, 5.96e-8f, 2.98e-8f, 2.99e-8f, 6.1e-5f, 1.0f + 1.0f / 2048.0f};
                v = special[i % std::size(special)];
            }
            set_f32(src, v, i, r);
        }
    }
    tsr_tensor * dst = ctx.new_tensor(TSR_TYPE_F16, {n, 5});
    std::memset(dst->data, 0, nbytes(dst));
    tsr_tensor * idx = ctx.new_tensor(TSR_TYPE_I32, {rows});
    for (int64_t r = 0; r < rows; ++r) set_i32(idx, static_cast<int32_t>(4 - r), r);
    tsr_tensor * out = set_rows(ctx, dst, src, idx);
    ASSERT_EQ(compute(out, 2), TSR_STATUS_SUCCESS);
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t i = 0; i < n; ++i) {
            const float v = static_cast<float>(get(src, i, r));
            uint16_t got;
            std::memcpy(&got, elem_ptr(dst, i, 4 - r, 0, 0), 2);
            ASSERT_EQ(got, ref_f32_to_f16(v)) << "row " << r << " i " << i << " value " << v;
        }
    }
}

} // namespace
} // namespace tessera::cpu::test

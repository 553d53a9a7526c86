// ADD, MUL (broadcast), SCALE, SILU, GELU, RMS_NORM against double-precision
// references, on packed and non-contiguous (permuted/transposed) inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "backends/cpu/ref_util.hpp"

namespace tessera::cpu::test {
namespace {

// An F32 tensor of shape ne filled with random values: packed, or a
// permuted view of a packed tensor (dims 0 and 1 swapped, so nb[0] != 4).
tsr_tensor * make_input(context & ctx, std::mt19937 & rng, std::array<int64_t, 4> ne, bool permuted) {
    tsr_tensor * t = nullptr;
    if (permuted) {
        tsr_tensor * base = ctx.new_tensor(TSR_TYPE_F32, {ne[1], ne[0], ne[2], ne[3]});
        t = permute(ctx, base, 1, 0, 2, 3);
    } else {
        t = ctx.new_tensor(TSR_TYPE_F32, {ne[0], ne[1], ne[2], ne[3]});
    }
    fill_uniform(t, rng, -2.0f, 2.0f);
    return t;
}

// Relative tolerance of single F32 operations (a few ulps).
constexpr double k_rel = 4e-7;

struct binary_case {
    std::array<int64_t, 4> a, b;
    bool a_perm, b_perm;
};

class BinaryOps : public ::testing::TestWithParam<binary_case> {};

TEST_P(BinaryOps, AddAndMulMatchReferenceWithBroadcast) {
    const binary_case c = GetParam();
    for (int op = 0; op < 2; ++op) {
        for (int nth : thread_counts()) {
            context ctx(data_ctx());
            std::mt19937 rng(7 + op);
            tsr_tensor * a = make_input(ctx, rng, c.a, c.a_perm);
            tsr_tensor * b = make_input(ctx, rng, c.b, c.b_perm);
            tsr_tensor * out = op == 0 ? add(ctx, a, b) : mul(ctx, a, b);
            ASSERT_EQ(compute(out, nth), TSR_STATUS_SUCCESS);
            for_each_index(out, [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
                const double x = get(a, i0, i1, i2, i3);
                const double y = get(b, i0 % b->ne[0], i1 % b->ne[1], i2 % b->ne[2], i3 % b->ne[3]);
                const double want = op == 0 ? x + y : x * y;
                ASSERT_NEAR(get(out, i0, i1, i2, i3), want, k_rel * (std::fabs(x) + std::fabs(y) + std::fabs(want)))
                    << "op " << op << " at " << i0 << "," << i1 << "," << i2 << "," << i3;
            });
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, BinaryOps,
                         ::testing::Values(binary_case{{33, 3, 2, 2}, {33, 3, 2, 2}, false, false},
                                           binary_case{{33, 3, 2, 2}, {33, 1, 2, 1}, false, false},
                                           binary_case{{31, 4, 3, 2}, {1, 4, 1, 2}, false, false},
                                           binary_case{{4097, 3, 1, 1}, {4097, 1, 1, 1}, false, false},
                                           binary_case{{33, 5, 3, 2}, {33, 5, 1, 1}, true, false},
                                           binary_case{{3, 31, 2, 1}, {3, 1, 2, 1}, false, true},
                                           binary_case{{1, 1, 1, 1}, {1, 1, 1, 1}, false, false},
                                           binary_case{{6, 33, 2, 1}, {3, 11, 1, 1}, true, true}));

using unary_fn = std::function<double(double)>;

struct unary_case {
    const char * name;
    std::function<tsr_tensor *(context &, tsr_tensor *)> build;
    unary_fn ref;
    double rel; // relative tolerance, plus abs_tol absolute
    double abs_tol;
};

const std::vector<unary_case> & unary_cases() {
    static const std::vector<unary_case> cases = {
        {"scale", [](context & ctx, tsr_tensor * a) { return scale(ctx, a, -1.75f, 0.5f); },
         [](double x) { return -1.75 * x + 0.5; }, 1e-6, 1e-7},
        // SiLU and GELU use expf/tanhf: a few ulps of relative error.
        {"silu", [](context & ctx, tsr_tensor * a) { return silu(ctx, a); },
         [](double x) { return x / (1.0 + std::exp(-x)); }, 2e-6, 1e-7},
        {"gelu", [](context & ctx, tsr_tensor * a) { return gelu(ctx, a); },
         [](double x) {
             const double k = std::sqrt(2.0 / M_PI);
             return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
         },
         2e-6, 1e-6},
    };
    return cases;
}

TEST(UnaryOps, ScaleSiluGeluMatchReferenceOnOddAndPermutedShapes) {
    const std::array<int64_t, 4> shapes[] = {{1, 1, 1, 1}, {3, 31, 1, 1}, {33, 3, 2, 1}, {4097, 2, 1, 1}};
    for (const unary_case & uc : unary_cases()) {
        for (const auto & ne : shapes) {
            for (bool perm : {false, true}) {
                context ctx(data_ctx());
                std::mt19937 rng(11);
                tsr_tensor * a = make_input(ctx, rng, ne, perm);
                // Spread the inputs: large magnitudes exercise saturation.
                for_each_index(a, [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
                    const double v = get(a, i0, i1, i2, i3);
                    set_f32(a, static_cast<float>(v * ((i0 + i1) % 5 == 0 ? 40.0 : 4.0)), i0, i1, i2, i3);
                });
                tsr_tensor * out = uc.build(ctx, a);
                ASSERT_EQ(compute(out, perm ? 3 : 1), TSR_STATUS_SUCCESS);
                for_each_index(out, [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
                    const double want = uc.ref(get(a, i0, i1, i2, i3));
                    ASSERT_NEAR(get(out, i0, i1, i2, i3), want, uc.rel * std::fabs(want) + uc.abs_tol)
                        << uc.name << " x=" << get(a, i0, i1, i2, i3);
                });
            }
        }
    }
}

TEST(RmsNorm, MatchesReferenceOnOddSizesAndViews) {
    const int64_t sizes[] = {1, 3, 31, 33, 4097};
    for (int64_t n : sizes) {
        for (bool perm : {false, true}) {
            context ctx(data_ctx());
            std::mt19937 rng(static_cast<unsigned>(n));
            tsr_tensor * a = make_input(ctx, rng, {n, 3, 2, 1}, perm);
            const float eps = 1e-5f;
            tsr_tensor * out = rms_norm(ctx, a, eps);
            ASSERT_EQ(compute(out, 2), TSR_STATUS_SUCCESS);
            for (int64_t i2 = 0; i2 < 2; ++i2) {
                for (int64_t i1 = 0; i1 < 3; ++i1) {
                    double ss = 0;
                    for (int64_t i = 0; i < n; ++i) ss += get(a, i, i1, i2) * get(a, i, i1, i2);
                    const double s = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
                    for (int64_t i = 0; i < n; ++i) {
                        const double want = get(a, i, i1, i2) * s;
                        // F32 output of x * s with s correctly computed: ~1 ulp.
                        ASSERT_NEAR(get(out, i, i1, i2), want, 2e-7 * std::fabs(want) + 1e-12) << "n=" << n;
                    }
                }
            }
        }
    }
}

TEST(RmsNorm, ZeroRowGivesZeros) {
    context ctx(data_ctx());
    tsr_tensor * a = ctx.new_tensor(TSR_TYPE_F32, {8, 2});
    tsr_tensor * out = rms_norm(ctx, a, 1e-6f);
    ASSERT_EQ(compute(out, 1), TSR_STATUS_SUCCESS);
    for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(get(out, i, 1), 0.0);
}

// A row of subnormal values with eps 0: its scale 1/rms is past FLT_MAX
// (it became +inf as a float, and every output +-inf); y = x / rms is
// about 1 in size. Packed rows and a permuted view alike.
TEST(RmsNorm, SubnormalRowWithoutEpsStaysFinite) {
    for (bool perm : {false, true}) {
        context ctx(data_ctx());
        std::mt19937 rng(5);
        tsr_tensor * a = make_input(ctx, rng, {3, 2, 1, 1}, perm);
        const float row[3] = {1e-39f, 2e-39f, -1e-39f};
        for (int64_t i1 = 0; i1 < 2; ++i1) {
            for (int64_t i = 0; i < 3; ++i) set_f32(a, row[i], i, i1);
        }
        tsr_tensor * out = rms_norm(ctx, a, 0.0f);
        ASSERT_EQ(compute(out, 2), TSR_STATUS_SUCCESS);
        const double rms = std::sqrt((double(row[0]) * row[0] + double(row[1]) * row[1] + double(row[2]) * row[2]) / 3.0);
        for (int64_t i1 = 0; i1 < 2; ++i1) {
            for (int64_t i = 0; i < 3; ++i) {
                const double want = double(row[i]) / rms; // 0.707, 1.414, -0.707
                ASSERT_NEAR(get(out, i, i1), want, 2e-7 * std::fabs(want)) << "perm " << perm << " i " << i;
            }
        }
    }
}

} // namespace
} // namespace tessera::cpu::test

// CPY (type conversion in logical order, views on either side), CONT and
// ARGMAX against test-side references.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backends/cpu/ref_util.hpp"

namespace tessera::cpu::test {
namespace {

// Element k (logical order) of t as double.
double get_linear(const tsr_tensor * t, int64_t k) {
    const int64_t i0 = k % t->ne[0];
    k /= t->ne[0];
    const int64_t i1 = k % t->ne[1];
    k /= t->ne[1];
    return get(t, i0, i1, k % t->ne[2], k / t->ne[2]);
}

int64_t count(const tsr_tensor * t) {
    return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
}

// Tolerance of storing x in `ty` (see the format definitions): F32/same
// type exact, F16 2^-11 relative, BF16 2^-8 relative, Q8_0 0.6 amax/127,
// Q4_0 1.1 amax/8 (amax of x's 32-element block).
double conv_tol(int32_t ty, double x, double amax) {
    switch (ty) {
    case TSR_TYPE_F16: return std::ldexp(std::fabs(x), -11);
    case TSR_TYPE_BF16: return std::ldexp(std::fabs(x), -8);
    case TSR_TYPE_Q8_0: return 0.6 * amax / 127.0;
    case TSR_TYPE_Q4_0: return 1.1 * amax / 8.0;
    default: return 0.0;
    }
}

void check_copy(const tsr_tensor * a, const tsr_tensor * b) {
    ASSERT_EQ(count(a), count(b));
    for (int64_t k = 0; k < count(a); ++k) {
        const double x = get_linear(a, k);
        double amax = 0;
        if (b->type == TSR_TYPE_Q8_0 || b->type == TSR_TYPE_Q4_0) {
            for (int64_t j = k / 32 * 32; j < k / 32 * 32 + 32; ++j) amax = std::max(amax, std::fabs(get_linear(a, j)));
        }
        ASSERT_NEAR(get_linear(b, k), x, conv_tol(b->type, x, amax) + 1e-30)
            << type_name(a->type) << " -> " << type_name(b->type) << " element " << k;
    }
}

struct cpy_case {
    int32_t from, to;
    std::array<int64_t, 4> a_ne, b_ne;
    bool a_transposed, b_transposed;
};

class Cpy : public ::testing::TestWithParam<cpy_case> {};

// A tensor of shape ne: packed, or the transpose of a packed [ne1, ne0, ...].
tsr_tensor * make(context & ctx, int32_t ty, std::array<int64_t, 4> ne, bool transposed) {
    if (!transposed) return ctx.new_tensor(static_cast<type>(ty), {ne[0], ne[1], ne[2], ne[3]});
    return transpose(ctx, ctx.new_tensor(static_cast<type>(ty), {ne[1], ne[0], ne[2], ne[3]}));
}

TEST_P(Cpy, ConvertsInLogicalOrder) {
    const cpy_case c = GetParam();
    for (int nth : thread_counts()) {
        context ctx(data_ctx());
        std::mt19937 rng(static_cast<unsigned>(c.from * 40 + c.to));
        tsr_tensor * a = make(ctx, c.from, c.a_ne, c.a_transposed);
        if (c.from == TSR_TYPE_F32) fill_uniform(a, rng, -3.0f, 3.0f);
        else fill_weights(c.a_transposed ? a->src[0] : a, rng);
        tsr_tensor * b = make(ctx, c.to, c.b_ne, c.b_transposed);
        tsr_tensor * out = cpy(ctx, a, b);
        ASSERT_EQ(compute(out, nth), TSR_STATUS_SUCCESS);
        check_copy(a, b);
        if (c.from == c.to && !c.a_transposed && !c.b_transposed) {
            EXPECT_EQ(std::memcmp(a->data, b->data, nbytes(a)), 0) << "same-type packed copy is bit-exact";
        }
    }
}

INSTANTIATE_TEST_SUITE_P(
    Types, Cpy,
    ::testing::Values(cpy_case{TSR_TYPE_F32, TSR_TYPE_F16, {33, 4, 1, 1}, {33, 4, 1, 1}, false, false},
                      cpy_case{TSR_TYPE_F32, TSR_TYPE_BF16, {31, 3, 2, 1}, {31, 3, 2, 1}, true, false},
                      cpy_case{TSR_TYPE_F16, TSR_TYPE_F32, {33, 4, 1, 1}, {4, 33, 1, 1}, false, true},
                      cpy_case{TSR_TYPE_BF16, TSR_TYPE_F32, {3, 5, 1, 1}, {15, 1, 1, 1}, false, false},
                      cpy_case{TSR_TYPE_F32, TSR_TYPE_Q8_0, {64, 3, 1, 1}, {64, 3, 1, 1}, false, false},
                      cpy_case{TSR_TYPE_F32, TSR_TYPE_Q8_0, {6, 32, 1, 1}, {96, 2, 1, 1}, true, false},
                      cpy_case{TSR_TYPE_F32, TSR_TYPE_Q4_0, {96, 2, 1, 1}, {32, 6, 1, 1}, false, false},
                      cpy_case{TSR_TYPE_Q8_0, TSR_TYPE_F32, {64, 3, 1, 1}, {3, 64, 1, 1}, false, false},
                      cpy_case{TSR_TYPE_Q4_0, TSR_TYPE_F16, {32, 3, 1, 1}, {48, 2, 1, 1}, false, false},
                      cpy_case{TSR_TYPE_F32, TSR_TYPE_F32, {33, 5, 3, 1}, {5, 99, 1, 1}, true, false},
                      cpy_case{TSR_TYPE_F16, TSR_TYPE_F16, {7, 9, 1, 1}, {7, 9, 1, 1}, true, true},
                      cpy_case{TSR_TYPE_Q4_0, TSR_TYPE_Q4_0, {64, 3, 1, 1}, {32, 6, 1, 1}, false, false},
                      cpy_case{TSR_TYPE_F32, TSR_TYPE_F16, {4097, 1, 1, 1}, {4097, 1, 1, 1}, false, false}));

TEST(Cont, PacksViewsBitExactly) {
    for (int32_t ty : {TSR_TYPE_F32, TSR_TYPE_F16, TSR_TYPE_BF16}) {
        context ctx(data_ctx());
        std::mt19937 rng(8);
        tsr_tensor * base = ctx.new_tensor(static_cast<type>(ty), {5, 33, 3});
        fill_weights(base, rng);
        tsr_tensor * v = permute(ctx, base, 2, 0, 1, 3); // [33, 3, 5]
        tsr_tensor * out = cont(ctx, v);
        ASSERT_EQ(compute(out, 3), TSR_STATUS_SUCCESS);
        for_each_index(out, [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
            ASSERT_EQ(std::memcmp(elem_ptr(out, i0, i1, i2, i3), elem_ptr(v, i0, i1, i2, i3), out->nb[0]), 0);
        });
    }
}

TEST(Cont, QuantizedRowViewCopiesBlocks) {
    context ctx(data_ctx());
    std::mt19937 rng(2);
    tsr_tensor * base = ctx.new_tensor(TSR_TYPE_Q4_0, {64, 6});
    fill_weights(base, rng);
    // rows 1, 3, 5 (stride of two rows)
    tsr_tensor * v = view_2d(ctx, base, 64, 3, 2 * base->nb[1], base->nb[1]);
    tsr_tensor * out = cont(ctx, v);
    ASSERT_EQ(compute(out, 2), TSR_STATUS_SUCCESS);
    for (int64_t r = 0; r < 3; ++r) {
        EXPECT_EQ(std::memcmp(static_cast<char *>(out->data) + r * out->nb[1],
                              static_cast<char *>(base->data) + (2 * r + 1) * base->nb[1], base->nb[1]),
                  0);
    }
}

TEST(Argmax, LowestIndexWinsTies) {
    context ctx(data_ctx());
    std::mt19937 rng(12);
    tsr_tensor * a = ctx.new_tensor(TSR_TYPE_F32, {4097, 4});
    fill_uniform(a, rng);
    set_f32(a, 5.0f, 5, 1);
    set_f32(a, 5.0f, 100, 1); // tie: 5 wins
    for (int64_t i = 0; i < 4097; ++i) set_f32(a, 0.25f, i, 2); // all equal: 0
    set_f32(a, 7.0f, 4096, 3);                                   // last element
    tsr_tensor * out = argmax(ctx, a);
    for (int nth : {1, 3}) {
        ASSERT_EQ(compute(out, nth), TSR_STATUS_SUCCESS);
        int64_t best0 = 0;
        for (int64_t i = 1; i < 4097; ++i) best0 = get(a, i, 0) > get(a, best0, 0) ? i : best0;
        EXPECT_EQ(get(out, 0), static_cast<double>(best0));
        EXPECT_EQ(get(out, 1), 5.0);
        EXPECT_EQ(get(out, 2), 0.0);
        EXPECT_EQ(get(out, 3), 4096.0);
    }
}

TEST(Argmax, TransposedInput) {
    context ctx(data_ctx());
    std::mt19937 rng(13);
    tsr_tensor * base = ctx.new_tensor(TSR_TYPE_F32, {3, 33});
    fill_uniform(base, rng);
    tsr_tensor * a = transpose(ctx, base); // [33, 3]
    tsr_tensor * out = argmax(ctx, a);
    ASSERT_EQ(compute(out, 2), TSR_STATUS_SUCCESS);
    for (int64_t r = 0; r < 3; ++r) {
        int64_t best = 0;
        for (int64_t i = 1; i < 33; ++i) best = get(a, i, r) > get(a, best, r) ? i : best;
        EXPECT_EQ(get(out, r), static_cast<double>(best));
    }
}

} // namespace
} // namespace tessera::cpu::test

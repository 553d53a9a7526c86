// MUL_MAT against a double-precision reference: every weight type, odd
// sizes, batch broadcasting (grouped-query attention ratios over ne[2] and
// ne[3]), non-contiguous weights (permuted/transposed K/V cache views) and
// activations.
//
// Tolerances (|got - want| <= tol per output element, want in double from
// the exact weight values and the exact F32 activations):
//   F32/F16/BF16 weights: the kernels multiply exact values in F32 and
//     either sum ceil(K/16) products per lane and the 16 lanes in a 4-level
//     tree (dot products) or sum FMA chains of at most 256 terms and add the
//     ceil(K/256) chain sums in order (GEMM, transposed weights): the classic
//     bound gamma_n = n * u with u = 2^-24 and n = min(K, 256) + ceil(K/256)
//     + 6 terms (>= K/16 + 6), doubled:
//     tol = 1.2e-7 * (min(K, 256) + ceil(K/256) + 6) * sum_k |a_k b_k|.
//     BF16 weights on AVX512-BF16 builds multiply activations rounded to
//     BF16 (bf16_dot.hpp: 2^-8 relative each): + 2^-7 * sum_k |a_k b_k|.
//   Q8_0/Q4_0 weights: the kernel quantizes each activation block to Q8_0
//     (d = amax/127 stored as F16, q = round(x/d)), so each activation is off
//     by at most d/2 + 127 * |d - f16(d)| <= 0.6 * amax_block / 127:
//     tol = sum_k |a_k| * 0.6 * amax_block(k) / 127 + 1e-5 * sum_k |a_k b_k|.
//   Q8_0/Q4_0 weights with activations exactly representable in Q8_0 (each
//     block d * q, an F16 d, integer q, one |q| = 127): quantization is then
//     lossless, the block sums are exact integers and only F32 rounding of
//     the scaled block terms and their 4-way accumulation remains:
//     tol = 1.2e-7 * (K/128 + 6) * sum_k |a_k b_k|. (The integer GEMM
//     instead adds the terms in chains of at most 16 blocks and then the
//     K/512 chain sums: min(K/32, 16) + K/512 + 2 <= K/128 + 6 for the K
//     tested here, 32, 96 and 4096.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "backends/cpu/ops/tensor_access.hpp"
#include "backends/cpu/mul_mat_check.hpp"
#include "backends/cpu/ref_util.hpp"

namespace tessera::cpu::test {
namespace {

struct mm_case {
    int32_t type;
    int64_t K, M, N;
    int64_t A2, A3, B2, B3;
};

std::string case_name(const ::testing::TestParamInfo<mm_case> & info) {
    const mm_case & c = info.param;
    return std::string(type_name(c.type)) + "_K" + std::to_string(c.K) + "_M" + std::to_string(c.M) + "_N" +
           std::to_string(c.N) + "_b" + std::to_string(c.A2) + "x" + std::to_string(c.A3) + "_" +
           std::to_string(c.B2) + "x" + std::to_string(c.B3);
}

class MulMat : public ::testing::TestWithParam<mm_case> {};

TEST_P(MulMat, MatchesReferenceAndIsIdenticalAcrossThreadCounts) {
    const mm_case c = GetParam();
    context ctx(data_ctx());
    std::mt19937 rng(static_cast<unsigned>(c.K * 131 + c.M * 7 + c.N));
    tsr_tensor * a = ctx.new_tensor(static_cast<type>(c.type), {c.K, c.M, c.A2, c.A3});
    fill_weights(a, rng);
    tsr_tensor * b = ctx.new_tensor(TSR_TYPE_F32, {c.K, c.N, c.B2, c.B3});
    fill_uniform(b, rng);
    tsr_tensor * out = mul_mat(ctx, a, b);
    ASSERT_EQ(compute(out, 1), TSR_STATUS_SUCCESS);
    check_mul_mat(a, b, out);
    const std::vector<char> one(static_cast<char *>(out->data), static_cast<char *>(out->data) + nbytes(out));
    for (int nth : {2, 3}) {
        std::memset(out->data, 0, nbytes(out));
        ASSERT_EQ(compute(out, nth), TSR_STATUS_SUCCESS);
        EXPECT_EQ(std::memcmp(one.data(), out->data, one.size()), 0) << nth << " threads differ from 1";
    }
}

INSTANTIATE_TEST_SUITE_P(
    Types, MulMat,
    ::testing::Values(
        // float weights: odd K (1, 3, 31, 33, 4097), odd M and N
        mm_case{TSR_TYPE_F32, 1, 3, 1, 1, 1, 1, 1}, mm_case{TSR_TYPE_F32, 33, 31, 5, 1, 1, 1, 1},
        mm_case{TSR_TYPE_F32, 4097, 17, 3, 1, 1, 1, 1}, mm_case{TSR_TYPE_F16, 3, 33, 7, 1, 1, 1, 1},
        mm_case{TSR_TYPE_F16, 4097, 19, 2, 1, 1, 1, 1}, mm_case{TSR_TYPE_F16, 31, 5, 37, 1, 1, 1, 1},
        mm_case{TSR_TYPE_BF16, 33, 9, 35, 1, 1, 1, 1}, mm_case{TSR_TYPE_BF16, 4097, 3, 1, 1, 1, 1, 1},
        // quantized weights: K a multiple of 32
        mm_case{TSR_TYPE_Q8_0, 32, 1, 1, 1, 1, 1, 1}, mm_case{TSR_TYPE_Q8_0, 96, 33, 5, 1, 1, 1, 1},
        mm_case{TSR_TYPE_Q8_0, 4096, 17, 3, 1, 1, 1, 1}, mm_case{TSR_TYPE_Q4_0, 32, 3, 1, 1, 1, 1, 1},
        mm_case{TSR_TYPE_Q4_0, 160, 31, 36, 1, 1, 1, 1}, mm_case{TSR_TYPE_Q4_0, 4096, 18, 2, 1, 1, 1, 1},
        // broadcasting over ne[2] (GQA ratio 4) and ne[3] (ratio 3)
        mm_case{TSR_TYPE_F32, 33, 7, 3, 2, 1, 8, 3}, mm_case{TSR_TYPE_F16, 64, 5, 4, 2, 2, 4, 2},
        mm_case{TSR_TYPE_Q8_0, 64, 6, 3, 2, 1, 8, 1}, mm_case{TSR_TYPE_Q4_0, 64, 5, 2, 1, 1, 3, 2}),
    case_name);

// Sets every 32-element block along ne[0] of a packed F32 tensor to d * q
// with d a random F16 value, q random integers in -127..127 and one of them
// +-127, so a Q8_0 quantizer reproduces the values exactly.
void fill_q8_exact(tsr_tensor * b, std::mt19937 & rng) {
    std::uniform_int_distribution<int> q(-127, 127), exp(8, 14), mant(0, 1023), pick(0, 31), sign(0, 1);
    for (int64_t r = 0; r < b->ne[1] * b->ne[2] * b->ne[3]; ++r) {
        for (int64_t k0 = 0; k0 < b->ne[0]; k0 += 32) {
            const double d = std::ldexp(1.0 + mant(rng) / 1024.0, exp(rng) - 15);
            const int big = pick(rng);
            for (int j = 0; j < 32; ++j) {
                const int qv = j == big ? (sign(rng) ? 127 : -127) : q(rng);
                static_cast<float *>(b->data)[r * b->ne[0] + k0 + j] = static_cast<float>(d * qv);
            }
        }
    }
}

TEST(MulMatQuant, ExactlyRepresentableActivationsGiveTightResults) {
    for (int32_t ty : {TSR_TYPE_Q8_0, TSR_TYPE_Q4_0}) {
        for (int64_t K : {32, 96, 4096}) {
            context ctx(data_ctx());
            std::mt19937 rng(static_cast<unsigned>(K + ty));
            tsr_tensor * a = ctx.new_tensor(static_cast<type>(ty), {K, 21, 2});
            fill_weights(a, rng);
            tsr_tensor * b = ctx.new_tensor(TSR_TYPE_F32, {K, 6, 4});
            fill_q8_exact(b, rng);
            tsr_tensor * out = mul_mat(ctx, a, b);
            ASSERT_EQ(compute(out, 3), TSR_STATUS_SUCCESS);
            check_mul_mat(a, b, out, true);
        }
    }
}

// The kernels' inline F16 decoder against the test-side decoder, for every
// one of the 65536 bit patterns (NaN payloads: still NaN, sign kept).
TEST(F16Decode, AllBitPatternsExact) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const float got = f16_to_f32_inline(static_cast<uint16_t>(h));
        const double want = ref_f16(static_cast<uint16_t>(h));
        if (std::isnan(want)) {
            ASSERT_TRUE(std::isnan(got)) << std::hex << h;
            ASSERT_EQ(std::signbit(got), (h & 0x8000) != 0) << std::hex << h;
        } else {
            ASSERT_EQ(static_cast<double>(got), want) << std::hex << h;
            ASSERT_EQ(std::signbit(got), std::signbit(want)) << std::hex << h;
        }
    }
}

// Non-contiguous weights the way attention reads a KV cache: the cache is
// [head_dim, n_head, n_kv] packed; K = permute -> [head_dim, n_kv, n_head]
// (rows strided), V^T = [n_kv, head_dim, n_head] (nb[0] != element size).
// Activations are permuted views as well.
TEST(MulMatViews, PermutedKAndTransposedVFromACache) {
    for (int32_t ty : {TSR_TYPE_F32, TSR_TYPE_F16}) {
        const int64_t head_dim = 33, n_head_kv = 2, n_kv = 19, n_tokens = 5, n_head = 4;
        context ctx(data_ctx());
        std::mt19937 rng(99);
        tsr_tensor * cache = ctx.new_tensor(static_cast<type>(ty), {head_dim, n_head_kv, n_kv});
        fill_weights(cache, rng);

        // K: [head_dim, n_kv, n_head_kv]; Q: [head_dim, n_tokens, n_head] from a [head_dim, n_head, n_tokens] tensor
        tsr_tensor * k = permute(ctx, cache, 0, 2, 1, 3);
        tsr_tensor * q_base = ctx.new_tensor(TSR_TYPE_F32, {head_dim, n_head, n_tokens});
        fill_uniform(q_base, rng);
        tsr_tensor * q = permute(ctx, q_base, 0, 2, 1, 3);
        tsr_tensor * kq = mul_mat(ctx, k, q); // [n_kv, n_tokens, n_head]
        ASSERT_EQ(compute(kq, 3), TSR_STATUS_SUCCESS);
        check_mul_mat(k, q, kq);

        // V^T: [n_kv, head_dim, n_head_kv] (transpose of the permuted cache)
        tsr_tensor * vt = transpose(ctx, k);
        ASSERT_NE(vt->nb[0], static_cast<uint64_t>(ty == TSR_TYPE_F32 ? 4 : 2));
        tsr_tensor * p_base = ctx.new_tensor(TSR_TYPE_F32, {n_tokens, n_kv, n_head}); // transposed probabilities
        fill_uniform(p_base, rng, 0.0f, 1.0f);
        tsr_tensor * probs = transpose(ctx, p_base); // [n_kv, n_tokens, n_head], nb[0] != 4
        tsr_tensor * kqv = mul_mat(ctx, vt, probs); // [head_dim, n_tokens, n_head]
        ASSERT_EQ(compute(kqv, 2), TSR_STATUS_SUCCESS);
        check_mul_mat(vt, probs, kqv);

        // Same results for 1 and 7 threads.
        std::vector<char> one(nbytes(kqv));
        ASSERT_EQ(compute(kqv, 1), TSR_STATUS_SUCCESS);
        std::memcpy(one.data(), kqv->data, one.size());
        std::memset(kqv->data, 0, one.size());
        ASSERT_EQ(compute(kqv, 7), TSR_STATUS_SUCCESS);
        EXPECT_EQ(std::memcmp(one.data(), kqv->data, one.size()), 0);
    }
}

// Quantized weights with a strided (non-contiguous) activation view.
TEST(MulMatViews, QuantizedWeightsWithStridedActivations) {
    for (int32_t ty : {TSR_TYPE_Q8_0, TSR_TYPE_Q4_0}) {
        context ctx(data_ctx());
        std::mt19937 rng(5);
        tsr_tensor * a = ctx.new_tensor(static_cast<type>(ty), {64, 9});
        fill_weights(a, rng);
        tsr_tensor * b_base = ctx.new_tensor(TSR_TYPE_F32, {3, 64});
        fill_uniform(b_base, rng);
        tsr_tensor * b = transpose(ctx, b_base); // [64, 3], nb[0] = 12
        tsr_tensor * out = mul_mat(ctx, a, b);
        ASSERT_EQ(compute(out, 2), TSR_STATUS_SUCCESS);
        check_mul_mat(a, b, out);
    }
}

// An activation row of zeros (quantizer scale 0) gives exact zeros.
TEST(MulMatViews, ZeroActivationsGiveZero) {
    for (int32_t ty : {TSR_TYPE_F32, TSR_TYPE_F16, TSR_TYPE_Q8_0, TSR_TYPE_Q4_0}) {
        context ctx(data_ctx());
        std::mt19937 rng(1);
        tsr_tensor * a = ctx.new_tensor(static_cast<type>(ty), {64, 4});
        fill_weights(a, rng);
        tsr_tensor * b = ctx.new_tensor(TSR_TYPE_F32, {64, 2});
        tsr_tensor * out = mul_mat(ctx, a, b);
        std::memset(out->data, 0x7f, nbytes(out));
        ASSERT_EQ(compute(out, 2), TSR_STATUS_SUCCESS);
        for (int64_t m = 0; m < 4; ++m) {
            for (int64_t n = 0; n < 2; ++n) EXPECT_EQ(get(out, m, n), 0.0);
        }
    }
}

} // namespace
} // namespace tessera::cpu::test

// MUL_MAT with K-quant weights (Q4_K, Q5_K, Q6_K): the AVX2 kernel
// (mul_mat_k.cpp) in the variant builds, the portable kernel in the
// baseline build. Three checks per case:
//   1. every element equals, bit for bit, vec_dot_k.hpp's scalar
//      dot_k_quant of the weight row and the column quantized by the core's
//      quantize_row_q8_k_ref (the operations every path promises);
//   2. the same element in double from the decoded weights and the Q8_K
//      activations, within the F32 steps' rounding: per super-block (two)
//      products d dx, conversions of the integer sums and FMAs into the
//      accumulator, |error| <= 2 * 2^-24 * (4 + 2 n_super) * S (doubled),
//      S the sum over elements of |x| times |d sc q| + |dmin m| (Q4_K, Q5_K;
//      the two parts of a weight) or |w| (Q6_K);
//   3. against the exact F32 activations within the activation
//      quantization error: sum_k |w_k| * 0.5 * amax_256(k) / 127 plus 1e-5
//      relative.
// Threads: 1, 2 and 5 give the same bytes; a column alone (N = 1) and the
// same column inside a batch of 70 get the same bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/ops/vec_dot_k.hpp"
#include "backends/cpu/ref_util.hpp"
#include "tessera/core/types.hpp"

namespace tessera::cpu::test {
namespace {

struct k_case {
    int32_t type;
    int64_t K, M, N;
    bool strided_b;   // activations with elements N floats apart (gathered)
    int64_t batch;    // b's ne[2]; a has ne[2] = 1 (broadcast)
};

std::string case_name(const k_case & c) {
    return std::string(type_name(c.type)) + "_K" + std::to_string(c.K) + "_M" + std::to_string(c.M) + "_N" + std::to_string(c.N) +
           (c.strided_b ? "_strided" : "") + (c.batch > 1 ? "_b" + std::to_string(c.batch) : "");
}

// |d sc q| + |dmin m| of element k of Q4_K/Q5_K row m (the two parts the
// kernel scales separately; layouts in core/types.hpp), or |w| for Q6_K.
double part_magnitude(const tsr_tensor * a, int64_t k, int64_t m) {
    if (a->type == TSR_TYPE_Q6_K) return std::fabs(get(a, k, m));
    const bool five = a->type == TSR_TYPE_Q5_K;
    const auto * blk = reinterpret_cast<const uint8_t *>(static_cast<const char *>(a->data) + m * a->nb[1] + (k / 256) * (five ? 176 : 144));
    const int j = static_cast<int>(k % 256) / 32, l = static_cast<int>(k % 32);
    uint8_t sc, mn;
    q4_k_scale_min(blk + 4, j, sc, mn);
    const uint8_t * qs = blk + (five ? 48 : 16);
    int q = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 15;
    if (five) q |= ((blk[16 + l] >> j) & 1) << 4; // qh[l] bit j
    const double d = f16_to_f32(static_cast<uint16_t>(blk[0] | blk[1] << 8)), dmin = f16_to_f32(static_cast<uint16_t>(blk[2] | blk[3] << 8));
    return std::fabs(d * sc * q) + std::fabs(dmin * mn);
}

// The column (n, batch i2) of b as packed F32.
std::vector<float> column(const tsr_tensor * b, int64_t n, int64_t i2) {
    std::vector<float> x(static_cast<size_t>(b->ne[0]));
    for (int64_t k = 0; k < b->ne[0]; ++k) x[static_cast<size_t>(k)] = static_cast<float>(get(b, k, n, i2));
    return x;
}

void check_case(const k_case & c) {
    SCOPED_TRACE(case_name(c));
    context ctx(data_ctx());
    std::mt19937 rng(static_cast<unsigned>(c.K * 31 + c.M * 7 + c.N + c.type));
    tsr_tensor * a = ctx.new_tensor(static_cast<type>(c.type), {c.K, c.M});
    fill_weights(a, rng);
    tsr_tensor * b;
    if (c.strided_b) {
        tsr_tensor * bt = ctx.new_tensor(TSR_TYPE_F32, {c.N, c.K, c.batch});
        fill_uniform(bt, rng);
        b = permute(ctx, bt, 1, 0, 2, 3); // [K, N, batch], elements N floats apart
    } else {
        b = ctx.new_tensor(TSR_TYPE_F32, {c.K, c.N, c.batch});
        fill_uniform(b, rng);
    }
    tsr_tensor * out = mul_mat(ctx, a, b);
    ASSERT_EQ(compute(out, 1), TSR_STATUS_SUCCESS);

    const int64_t n_super = c.K / 256;
    const size_t row_bytes = a->nb[1];
    for (int64_t i2 = 0; i2 < c.batch; ++i2) {
        for (int64_t n = 0; n < c.N; ++n) {
            const std::vector<float> x = column(b, n, i2);
            std::vector<block_q8_k> xq(static_cast<size_t>(n_super));
            quantize_row_q8_k_ref(x.data(), xq.data(), c.K);
            std::vector<float> xd(static_cast<size_t>(c.K));
            dequantize_row_q8_k(xq.data(), xd.data(), c.K);
            for (int64_t m = 0; m < c.M; ++m) {
                const char * w = static_cast<const char *>(a->data) + static_cast<size_t>(m) * row_bytes;
                const float got = static_cast<float>(get(out, m, n, i2));
                // 1. the promised operations, bit for bit
                const float want_bits = dot_k_quant(c.type, w, xq.data(), n_super);
                ASSERT_EQ(std::memcmp(&got, &want_bits, sizeof got), 0)
                    << "m " << m << " n " << n << " batch " << i2 << ": " << got << " vs " << want_bits;
                // 2. and 3. against double products
                double exact_q = 0, abs_q = 0, exact = 0, abs_x = 0, q_err = 0;
                for (int64_t b0 = 0; b0 < c.K; b0 += 256) {
                    double amax = 0;
                    for (int64_t k = b0; k < b0 + 256; ++k) amax = std::max(amax, std::fabs(static_cast<double>(x[static_cast<size_t>(k)])));
                    for (int64_t k = b0; k < b0 + 256; ++k) {
                        const double wk = get(a, k, m);
                        exact_q += wk * xd[static_cast<size_t>(k)];
                        abs_q += part_magnitude(a, k, m) * std::fabs(xd[static_cast<size_t>(k)]);
                        exact += wk * x[static_cast<size_t>(k)];
                        abs_x += std::fabs(wk * x[static_cast<size_t>(k)]);
                        q_err += std::fabs(wk) * 0.5 * amax / 127.0;
                    }
                }
                ASSERT_NEAR(got, exact_q, 2 * 0x1p-24 * static_cast<double>(4 + 2 * n_super) * abs_q + 1e-30)
                    << "m " << m << " n " << n;
                ASSERT_NEAR(got, exact, q_err * 1.001 + 1e-5 * abs_x) << "m " << m << " n " << n;
            }
        }
    }
    const std::vector<char> one(static_cast<char *>(out->data), static_cast<char *>(out->data) + nbytes(out));
    for (int nth : {2, 5}) {
        std::memset(out->data, 0, nbytes(out));
        ASSERT_EQ(compute(out, nth), TSR_STATUS_SUCCESS);
        EXPECT_EQ(std::memcmp(one.data(), out->data, one.size()), 0) << nth << " threads differ from 1";
    }
}

class MulMatK : public ::testing::TestWithParam<k_case> {};

TEST_P(MulMatK, MatchesTheScalarOperationsAndTheDoubleProduct) {
    check_case(GetParam());
}

std::vector<k_case> cases() {
    std::vector<k_case> v;
    for (int32_t t : {TSR_TYPE_Q4_K, TSR_TYPE_Q5_K, TSR_TYPE_Q6_K}) {
        for (int64_t N : {1, 2, 3, 4, 7, 70}) v.push_back({t, 512, 37, N, false, 1});
        v.push_back({t, 256, 1, 1, false, 1});
        v.push_back({t, 2304, 133, 5, false, 1}); // 9 super-blocks, rows past a 64-row item
        v.push_back({t, 768, 20, 3, true, 2});     // gathered columns, broadcast batch
        v.push_back({t, 768, 20, 9, true, 1});
    }
    return v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, MulMatK, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<k_case> & i) { return case_name(i.param); });

// A column gets the same bits alone (one-token path) and inside a batch of
// 70 columns (prompt path).
TEST(MulMatK, AColumnGetsTheSameBitsAloneAndInABatch) {
    for (int32_t t : {TSR_TYPE_Q4_K, TSR_TYPE_Q5_K, TSR_TYPE_Q6_K}) {
        SCOPED_TRACE(type_name(t));
        context ctx(data_ctx());
        std::mt19937 rng(5);
        tsr_tensor * a = ctx.new_tensor(static_cast<type>(t), {1024, 96});
        fill_weights(a, rng);
        tsr_tensor * big = ctx.new_tensor(TSR_TYPE_F32, {1024, 70});
        fill_uniform(big, rng);
        tsr_tensor * one = ctx.new_tensor(TSR_TYPE_F32, {1024, 1});
        std::memcpy(one->data, static_cast<char *>(big->data) + 41 * big->nb[1], 1024 * sizeof(float));
        tsr_tensor * out_big = mul_mat(ctx, a, big);
        tsr_tensor * out_one = mul_mat(ctx, a, one);
        ASSERT_EQ(compute(out_big, 3), TSR_STATUS_SUCCESS);
        ASSERT_EQ(compute(out_one, 2), TSR_STATUS_SUCCESS);
        EXPECT_EQ(std::memcmp(static_cast<char *>(out_big->data) + 41 * out_big->nb[1], out_one->data, 96 * sizeof(float)), 0);
    }
}

} // namespace
} // namespace tessera::cpu::test

namespace tessera::cpu::test {
namespace {

// Multiplies a (K x M weights) by N = 1, 3 and 70 columns of +-1 (column n
// +1 when n is even; +-1 quantize exactly: d = 1/127 in F32) on 2 threads
// and checks element (m, n) against +-row_sum(m), the exact product of row
// m with ones, within 1e-4 relative.
template <class RowSum>
void expect_products_with_signed_ones(context & ctx, tsr_tensor * a, const RowSum & row_sum) {
    const int64_t K = a->ne[0], M = a->ne[1];
    for (int64_t N : {1, 3, 70}) {
        SCOPED_TRACE("N=" + std::to_string(N));
        tsr_tensor * b = ctx.new_tensor(TSR_TYPE_F32, {K, N});
        for (int64_t n = 0; n < N; ++n) {
            for (int64_t k = 0; k < K; ++k) set_f32(b, n % 2 == 0 ? 1.0f : -1.0f, k, n);
        }
        tsr_tensor * out = mul_mat(ctx, a, b);
        ASSERT_EQ(compute(out, 2), TSR_STATUS_SUCCESS);
        for (int64_t n = 0; n < N; ++n) {
            for (int64_t m = 0; m < M; ++m) {
                const double want = (n % 2 == 0 ? 1.0 : -1.0) * row_sum(m);
                ASSERT_NEAR(get(out, m, n), want, 1e-4 * std::fabs(want)) << "m " << m << " n " << n;
            }
        }
    }
}

// Q5_K quants at the top of their range (q = 31: every nibble 15 and every
// fifth bit set) with the largest 6-bit scales, against activations that
// quantize to +127: the int16 pair sums of the vector kernels (2 * 31 * 127
// each) would wrap if a kernel kept more than four steps in int16. The
// exact product is known: every weight is d * 63 * 31 - dmin * 63.
TEST(MulMatK, Q5KLargestQuantsDoNotWrap) {
    context ctx(data_ctx());
    constexpr int64_t K = 512, M = 24;
    tsr_tensor * a = ctx.new_tensor(TSR_TYPE_Q5_K, {K, M});
    auto * p = static_cast<uint8_t *>(a->data);
    for (size_t b = 0; b < nbytes(a) / 176; ++b) {
        const uint16_t d = f32_to_f16(1.0f / 64), dmin = f32_to_f16(1.0f / 128);
        std::memcpy(p + 176 * b, &d, 2);
        std::memcpy(p + 176 * b + 2, &dmin, 2);
        std::memset(p + 176 * b + 4, 0xff, 172); // scales and mins 63, qh and qs all ones
    }
    const double w = 63.0 * 31.0 / 64 - 63.0 / 128;
    expect_products_with_signed_ones(ctx, a, [&](int64_t) { return w * K; });
}

// Q6_K at the ends of its ranges: int8 scales -128 and 127 (the AMX
// kernel splits each into balanced base-7 digits, -128 = -3 * 49 + 3 * 7
// - 2) and quants 0 and 63 (q - 32 = -32 and 31), against activations that
// quantize to +-127, so every product of a quant and a digit has the
// largest magnitude the kernels allow for. Row m has quants 63 when m is
// even, else 0; sub-block j scale -128 when j is even, else 127; so each
// super-block's weights sum to 8 * 16 * (127 - 128) * (q - 32) * d, and
// with x = +-1 the exact product is that times K / 256 (and the sign).
TEST(MulMatK, Q6KExtremeScalesAndQuants) {
    context ctx(data_ctx());
    constexpr int64_t K = 512, M = 34;
    tsr_tensor * a = ctx.new_tensor(TSR_TYPE_Q6_K, {K, M});
    auto * blocks = static_cast<block_q6_k *>(a->data);
    const float d = 1.0f / 1024;
    for (int64_t m = 0; m < M; ++m) {
        for (int64_t b = 0; b < K / 256; ++b) {
            block_q6_k & blk = blocks[m * (K / 256) + b];
            std::memset(blk.ql, m % 2 == 0 ? 0xff : 0x00, sizeof blk.ql); // low 4 bits 15 or 0
            std::memset(blk.qh, m % 2 == 0 ? 0xff : 0x00, sizeof blk.qh); // high 2 bits 3 or 0
            for (int j = 0; j < 16; ++j) blk.scales[j] = static_cast<int8_t>(j % 2 == 0 ? -128 : 127);
            blk.d = f32_to_f16(d);
        }
    }
    expect_products_with_signed_ones(ctx, a, [&](int64_t m) {
        const double q = m % 2 == 0 ? 31.0 : -32.0;
        return 8.0 * 16.0 * (127.0 - 128.0) * q * d * (K / 256);
    });
}

} // namespace
} // namespace tessera::cpu::test

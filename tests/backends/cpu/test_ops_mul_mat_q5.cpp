// MUL_MAT with Q5_0 weights (GGUF type 6): the one-token kernel
// (matvec_q.cpp, N < 4) and the GEMM (gemm_q.cpp) in the variant builds,
// the portable kernel (mul_mat_generic.cpp) in the baseline build. The
// activations are quantized to Q8_0 on the fly, so per element:
//   1. against the double product of the weights (decoded test-side,
//      ref_util.hpp) and the activations quantized by the core's
//      quantize_row_q8_0_ref (the kernels' activation format, bit-identical
//      in every path): per block the integer sum is exact (|sum| <= 32 *
//      16 * 127 < 2^24), the product d_w d_x and its product with the sum
//      round twice, the additions into the accumulators (at most n_blocks
//      + 2 of them along any element's path, whatever the path's
//      grouping) once each, so |error| <= (4 + n_blocks) 2^-24 S with S the
//      sum of |w| |x_q|; doubled for the second-order terms;
//   2. against the exact F32 activations within the activation
//      quantization error: per element <= d/2 + 127 |d - F16(d)| <= 0.6
//      amax_32 / 127, times |w|, plus the bound of 1.
// Threads: 1, 2 and 5 give the same bytes. Weights whose quants are all 0
// or all 31 times activations of +-1 (every quant +-127) check the integer
// sums at their extremes (no int16 saturation in the byte products).
// GET_ROWS and CPY reach Q5_0 through the type traits: checked here too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/compute.hpp"
#include "backends/cpu/ref_util.hpp"
#include "tessera/core/types.hpp"

namespace tessera::cpu::test {
namespace {

enum class weights { random, all_max, all_min, alternating };
enum class acts { uniform, plus_minus_one };

struct q5_case {
    int64_t K, M, N;
    bool strided_b;  // activations with elements N floats apart (gathered)
    int64_t batch;   // b's ne[2]; a has ne[2] = 1 (broadcast)
    weights w = weights::random;
    acts x = acts::uniform;
};

std::string case_name(const q5_case & c) {
    static const char * wn[] = {"", "_qmax", "_qmin", "_qalt"};
    return "K" + std::to_string(c.K) + "_M" + std::to_string(c.M) + "_N" + std::to_string(c.N) + (c.strided_b ? "_strided" : "") +
           (c.batch > 1 ? "_b" + std::to_string(c.batch) : "") + wn[static_cast<int>(c.w)] +
           (c.x == acts::plus_minus_one ? "_pm1" : "");
}

// Extreme weights: quants all 31 (qs and qh all ones), all 0, or
// alternating by block; scales random as in fill_weights.
void fill_extreme(tsr_tensor * a, weights w, std::mt19937 & rng) {
    fill_weights(a, rng); // random scales
    auto * p = static_cast<unsigned char *>(a->data);
    const size_t bytes = nbytes(a);
    for (size_t b = 0; b + 22 <= bytes; b += 22) {
        const bool max = w == weights::all_max || (w == weights::alternating && (b / 22) % 2 == 0);
        std::memset(p + b + 2, max ? 0xff : 0x00, 20);
    }
}

// The column (n, batch i2) of b as packed F32.
std::vector<float> column(const tsr_tensor * b, int64_t n, int64_t i2) {
    std::vector<float> x(static_cast<size_t>(b->ne[0]));
    for (int64_t k = 0; k < b->ne[0]; ++k) x[static_cast<size_t>(k)] = static_cast<float>(get(b, k, n, i2));
    return x;
}

void check_case(const q5_case & c) {
    SCOPED_TRACE(case_name(c));
    context ctx(data_ctx());
    std::mt19937 rng(static_cast<unsigned>(c.K * 31 + c.M * 7 + c.N));
    tsr_tensor * a = ctx.new_tensor(TSR_TYPE_Q5_0, {c.K, c.M});
    if (c.w == weights::random) {
        fill_weights(a, rng);
    } else {
        fill_extreme(a, c.w, rng);
    }
    tsr_tensor * b;
    if (c.strided_b) {
        tsr_tensor * bt = ctx.new_tensor(TSR_TYPE_F32, {c.N, c.K, c.batch});
        fill_uniform(bt, rng);
        b = permute(ctx, bt, 1, 0, 2, 3); // [K, N, batch], elements N floats apart
    } else {
        b = ctx.new_tensor(TSR_TYPE_F32, {c.K, c.N, c.batch});
        fill_uniform(b, rng);
    }
    if (c.x == acts::plus_minus_one) { // column n: +1, -1 or alternating signs
        for_each_index(b, [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
            const float s = i1 % 3 == 0 ? 1.0f : i1 % 3 == 1 ? -1.0f : (i0 % 2 == 0 ? 1.0f : -1.0f);
            set_f32(b, s, i0, i1, i2, i3);
        });
    }
    tsr_tensor * out = mul_mat(ctx, a, b);
    ASSERT_EQ(compute(out, 1), TSR_STATUS_SUCCESS);

    const int64_t n_blocks = c.K / 32;
    for (int64_t i2 = 0; i2 < c.batch; ++i2) {
        for (int64_t n = 0; n < c.N; ++n) {
            const std::vector<float> x = column(b, n, i2);
            std::vector<block_q8_0> xq(static_cast<size_t>(n_blocks));
            quantize_row_q8_0_ref(x.data(), xq.data(), c.K);
            std::vector<float> xd(static_cast<size_t>(c.K));
            dequantize_row_q8_0(xq.data(), xd.data(), c.K);
            for (int64_t m = 0; m < c.M; ++m) {
                const double got = get(out, m, n, i2);
                double exact_q = 0, abs_q = 0, exact = 0, q_err = 0;
                for (int64_t b0 = 0; b0 < c.K; b0 += 32) {
                    double amax = 0;
                    for (int64_t k = b0; k < b0 + 32; ++k) amax = std::max(amax, std::fabs(static_cast<double>(x[static_cast<size_t>(k)])));
                    for (int64_t k = b0; k < b0 + 32; ++k) {
                        const double wk = get(a, k, m);
                        exact_q += wk * xd[static_cast<size_t>(k)];
                        abs_q += std::fabs(wk * xd[static_cast<size_t>(k)]);
                        exact += wk * x[static_cast<size_t>(k)];
                        q_err += std::fabs(wk) * 0.6 * amax / 127.0;
                    }
                }
                const double f32_err = 2 * 0x1p-24 * static_cast<double>(4 + n_blocks) * abs_q + 1e-30;
                ASSERT_NEAR(got, exact_q, f32_err) << "m " << m << " n " << n << " batch " << i2;
                ASSERT_NEAR(got, exact, q_err + f32_err) << "m " << m << " n " << n << " batch " << i2;
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

class MulMatQ5 : public ::testing::TestWithParam<q5_case> {};

TEST_P(MulMatQ5, MatchesTheDoubleProduct) {
    check_case(GetParam());
}

std::vector<q5_case> cases() {
    std::vector<q5_case> v;
    for (int64_t N : {1, 2, 3, 4, 5, 70}) {
        v.push_back({576, 37, N, false, 1});
        v.push_back({1536, 13, N, false, 1});
    }
    v.push_back({32, 1, 1, false, 1});
    v.push_back({32, 9, 4, false, 1});
    v.push_back({64, 133, 2, false, 1});  // rows past several 8-row groups, short last group
    v.push_back({64, 133, 9, false, 1});  // ... and past 16-row panels
    v.push_back({160, 20, 3, true, 2});   // gathered columns, broadcast batch
    v.push_back({160, 20, 11, true, 1});
    for (weights w : {weights::all_max, weights::all_min, weights::alternating}) {
        v.push_back({1024, 17, 3, false, 1, w, acts::plus_minus_one});
        v.push_back({1024, 17, 9, false, 1, w, acts::plus_minus_one});
    }
    return v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, MulMatQ5, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<q5_case> & i) { return case_name(i.param); });

// GET_ROWS of a Q5_0 matrix decodes the picked rows (values from the
// test-side decoder, exact).
TEST(Q5_0Ops, GetRowsDecodesThePickedRows) {
    context ctx(data_ctx());
    std::mt19937 rng(3);
    tsr_tensor * a = ctx.new_tensor(TSR_TYPE_Q5_0, {96, 7});
    fill_weights(a, rng);
    tsr_tensor * idx = ctx.new_tensor(TSR_TYPE_I32, {4});
    const int32_t rows[4] = {6, 0, 3, 6};
    for (int i = 0; i < 4; ++i) set_i32(idx, rows[i], i);
    tsr_tensor * out = get_rows(ctx, a, idx);
    ASSERT_EQ(compute(out, 2), TSR_STATUS_SUCCESS);
    for (int i = 0; i < 4; ++i) {
        for (int64_t k = 0; k < 96; ++k) ASSERT_EQ(get(out, k, i), get(a, k, rows[i])) << "row " << i << " k " << k;
    }
}

// CPY F32 -> Q5_0 writes the reference quantizer's bytes, and back to F32
// their decoded values.
TEST(Q5_0Ops, CpyQuantizesWithTheReferenceQuantizer) {
    context ctx(data_ctx());
    std::mt19937 rng(4);
    tsr_tensor * src = ctx.new_tensor(TSR_TYPE_F32, {128, 3});
    fill_uniform(src, rng);
    tsr_tensor * dst = ctx.new_tensor(TSR_TYPE_Q5_0, {128, 3});
    ASSERT_EQ(compute(cpy(ctx, src, dst), 2), TSR_STATUS_SUCCESS);
    std::vector<block_q5_0> want(4 * 3);
    quantize_row_q5_0_ref(static_cast<const float *>(src->data), want.data(), 128 * 3);
    ASSERT_EQ(nbytes(dst), want.size() * sizeof(block_q5_0));
    EXPECT_EQ(std::memcmp(dst->data, want.data(), nbytes(dst)), 0);

    tsr_tensor * back = ctx.new_tensor(TSR_TYPE_F32, {128, 3});
    ASSERT_EQ(compute(cpy(ctx, dst, back), 1), TSR_STATUS_SUCCESS);
    for (int64_t r = 0; r < 3; ++r) {
        for (int64_t k = 0; k < 128; ++k) ASSERT_EQ(get(back, k, r), get(dst, k, r)) << "row " << r << " k " << k;
    }
}

// Q5_1 (GGUF type 7, x = d q + m). The vector builds take it through the
// one-token kernel and the GEMM with activations quantized to Q8_0: per
// block the exact sum of q x_q times d_w d_x, plus the block sum of x_q
// times m_w d_x. The portable build decodes the rows to F32 (d q exact,
// + m rounded once) and dots them with the F32 activations. So against the
// double product of the decoded weights and the F32 activations, per
// element: the activation quantization error sum_k |w_k| 0.6 amax_32(k) /
// 127 plus (K + 8) 2^-24 (sum_k |w_k x_k| + that error) for the F32 steps.
// Weights whose quants are all 31 against activations of +-1 (quants
// +-127) check the int16 sums at their extremes. Any thread count gives
// the same bytes; a strided (gathered) activation matrix too.
TEST(Q5_1Ops, MulMatMatchesTheDoubleProduct) {
    for (int64_t N : {1, 5, 70}) {
        for (int variant : {0, 1, 2}) { // 0: random, 1: strided activations, 2: extreme quants
            const bool strided = variant == 1;
            SCOPED_TRACE("N=" + std::to_string(N) + " variant " + std::to_string(variant));
            context ctx(data_ctx());
            std::mt19937 rng(static_cast<unsigned>(N * 3 + variant));
            constexpr int64_t K = 96, M = 13;
            tsr_tensor * a = ctx.new_tensor(TSR_TYPE_Q5_1, {K, M});
            fill_weights(a, rng);
            if (variant == 2) {
                for (size_t blk = 0; blk < nbytes(a) / 24; ++blk) std::memset(static_cast<char *>(a->data) + 24 * blk + 4, 0xff, 20);
            }
            tsr_tensor * b;
            if (strided) {
                tsr_tensor * bt = ctx.new_tensor(TSR_TYPE_F32, {N, K});
                fill_uniform(bt, rng);
                b = permute(ctx, bt, 1, 0, 2, 3);
            } else {
                b = ctx.new_tensor(TSR_TYPE_F32, {K, N});
                fill_uniform(b, rng);
                if (variant == 2) {
                    for (int64_t n = 0; n < N; ++n) {
                        for (int64_t k = 0; k < K; ++k) set_f32(b, n % 2 == 0 ? 1.0f : -1.0f, k, n);
                    }
                }
            }
            tsr_tensor * out = mul_mat(ctx, a, b);
            ASSERT_TRUE(supports_op(out));
            ASSERT_EQ(compute(out, 1), TSR_STATUS_SUCCESS);
            const std::vector<char> one(static_cast<char *>(out->data), static_cast<char *>(out->data) + nbytes(out));
            for (int64_t n = 0; n < N; ++n) {
                std::vector<double> amax(K / 32, 0.0);
                for (int64_t k = 0; k < K; ++k) amax[k / 32] = std::max(amax[k / 32], std::fabs(get(b, k, n)));
                for (int64_t m = 0; m < M; ++m) {
                    double want = 0, abs_sum = 0, q_err = 0;
                    for (int64_t k = 0; k < K; ++k) {
                        want += get(a, k, m) * get(b, k, n);
                        abs_sum += std::fabs(get(a, k, m) * get(b, k, n));
                        q_err += std::fabs(get(a, k, m)) * 0.6 * amax[k / 32] / 127.0;
                    }
                    ASSERT_NEAR(get(out, m, n), want, q_err + (K + 8) * 0x1p-24 * (abs_sum + q_err) + 1e-30) << "m " << m << " n " << n;
                }
            }
            std::memset(out->data, 0, nbytes(out));
            ASSERT_EQ(compute(out, 3), TSR_STATUS_SUCCESS);
            EXPECT_EQ(std::memcmp(one.data(), out->data, one.size()), 0) << "3 threads differ from 1";
        }
    }
}

// GET_ROWS of a Q5_1 matrix decodes the picked rows; CPY F32 -> Q5_1 writes
// the reference quantizer's bytes.
TEST(Q5_1Ops, GetRowsAndCpyGoThroughTheFormat) {
    context ctx(data_ctx());
    std::mt19937 rng(6);
    tsr_tensor * a = ctx.new_tensor(TSR_TYPE_Q5_1, {64, 5});
    fill_weights(a, rng);
    tsr_tensor * idx = ctx.new_tensor(TSR_TYPE_I32, {2});
    set_i32(idx, 4, 0);
    set_i32(idx, 1, 1);
    tsr_tensor * rows = get_rows(ctx, a, idx);
    ASSERT_EQ(compute(rows, 2), TSR_STATUS_SUCCESS);
    for (int64_t k = 0; k < 64; ++k) {
        ASSERT_EQ(get(rows, k, 0), get(a, k, 4)) << k;
        ASSERT_EQ(get(rows, k, 1), get(a, k, 1)) << k;
    }
    tsr_tensor * src = ctx.new_tensor(TSR_TYPE_F32, {64, 2});
    fill_uniform(src, rng);
    tsr_tensor * dst = ctx.new_tensor(TSR_TYPE_Q5_1, {64, 2});
    ASSERT_EQ(compute(cpy(ctx, src, dst), 1), TSR_STATUS_SUCCESS);
    std::vector<block_q5_1> want(4);
    quantize_row_q5_1_ref(static_cast<const float *>(src->data), want.data(), 128);
    EXPECT_EQ(std::memcmp(dst->data, want.data(), nbytes(dst)), 0);
}

} // namespace
} // namespace tessera::cpu::test

// Repacked (row-interleaved) Q8_0/Q4_0/Q5_0/Q5_1 weights (src/backends/cpu/ops/
// repack.hpp) against the kernels directly: the layout's byte mapping as
// documented, round trips of whole and partial byte ranges, and MUL_MAT
// products with repacking on and off. Built against every kernel variant
// (test_backends_cpu, _haswell, _alderlake, _skylakex, _zen4), so each
// repack micro-kernel is checked where this machine can run it (the
// AVX-512 builds' 16-row GEMM kernels for Q4_0, Q5_0 and Q8_0 at N = 70;
// Q4_0's 16-row groups in AVX512-VNNI builds at every N). The same
// through the registry and the CPU_REPACK buffer type of every variant
// plugin: tests/backend/cpu_repack_test.cpp.
//
// A tensor counts as repacked when its buffer's type has the repack tag as
// context and its extra is the tag (what CPU_REPACK's init_tensor sets);
// the test builds that state with a stand-in buffer.
//
// F16/BF16 matrices (groups of 16 rows, k-major) take the float kernels
// (matvec_f.cpp, gemm_f.cpp) in builds with F16C.
//
// Expected values come from the ORIGINAL bytes, decoded test-side
// (ref_util.hpp), in double: want = sum_k w_k x_k. Float tolerances: the
// F32 sum of exact products, gamma_K sum |w_k x_k| (K + 2 terms of 6e-8);
// the repacked and plain GEMMs give the same bits. Quantized tolerances:
//   vs want:  the activation quantization bound of test_ops_mul_mat.cpp,
//             sum_k |w_k| * 0.6 * amax_block(k) / 127, + 1e-5 * sum |w_k x_k|
//   vs plain: the plain and repacked paths add the same exact block terms
//             float(isum_b) * (d_w * d_x) in different orders (plain: chains
//             of 16 or 4 accumulators; repacked: one chain), so they differ
//             by at most 2 * gamma_(nblk+6) * sum_b |term_b| <=
//             2.4e-7 * (nblk + 6) * (sum |w_k x_k| + quantization bound).
//             Q5_1: the plain path (the portable kernel) takes the F32
//             activations, so the two differ by up to the quantization
//             bound: 2 * (that bound + 1e-5 * sum |w_k x_k|).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backends/cpu/compute.hpp"
#include "backends/cpu/ops/mul_mat_repack.hpp"
#include "backends/cpu/ops/repack.hpp"
#include "backends/cpu/ref_util.hpp"
#include "backends/cpu/thread_pool.hpp"
#include "tessera/backend.h"

namespace tessera::cpu::test {
namespace {

// A stand-in for a CPU_REPACK buffer: only buft->context is read.
struct fake_repack_buffer {
    tsr_buffer_type bt{nullptr, nullptr, const_cast<void *>(repack_tag())};
    tsr_buffer buf{};
    fake_repack_buffer() { buf.buft = &bt; }

    // Puts t "in" the buffer the way CPU_REPACK's init_tensor and set_tensor
    // would: interleaved when eligible, else plain. t->data must hold
    // nbytes(t) of memory; src is the original image.
    void place(tsr_tensor * t, const void * src) {
        t->buffer = &buf;
        t->extra = repack_eligible(t) ? const_cast<void *>(repack_tag()) : nullptr;
        if (is_repacked(t)) {
            repack_store(t, src, 0, nbytes(t));
        } else {
            std::memcpy(t->data, src, nbytes(t));
        }
    }
};

size_t block_bytes(int32_t type) {
    return type == TSR_TYPE_Q8_0 ? 34 : type == TSR_TYPE_Q5_0 ? 22 : type == TSR_TYPE_Q5_1 ? 24 : 18;
}

bool is_float(int32_t type) {
    return type == TSR_TYPE_F16 || type == TSR_TYPE_BF16;
}

TEST(RepackLayout, EligibilityFollowsTypeShapeAndRows) {
    context ctx(data_ctx());
    EXPECT_TRUE(repack_type_supported(TSR_TYPE_Q4_0));
    EXPECT_TRUE(repack_type_supported(TSR_TYPE_Q8_0));
    // Q4_0: groups of 16 rows in AVX512-VNNI builds, else 8 (repack.hpp);
    // exactly so where this program's kernels were built for a known ISA.
    const int64_t q4 = repack_group_rows(TSR_TYPE_Q4_0);
#ifdef TESSERA_REQUIRE_ISA
    EXPECT_EQ(q4, std::string(TESSERA_REQUIRE_ISA).find("avx512vnni") != std::string::npos ? 16 : 8);
#else
    EXPECT_TRUE(q4 == 8 || q4 == 16) << q4;
#endif
    EXPECT_TRUE(repack_eligible(ctx.new_tensor(TSR_TYPE_Q4_0, {64, 16})));
    EXPECT_EQ(repack_eligible(ctx.new_tensor(TSR_TYPE_Q4_0, {64, 8})), q4 == 8);
    EXPECT_EQ(repack_eligible(ctx.new_tensor(TSR_TYPE_Q4_0, {64, 40})), q4 == 8);
    EXPECT_EQ(repack_group_rows(TSR_TYPE_Q8_0), 8);
    EXPECT_TRUE(repack_eligible(ctx.new_tensor(TSR_TYPE_Q8_0, {4096, 40})));
    EXPECT_FALSE(repack_eligible(ctx.new_tensor(TSR_TYPE_Q4_0, {64, 12})));     // rows not a multiple of 8
    EXPECT_FALSE(repack_eligible(ctx.new_tensor(TSR_TYPE_Q4_0, {64, 16, 2})));  // 3-D
    EXPECT_EQ(repack_group_rows(TSR_TYPE_Q5_0), 8); // every build, as Q4_0
    EXPECT_EQ(repack_group_rows(TSR_TYPE_Q5_1), 8);
    EXPECT_TRUE(repack_eligible(ctx.new_tensor(TSR_TYPE_Q5_0, {576, 192})));
    EXPECT_FALSE(repack_eligible(ctx.new_tensor(TSR_TYPE_Q5_0, {576, 196}))); // rows not a multiple of 8
    // F16/BF16: groups of 16 rows in builds with F16C (the vector kernels),
    // plain in the portable ones; F32 always plain.
    const int64_t fr = repack_group_rows(TSR_TYPE_F16);
    EXPECT_TRUE(fr == 0 || fr == 16) << fr;
    EXPECT_EQ(repack_group_rows(TSR_TYPE_BF16), fr);
    EXPECT_EQ(repack_type_supported(TSR_TYPE_F16), fr != 0);
    EXPECT_EQ(repack_eligible(ctx.new_tensor(TSR_TYPE_F16, {72, 32})), fr != 0); // any K
    EXPECT_EQ(repack_eligible(ctx.new_tensor(TSR_TYPE_BF16, {8, 16})), fr != 0);
    EXPECT_FALSE(repack_eligible(ctx.new_tensor(TSR_TYPE_F16, {64, 8})));  // rows not a multiple of 16
    EXPECT_FALSE(repack_eligible(ctx.new_tensor(TSR_TYPE_F16, {64, 40}))); // nor here
    EXPECT_FALSE(repack_eligible(ctx.new_tensor(TSR_TYPE_F16, {64, 16, 2})));
    tsr_tensor * f = ctx.new_tensor(TSR_TYPE_F16, {64, 32});
    EXPECT_FALSE(repack_eligible(view_2d(ctx, f, 32, 16, f->nb[1], 0))); // a view
    EXPECT_FALSE(repack_type_supported(TSR_TYPE_F32));
    EXPECT_FALSE(repack_eligible(ctx.new_tensor(TSR_TYPE_F32, {64, 16}))); // type not covered
    tsr_tensor * q = ctx.new_tensor(TSR_TYPE_Q4_0, {64, 16});
    EXPECT_FALSE(repack_eligible(view_2d(ctx, q, 64, 8, q->nb[1], 0))); // a view
    EXPECT_FALSE(is_repacked(q)); // no buffer, no tag
    EXPECT_FALSE(repack_eligible(nullptr));
}

// The documented mapping: original byte (row, block b, byte i) of a group
// g = row / G, r = row % G (G = repack_group_rows: Q4_0 16 or 8, the others
// 8) lies at (g * nblk + b) * G * bb + (i < 2 ? 2r + i : 2G + 4G ((i-2)/4)
// + 4r + (i-2)%4); Q5_0: d as above, qh byte i (2..5)
// at 16 + 4r + (i-2), quant byte i (6..21) at 48 + 32 ((i-6)/4) + 4r + (i-6)%4;
// Q5_1: d as above, m byte i (2, 3) at 16 + 2r + (i-2), qh byte i (4..7) at
// 32 + 4r + (i-4), quant byte i (8..23) at 64 + 32 ((i-8)/4) + 4r + (i-8)%4.
TEST(RepackLayout, BytesLandWhereTheLayoutSays) {
    for (int32_t type : {TSR_TYPE_Q8_0, TSR_TYPE_Q4_0, TSR_TYPE_Q5_0, TSR_TYPE_Q5_1}) {
        SCOPED_TRACE(type_name(type));
        context ctx(data_ctx());
        const int64_t K = 96, M = 32;
        tsr_tensor * t = ctx.new_tensor(static_cast<tessera::type>(type), {K, M});
        const size_t bb = block_bytes(type), nblk = K / 32, n = nbytes(t);
        const auto G = static_cast<size_t>(repack_group_rows(type));
        if (type != TSR_TYPE_Q4_0) ASSERT_EQ(G, 8u);
        std::vector<uint8_t> orig(n);
        std::mt19937 rng(7);
        for (auto & v : orig) v = static_cast<uint8_t>(rng());
        repack_store(t, orig.data(), 0, n); // the layout functions, for both types in every build
        const auto * packed = static_cast<const uint8_t *>(t->data);
        for (size_t row = 0; row < static_cast<size_t>(M); ++row) {
            for (size_t b = 0; b < nblk; ++b) {
                for (size_t i = 0; i < bb; ++i) {
                    const size_t g = row / G, r = row % G;
                    size_t in_block = i < 2 ? 2 * r + i : 2 * G + 4 * G * ((i - 2) / 4) + 4 * r + (i - 2) % 4;
                    if (type == TSR_TYPE_Q5_0 && i >= 2) {
                        in_block = i < 6 ? 16 + 4 * r + (i - 2) : 48 + 32 * ((i - 6) / 4) + 4 * r + (i - 6) % 4;
                    }
                    if (type == TSR_TYPE_Q5_1 && i >= 2) {
                        in_block = i < 4   ? 16 + 2 * r + (i - 2)
                                   : i < 8 ? 32 + 4 * r + (i - 4)
                                           : 64 + 32 * ((i - 8) / 4) + 4 * r + (i - 8) % 4;
                    }
                    const size_t at = (g * nblk + b) * G * bb + in_block;
                    ASSERT_EQ(packed[at], orig[row * nblk * bb + b * bb + i]) << "row " << row << " block " << b << " byte " << i;
                }
            }
        }
    }
}

// The float layout: element (k, row) at ((row / 16) * K + k) * 16 + row % 16,
// two bytes each (the layout functions work for F16/BF16 in every build).
TEST(RepackLayout, FloatElementsLandWhereTheLayoutSays) {
    for (int32_t type : {TSR_TYPE_F16, TSR_TYPE_BF16}) {
        SCOPED_TRACE(type_name(type));
        context ctx(data_ctx());
        const int64_t K = 37, M = 48;
        tsr_tensor * t = ctx.new_tensor(static_cast<tessera::type>(type), {K, M});
        const size_t n = nbytes(t);
        std::vector<uint16_t> orig(n / 2);
        std::mt19937 rng(5);
        for (auto & v : orig) v = static_cast<uint16_t>(rng());
        repack_store(t, orig.data(), 0, n);
        std::vector<uint16_t> packed(n / 2);
        std::memcpy(packed.data(), t->data, n);
        for (int64_t row = 0; row < M; ++row) {
            for (int64_t k = 0; k < K; ++k) {
                ASSERT_EQ(packed[static_cast<size_t>((row / 16 * K + k) * 16 + row % 16)], orig[static_cast<size_t>(row * K + k)])
                    << "row " << row << " k " << k;
            }
        }
    }
}

TEST(RepackLayout, WholeAndPartialRangesRoundTripExactly) {
    for (int32_t type : {TSR_TYPE_Q8_0, TSR_TYPE_Q4_0, TSR_TYPE_Q5_0, TSR_TYPE_Q5_1, TSR_TYPE_F16, TSR_TYPE_BF16, TSR_TYPE_Q4_K,
                         TSR_TYPE_Q5_K, TSR_TYPE_Q6_K}) {
        SCOPED_TRACE(type_name(type));
        const bool k_quant = type == TSR_TYPE_Q4_K || type == TSR_TYPE_Q5_K || type == TSR_TYPE_Q6_K;
        if (k_quant && !repack_type_supported(type)) continue; // the K-quant layouts exist in AVX2 builds only
        context ctx(data_ctx());
        tsr_tensor * t = ctx.new_tensor(static_cast<tessera::type>(type), {is_float(type) ? 200 : k_quant ? 768 : 256, 48});
        const size_t n = nbytes(t);
        std::vector<uint8_t> orig(n), back(n);
        std::mt19937 rng(11);
        for (auto & v : orig) v = static_cast<uint8_t>(rng());
        repack_store(t, orig.data(), 0, n);
        repack_load(t, back.data(), 0, n);
        ASSERT_EQ(back, orig);
        // Partial writes and reads at odd offsets and lengths (crossing
        // scale/quant units, blocks, rows and groups).
        std::uniform_int_distribution<size_t> pos(0, n - 1);
        for (int iter = 0; iter < 200; ++iter) {
            size_t off = pos(rng), len = pos(rng) % 700;
            len = std::min(len, n - off);
            std::vector<uint8_t> patch(len);
            for (auto & v : patch) v = static_cast<uint8_t>(rng());
            repack_store(t, patch.data(), off, len);
            std::copy(patch.begin(), patch.end(), orig.begin() + static_cast<ptrdiff_t>(off));
            const size_t roff = pos(rng), rlen = std::min(n - roff, pos(rng) % 700);
            std::vector<uint8_t> got(rlen);
            repack_load(t, got.data(), roff, rlen);
            ASSERT_TRUE(std::equal(got.begin(), got.end(), orig.begin() + static_cast<ptrdiff_t>(roff))) << off << "+" << len;
        }
        repack_load(t, back.data(), 0, n);
        EXPECT_EQ(back, orig);
    }
}

struct rp_case {
    int32_t type;
    int64_t K, M;
};

class RepackMulMat : public ::testing::TestWithParam<rp_case> {};

TEST_P(RepackMulMat, SameProductsWithRepackingOnAndOff) {
    const rp_case c = GetParam();
    for (int64_t N : {1, 2, 3, 4, 7, 70, 200}) {
        // N = 200 at K = 4096 only: two column blocks of the AMX GEMM (1 MiB
        // of 16-column tiles: 192 columns; the vector GEMM's 256 KiB: 48).
        if (N == 200 && c.K < 4096) continue;
        SCOPED_TRACE("N=" + std::to_string(N));
        context ctx(data_ctx());
        std::mt19937 rng(static_cast<unsigned>(c.K * 31 + c.M * 7 + N));
        tsr_tensor * a = ctx.new_tensor(static_cast<tessera::type>(c.type), {c.K, c.M});
        fill_weights(a, rng);
        const std::vector<uint8_t> orig(static_cast<uint8_t *>(a->data), static_cast<uint8_t *>(a->data) + nbytes(a));
        tsr_tensor * ar = ctx.new_tensor(static_cast<tessera::type>(c.type), {c.K, c.M});
        fake_repack_buffer fb;
        fb.place(ar, orig.data());
        const bool eligible = repack_type_supported(c.type) && c.M % repack_group_rows(c.type) == 0;
        const bool amx_f16 = eligible && is_float(c.type) && mul_mat_repack_float_uses_amx(); // F16, BF16
        ASSERT_EQ(is_repacked(ar), eligible);
        if (eligible) ASSERT_NE(std::memcmp(ar->data, orig.data(), orig.size()), 0) << "layout unchanged";
        std::vector<uint8_t> back(orig.size());
        (is_repacked(ar) ? repack_load(ar, back.data(), 0, back.size()) : (void)std::memcpy(back.data(), ar->data, back.size()));
        ASSERT_EQ(back, orig);

        tsr_tensor * b = ctx.new_tensor(TSR_TYPE_F32, {c.K, N});
        fill_uniform(b, rng);
        tsr_tensor * plain = mul_mat(ctx, a, b);
        tsr_tensor * packed = mul_mat(ctx, ar, b);
        ASSERT_TRUE(supports_op(packed));
        ASSERT_EQ(compute(plain, 1), TSR_STATUS_SUCCESS);
        ASSERT_EQ(compute(packed, 1), TSR_STATUS_SUCCESS);
        const std::vector<char> one(static_cast<char *>(packed->data), static_cast<char *>(packed->data) + nbytes(packed));
        for (int nth : {2, 3}) {
            std::memset(packed->data, 0, nbytes(packed));
            ASSERT_EQ(compute(packed, nth), TSR_STATUS_SUCCESS);
            ASSERT_EQ(std::memcmp(one.data(), packed->data, one.size()), 0) << nth << " threads differ from 1";
        }

        // Expected values from the original bytes (the plain tensor a).
        const int64_t nblk = c.K / 32;
        std::vector<double> w(static_cast<size_t>(c.K)), x(static_cast<size_t>(c.K)), amax;
        for (int64_t n = 0; n < N; ++n) {
            for (int64_t k = 0; k < c.K; ++k) x[k] = get(b, k, n);
            if (!is_float(c.type)) block_amax(x, amax); // quantized: per-block bounds (K whole blocks)
            for (int64_t m = 0; m < c.M; ++m) {
                double want = 0, abs_sum = 0, q_err = 0;
                for (int64_t k = 0; k < c.K; ++k) {
                    w[k] = get(a, k, m);
                    want += w[k] * x[k];
                    abs_sum += std::fabs(w[k] * x[k]);
                    if (!is_float(c.type)) q_err += std::fabs(w[k]) * 0.6 * amax[k] / 127.0;
                }
                const double got = get(packed, m, n), ref_plain = get(plain, m, n);
                if (is_float(c.type)) {
                    // Exact products summed in F32: |error| <= gamma_K sum |w x|; BF16 on
                    // AVX512-BF16 builds rounds the activations to BF16 first (2^-8, doubled);
                    // the AMX F16 GEMM (gemm_f_amx.cpp) drops w_lo x_lo and x's bits past
                    // x_hi + x_lo: each at most 2^-16 |w x|, together doubled.
                    const bool amx = amx_f16 && N >= 4;
                    const double act = c.type == TSR_TYPE_BF16 ? std::ldexp(abs_sum, -7)
                                       : amx                   ? std::ldexp(abs_sum, -14)
                                                               : 0.0;
                    const double bound = 6e-8 * static_cast<double>(c.K + 2) * abs_sum + act + 1e-30;
                    ASSERT_NEAR(got, want, bound) << "m=" << m << " n=" << n;
                    if (amx) { // tile products against the AVX-512 GEMM's F32 chains
                        ASSERT_NEAR(got, ref_plain, 2 * bound) << "repacked (AMX) vs plain GEMM, m=" << m << " n=" << n;
                    } else if (N >= 4) { // both through the GEMM: the same chains on the same F32 values
                        ASSERT_EQ(got, ref_plain) << "repacked vs plain GEMM, m=" << m << " n=" << n;
                    } else { // mat-vec: the plain kernel sums in 16 lanes, the repacked one in chains
                        ASSERT_NEAR(got, ref_plain, 2 * bound) << "repacked vs plain, m=" << m << " n=" << n;
                    }
                    continue;
                }
                ASSERT_NEAR(got, want, q_err + 1e-5 * abs_sum) << "m=" << m << " n=" << n;
                const double vs_plain = c.type == TSR_TYPE_Q5_1 ? 2 * (q_err + 1e-5 * abs_sum)
                                                                : 2.4e-7 * static_cast<double>(nblk + 6) * (abs_sum + q_err);
                ASSERT_NEAR(got, ref_plain, vs_plain + 1e-30) << "repacked vs plain, m=" << m << " n=" << n;
            }
        }
    }
}

// The kernels add the same block terms in the same order per element
// (mul_mat_repack.cpp), so a column's products are the same bits whichever
// kernel computes them: the one-column kernel (token generation; on
// AVX512-VNNI builds its own 512-bit kernel), the C-column tiles and the
// AVX-512 builds' 16-row GEMM kernel (N = 70). Repacked float weights the
// same: the one-token kernel chains over the GEMM's K chunks. Except F16
// and BF16 on AMX-BF16 (gemm_f_amx.cpp): there the GEMM's bits hold for any column
// count from k_gemm_min_n (4 copies of the column against the batch of 70)
// and the one-column kernel's F32 chains agree within the split's bound.
TEST_P(RepackMulMat, AColumnGetsTheSameBitsAloneAndInABatch) {
    rp_case c = GetParam();
    if (!repack_type_supported(c.type)) GTEST_SKIP() << type_name(c.type) << " is stored plainly in this build";
    const int64_t g = repack_group_rows(c.type);
    c.M += (g - c.M % g) % g; // whole groups of rows, so that the matrix is repacked
    context ctx(data_ctx());
    std::mt19937 rng(static_cast<unsigned>(c.K + c.M));
    tsr_tensor * a = ctx.new_tensor(static_cast<tessera::type>(c.type), {c.K, c.M});
    fill_weights(a, rng);
    tsr_tensor * ar = ctx.new_tensor(static_cast<tessera::type>(c.type), {c.K, c.M});
    fake_repack_buffer fb;
    fb.place(ar, a->data);
    ASSERT_TRUE(is_repacked(ar));
    constexpr int64_t N = 70;
    tsr_tensor * b = ctx.new_tensor(TSR_TYPE_F32, {c.K, N});
    fill_uniform(b, rng);
    tsr_tensor * batch = mul_mat(ctx, ar, b);
    ASSERT_EQ(compute(batch, 2), TSR_STATUS_SUCCESS);
    const bool amx_f16 = is_float(c.type) && mul_mat_repack_float_uses_amx(); // F16, BF16
    for (int64_t n : {int64_t{0}, int64_t{9}, N - 1}) {
        for (int64_t cols : {1, 3, 4}) {
            SCOPED_TRACE("column " + std::to_string(n) + " of " + std::to_string(cols));
            tsr_tensor * x = ctx.new_tensor(TSR_TYPE_F32, {c.K, cols});
            for (int64_t j = 0; j < cols; ++j) {
                std::memcpy(static_cast<char *>(x->data) + j * x->nb[1], static_cast<char *>(b->data) + n * b->nb[1],
                            static_cast<size_t>(x->nb[1]));
            }
            tsr_tensor * y = mul_mat(ctx, ar, x);
            ASSERT_EQ(compute(y, 1), TSR_STATUS_SUCCESS);
            for (int64_t j = 0; j < cols; ++j) {
                if (amx_f16 && cols < k_gemm_min_n) {
                    for (int64_t m = 0; m < c.M; ++m) {
                        double abs_sum = 0;
                        for (int64_t k = 0; k < c.K; ++k) abs_sum += std::fabs(get(a, k, m) * get(x, k, j));
                        // The same products (BF16: x rounded alike), summed apart: 2 gamma_K; F16 as above.
                        const double bound = 6e-8 * static_cast<double>(c.K + 2) * abs_sum +
                                             (c.type == TSR_TYPE_F16 ? std::ldexp(abs_sum, -14) : 0.0);
                        ASSERT_NEAR(get(y, m, j), get(batch, m, n), 2 * bound) << "m=" << m;
                    }
                    continue;
                }
                ASSERT_EQ(std::memcmp(static_cast<char *>(y->data) + j * y->nb[1], static_cast<char *>(batch->data) + n * batch->nb[1],
                                      static_cast<size_t>(y->nb[1])),
                          0);
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, RepackMulMat,
                         ::testing::Values(rp_case{TSR_TYPE_Q8_0, 64, 8}, rp_case{TSR_TYPE_Q8_0, 256, 24},
                                           rp_case{TSR_TYPE_Q8_0, 4096, 40}, rp_case{TSR_TYPE_Q8_0, 64, 12},
                                           rp_case{TSR_TYPE_Q4_0, 64, 8}, rp_case{TSR_TYPE_Q4_0, 256, 24},
                                           rp_case{TSR_TYPE_Q4_0, 4096, 40}, rp_case{TSR_TYPE_Q4_0, 64, 12},
                                           // whole groups of 16 (AVX512-VNNI builds): one, three, five
                                           rp_case{TSR_TYPE_Q4_0, 64, 16}, rp_case{TSR_TYPE_Q4_0, 576, 48},
                                           rp_case{TSR_TYPE_Q4_0, 1024, 80},
                                           rp_case{TSR_TYPE_Q5_0, 64, 8}, rp_case{TSR_TYPE_Q5_0, 576, 24},
                                           rp_case{TSR_TYPE_Q5_0, 4096, 40}, rp_case{TSR_TYPE_Q5_0, 64, 12},
                                           rp_case{TSR_TYPE_Q5_1, 64, 8}, rp_case{TSR_TYPE_Q5_1, 576, 24},
                                           rp_case{TSR_TYPE_Q5_1, 4096, 40}, rp_case{TSR_TYPE_Q5_1, 64, 12},
                                           // float: a K chunk (256) boundary, a short last item (3 groups of
                                           // 16), a K not a multiple of 8, rows not whole groups; groups up
                                           // to 32 KiB are read one after the other, longer ones (K 1100:
                                           // 35200 bytes; 5 groups, a short last item) side by side
                                           rp_case{TSR_TYPE_F16, 64, 16}, rp_case{TSR_TYPE_F16, 600, 48},
                                           rp_case{TSR_TYPE_F16, 37, 112}, rp_case{TSR_TYPE_F16, 64, 24},
                                           rp_case{TSR_TYPE_F16, 1100, 80},
                                           rp_case{TSR_TYPE_BF16, 600, 48}, rp_case{TSR_TYPE_BF16, 2048, 96},
                                           // BF16 pairs: K odd (a last pair of one element), a short last
                                           // panel of 16 and 32 rows (112 = 2 x 48 + 16, 80 = 48 + 32)
                                           rp_case{TSR_TYPE_BF16, 37, 112}, rp_case{TSR_TYPE_BF16, 1101, 80}),
                         [](const ::testing::TestParamInfo<rp_case> & info) {
                             return std::string(type_name(info.param.type)) + "_K" + std::to_string(info.param.K) +
                                    "_M" + std::to_string(info.param.M);
                         });

// The kernels built with AMX (the sapphirerapids copy) compute their GEMMs
// (quantized; F16 and BF16 with AMX-BF16) on tiles unless TESSERA_CPU_AMX=0 turns that off (tuning.hpp), so the
// tests above compare the tile products with the one-column kernel's and
// the expected values; other builds never do.
TEST(RepackMulMat, TheGemmRunsOnAmxExactlyWhereTheBuildHasIt) {
    bool want = false;
#ifdef TESSERA_REQUIRE_ISA
    const char * off = std::getenv("TESSERA_CPU_AMX");
    want = std::string(TESSERA_REQUIRE_ISA).find("amx-int8") != std::string::npos && (off == nullptr || std::string(off) != "0");
#endif
    EXPECT_EQ(mul_mat_repack_uses_amx(), want);
    bool want_f16 = false; // the F16 and BF16 GEMMs need AMX-BF16 as well
#ifdef TESSERA_REQUIRE_ISA
    want_f16 = want && std::string(TESSERA_REQUIRE_ISA).find("amx-bf16") != std::string::npos;
#endif
    EXPECT_EQ(mul_mat_repack_float_uses_amx(), want_f16);
}

// Q5_0 quants at the ends of their range against activations that quantize
// to +-127: every block's products have the largest magnitude the format
// allows (w = 15: 31 * 127 per unsigned product, 8 such pairs overflow
// int16; w = -16: q = 0), so a kernel that kept its int16 sums too long
// would wrap. Every weight block has d = 1, so the exact product is an
// integer times the activation scale; repacked and plain must agree with it.
TEST(RepackMulMat, Q5_0ExtremeQuantsDoNotWrap) {
    constexpr int64_t K = 256, M = 16;
    for (int64_t N : {1, 3, 70}) {
        for (const uint8_t fill : {uint8_t{0xff}, uint8_t{0x00}}) {
            SCOPED_TRACE("N=" + std::to_string(N) + " fill=" + std::to_string(fill));
            context ctx(data_ctx());
            tsr_tensor * a = ctx.new_tensor(TSR_TYPE_Q5_0, {K, M});
            auto * p = static_cast<uint8_t *>(a->data);
            for (size_t blk = 0; blk < nbytes(a) / 22; ++blk) {
                const uint16_t one = 0x3c00; // F16 1.0
                std::memcpy(p + blk * 22, &one, 2);
                std::memset(p + blk * 22 + 2, fill, 20); // qh and nibbles: all 31 or all 0
            }
            tsr_tensor * ar = ctx.new_tensor(TSR_TYPE_Q5_0, {K, M});
            fake_repack_buffer fb;
            fb.place(ar, a->data);
            ASSERT_TRUE(is_repacked(ar));
            tsr_tensor * b = ctx.new_tensor(TSR_TYPE_F32, {K, N});
            for (int64_t n = 0; n < N; ++n) {
                // column 0 all +1 (the largest int16 pair sums), then all
                // -1, then mixed signs
                for (int64_t k = 0; k < K; ++k) set_f32(b, n % 3 == 0 || (n % 3 == 2 && k % 3 != 0) ? 1.0f : -1.0f, k, n);
            }
            tsr_tensor * plain = mul_mat(ctx, a, b);
            tsr_tensor * packed = mul_mat(ctx, ar, b);
            ASSERT_EQ(compute(plain, 2), TSR_STATUS_SUCCESS);
            ASSERT_EQ(compute(packed, 2), TSR_STATUS_SUCCESS);
            const double w = fill == 0xff ? 15.0 : -16.0;
            for (int64_t n = 0; n < N; ++n) {
                double want = 0;
                for (int64_t k = 0; k < K; ++k) want += w * get(b, k, n);
                // +-1 quantizes to +-127 with d = F16(1/127): relative error <= 2^-11.
                const double bound = 16.0 * K * 1e-3;
                for (int64_t m = 0; m < M; ++m) {
                    ASSERT_NEAR(get(packed, m, n), want, bound) << "repacked m=" << m << " n=" << n;
                    ASSERT_NEAR(get(plain, m, n), want, bound) << "plain m=" << m << " n=" << n;
                }
            }
        }
    }
}

// ---- K-quants, Q4_K, Q5_K and Q6_K (groups of repack_group_rows(type) rows: 16
// in AVX-512 builds, 8 in the other AVX2 builds; stored plainly without
// AVX2) ----

// Where the layout (repack.hpp) puts original byte i of a row's super-block
// b: offset inside the group's super-block, for row r of G.
size_t k_layout_at(int32_t type, size_t i, size_t r, size_t G, size_t b) {
    if (type == TSR_TYPE_Q4_K) {
        if (i < 2) return 2 * r + i;                                 // d
        if (i < 4) return 2 * G + 2 * r + (i - 2);                   // dmin
        if (i < 16) return 4 * G + G * (i - 4) + r;                  // scale bytes
        return 16 * G + 4 * G * ((i - 16) / 4) + 4 * r + (i - 16) % 4; // qs steps
    }
    if (type == TSR_TYPE_Q5_K) {
        if (i < 16) return k_layout_at(TSR_TYPE_Q4_K, i, r, G, b);       // d, dmin, scales as in Q4_K
        if (i < 48) return 16 * G + 4 * G * ((i - 16) / 4) + 4 * r + i % 4; // qh steps
        return 48 * G + 4 * G * ((i - 48) / 4) + 4 * r + i % 4;           // qs steps
    }
    // Q6_K: two halves of 104 G bytes (scales 8h..8h + 7, then for s = 0..7
    // the triple ql step 16h + s, qh step 8h + s, ql step 16h + 8 + s); d
    // after them in even super-blocks, before them in odd.
    const size_t odd = b % 2, body = odd ? 2 * G : 0;
    if (i >= 208) return (odd ? 0 : 208 * G) + 2 * r + (i - 208); // d
    if (i < 128) {                                                // ql step j
        const size_t j = i / 4, h = j / 16, s = j % 16;
        return body + G * (104 * h + 8 + 12 * (s % 8) + (s < 8 ? 0 : 8)) + 4 * r + i % 4;
    }
    if (i < 192) { // qh step q
        const size_t q = (i - 128) / 4;
        return body + G * (104 * (q / 8) + 8 + 12 * (q % 8) + 4) + 4 * r + i % 4;
    }
    const size_t k = i - 192; // scale k
    return body + G * (104 * (k / 8) + k % 8) + r;
}

size_t k_block_bytes(int32_t type) {
    return type == TSR_TYPE_Q4_K ? 144 : type == TSR_TYPE_Q5_K ? 176 : 210;
}

class RepackLayoutK : public ::testing::TestWithParam<int32_t> {};

TEST_P(RepackLayoutK, BytesLandWhereTheLayoutSays) {
    const int32_t type = GetParam();
    const auto G = static_cast<size_t>(repack_group_rows(type));
    if (G == 0) GTEST_SKIP() << type_name(type) << " is stored plainly in this build";
    context ctx(data_ctx());
    const size_t K = 768, M = 2 * G, n_super = K / 256, bb = k_block_bytes(type); // even and odd super-blocks
    tsr_tensor * t = ctx.new_tensor(static_cast<tessera::type>(type), {static_cast<int64_t>(K), static_cast<int64_t>(M)});
    ASSERT_TRUE(repack_eligible(t));
    const size_t n = nbytes(t);
    ASSERT_EQ(n, M * n_super * bb);
    std::vector<uint8_t> orig(n);
    std::mt19937 rng(17);
    for (auto & v : orig) v = static_cast<uint8_t>(rng());
    repack_store(t, orig.data(), 0, n);
    const auto * packed = static_cast<const uint8_t *>(t->data);
    for (size_t row = 0; row < M; ++row) {
        for (size_t b = 0; b < n_super; ++b) {
            const size_t base = (row / G * n_super + b) * bb * G;
            for (size_t i = 0; i < bb; ++i) {
                ASSERT_EQ(packed[base + k_layout_at(type, i, row % G, G, b)], orig[row * n_super * bb + b * bb + i])
                    << "row " << row << " block " << b << " byte " << i;
            }
        }
    }
}

// Every 4-byte quant unit (the kernels' step loads of 4G bytes) starts at
// a multiple of 4G from its group, in odd super-blocks too: aligned loads
// when the group is (Q6_K's 210-byte blocks make odd ones start 2G off).
TEST_P(RepackLayoutK, StepLoadsAreAligned) {
    const int32_t type = GetParam();
    const auto G = static_cast<size_t>(repack_group_rows(type));
    if (G == 0) GTEST_SKIP() << type_name(type) << " is stored plainly in this build";
    const size_t bb = k_block_bytes(type), first = type == TSR_TYPE_Q4_K ? 16 : type == TSR_TYPE_Q5_K ? 16 : 0,
                 last = type == TSR_TYPE_Q6_K ? 192 : bb;
    for (size_t b = 0; b < 3; ++b) {
        for (size_t i = first; i < last; i += 4) {
            EXPECT_EQ((b * bb * G + k_layout_at(type, i, 0, G, b)) % (4 * G), 0u) << "block " << b << " byte " << i;
        }
    }
}

TEST_P(RepackLayoutK, Eligibility) {
    const int32_t type = GetParam();
    const auto ty = static_cast<tessera::type>(type);
    const int64_t G = repack_group_rows(type);
    context ctx(data_ctx());
    EXPECT_TRUE(G == 0 || G == 8 || G == 16) << G;
    EXPECT_EQ(repack_type_supported(type), G != 0);
    EXPECT_EQ(G, repack_type_supported(TSR_TYPE_F16) ? G : 0); // both need AVX2/F16C
    // One group size for the K-quants; Q6_K only in AVX-512 builds (16 rows).
    if (type == TSR_TYPE_Q6_K) {
        EXPECT_EQ(G, repack_group_rows(TSR_TYPE_Q4_K) == 16 ? 16 : 0);
    } else {
        EXPECT_EQ(G, repack_group_rows(TSR_TYPE_Q4_K));
    }
    if (G == 0) GTEST_SKIP() << type_name(type) << " is stored plainly in this build";
    EXPECT_TRUE(repack_eligible(ctx.new_tensor(ty, {256, G})));
    EXPECT_TRUE(repack_eligible(ctx.new_tensor(ty, {2048, 3 * G})));
    EXPECT_FALSE(repack_eligible(ctx.new_tensor(ty, {256, G + G / 2}))); // rows not whole groups
    EXPECT_FALSE(repack_eligible(ctx.new_tensor(ty, {256, G / 2})));     // nor here
    EXPECT_FALSE(repack_eligible(ctx.new_tensor(ty, {256, G, 2})));      // 3-D
    tsr_tensor * t = ctx.new_tensor(ty, {768, 3 * G});
    EXPECT_FALSE(repack_eligible(view_2d(ctx, t, 768, G, t->nb[1], 0))); // a view
    // (Round trips: RepackLayout.WholeAndPartialRangesRoundTripExactly.)
}

INSTANTIATE_TEST_SUITE_P(Types, RepackLayoutK, ::testing::Values(TSR_TYPE_Q4_K, TSR_TYPE_Q5_K, TSR_TYPE_Q6_K),
                         [](const ::testing::TestParamInfo<int32_t> & info) { return std::string(type_name(info.param)); });

// Repacked K-quant products (the one-token kernels of mul_mat_k_repack.cpp
// for N < 4, gemm_k's panels unpacked from the groups for N >= 4) compute
// the integers and F32 steps of vec_dot_k.hpp per row, like the plain-row
// kernels: every element must have the plain product's bits, on 1, 2 or 3
// threads. Independently, each element must lie within the Q8_K
// activation-quantization bound of the double product of the decoded
// original bytes: sum_k |w_k| * 0.5 * amax_256(k) / 127 (half a step of
// the super-block's activation scale), + 1e-5 sum |w_k x_k| for the F32 steps.
struct rk_case {
    int32_t type;
    int64_t K, groups;
};

class RepackMulMatK : public ::testing::TestWithParam<rk_case> {};

TEST_P(RepackMulMatK, SameBitsAsThePlainRowsForAnyColumnsAndThreads) {
    const rk_case c = GetParam();
    const auto ty = static_cast<tessera::type>(c.type);
    const int64_t G = repack_group_rows(c.type);
    if (G == 0) GTEST_SKIP() << type_name(c.type) << " is stored plainly in this build";
    const int64_t M = c.groups * G;
    for (int64_t N : {1, 2, 3, 4, 5, 9, 70}) {
        SCOPED_TRACE("N=" + std::to_string(N));
        context ctx(data_ctx());
        std::mt19937 rng(static_cast<unsigned>(c.K * 13 + M * 5 + N));
        tsr_tensor * a = ctx.new_tensor(ty, {c.K, M});
        fill_weights(a, rng);
        tsr_tensor * ar = ctx.new_tensor(ty, {c.K, M});
        fake_repack_buffer fb;
        fb.place(ar, a->data);
        ASSERT_TRUE(is_repacked(ar));
        tsr_tensor * b = ctx.new_tensor(TSR_TYPE_F32, {c.K, N});
        fill_uniform(b, rng);
        tsr_tensor * plain = mul_mat(ctx, a, b);
        tsr_tensor * packed = mul_mat(ctx, ar, b);
        ASSERT_TRUE(supports_op(packed));
        ASSERT_EQ(compute(plain, 1), TSR_STATUS_SUCCESS);
        for (int nth : {1, 2, 3}) {
            std::memset(packed->data, 0x7f, nbytes(packed));
            ASSERT_EQ(compute(packed, nth), TSR_STATUS_SUCCESS);
            ASSERT_EQ(std::memcmp(plain->data, packed->data, nbytes(plain)), 0) << nth << " threads: repacked differs from plain";
        }
        std::vector<double> x(static_cast<size_t>(c.K)), amax(static_cast<size_t>(c.K));
        for (int64_t n = 0; n < N; ++n) {
            for (int64_t k = 0; k < c.K; ++k) x[k] = get(b, k, n);
            for (int64_t k0 = 0; k0 < c.K; k0 += 256) {
                double mx = 0;
                for (int64_t k = k0; k < k0 + 256; ++k) mx = std::max(mx, std::fabs(x[k]));
                std::fill(amax.begin() + k0, amax.begin() + k0 + 256, mx);
            }
            for (int64_t m = 0; m < M; ++m) {
                double want = 0, abs_sum = 0, q_err = 0;
                for (int64_t k = 0; k < c.K; ++k) {
                    const double w = get(a, k, m);
                    want += w * x[k];
                    abs_sum += std::fabs(w * x[k]);
                    q_err += std::fabs(w) * 0.5 * amax[k] / 127.0;
                }
                ASSERT_NEAR(get(packed, m, n), want, q_err + 1e-5 * abs_sum) << "m=" << m << " n=" << n;
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, RepackMulMatK,
                         ::testing::Values(rk_case{TSR_TYPE_Q4_K, 256, 1}, rk_case{TSR_TYPE_Q4_K, 512, 3},
                                           rk_case{TSR_TYPE_Q4_K, 2304, 2}, rk_case{TSR_TYPE_Q4_K, 1024, 9},
                                           rk_case{TSR_TYPE_Q5_K, 256, 1}, rk_case{TSR_TYPE_Q5_K, 512, 3},
                                           rk_case{TSR_TYPE_Q5_K, 2304, 2}, rk_case{TSR_TYPE_Q5_K, 1024, 9},
                                           rk_case{TSR_TYPE_Q6_K, 256, 1}, rk_case{TSR_TYPE_Q6_K, 512, 3},
                                           rk_case{TSR_TYPE_Q6_K, 2304, 2}, rk_case{TSR_TYPE_Q6_K, 1024, 9}),
                         [](const ::testing::TestParamInfo<rk_case> & info) {
                             return std::string(type_name(info.param.type)) + "_K" + std::to_string(info.param.K) + "_groups" +
                                    std::to_string(info.param.groups);
                         });

// Repacked weights of type ty (K x M, random), placed as CPU_REPACK would.
tsr_tensor * repacked_weight(context & ctx, fake_repack_buffer & fb, int32_t ty, int64_t K, int64_t M, std::mt19937 & rng) {
    tsr_tensor * a = ctx.new_tensor(static_cast<tessera::type>(ty), {K, M});
    fill_weights(a, rng);
    tsr_tensor * ar = ctx.new_tensor(static_cast<tessera::type>(ty), {K, M});
    fb.place(ar, a->data);
    return ar;
}

bool same_bytes(const tsr_tensor * x, const tsr_tensor * y) {
    return nbytes(x) == nbytes(y) && std::memcmp(x->data, y->data, nbytes(x)) == 0;
}

// In a graph walk a quantized MUL_MAT takes the activation columns its
// thread's scratch holds from the product computed just before over the
// same tensor (compute.hpp, scratch_memo): a layer's q, k and v, gate and
// up. Every product must keep the bits it has computed alone: after a node
// that rewrote the input in place (only the previous node's columns count),
// after a product whose format differs (Q8_0's sums are not shifted as
// Q4_0's and Q5_0's; the K-quants' pair words depend on the type), on 1 to
// 3 threads, for one column and three; and for 21 columns, where the GEMMs
// quantize into scratch shared by the threads and the next GEMM over the
// same tensor and format takes it (mul_mat_same_prepared).
TEST(RepackMulMat, ProductsOfOneInputInAGraphKeepTheirBits) {
    const int64_t K = 512, M = 64;
    // Q8_0 last before the in-place node and first after it: the same
    // tensor and format, so only the previous-node rule stops a stale reuse.
    const int32_t before[] = {TSR_TYPE_Q4_0, TSR_TYPE_Q4_0, TSR_TYPE_Q5_0, TSR_TYPE_Q4_K, TSR_TYPE_Q4_K,
                              TSR_TYPE_Q6_K, TSR_TYPE_Q8_0, TSR_TYPE_Q5_1, TSR_TYPE_Q8_0};
    const int32_t after[] = {TSR_TYPE_Q8_0, TSR_TYPE_Q8_0, TSR_TYPE_Q4_K};
    for (int64_t N : {1, 3, 21}) {
        SCOPED_TRACE("N=" + std::to_string(N));
        context ctx(data_ctx());
        std::mt19937 rng(static_cast<unsigned>(40 + N));
        fake_repack_buffer fb;
        tsr_tensor * h = ctx.new_tensor(TSR_TYPE_F32, {K, N});
        fill_uniform(h, rng);
        tsr_tensor * h_before = ctx.new_tensor(TSR_TYPE_F32, {K, N}); // h's values, then 2h
        tsr_tensor * h_after = ctx.new_tensor(TSR_TYPE_F32, {K, N});
        std::memcpy(h_before->data, h->data, nbytes(h));
        for (int64_t i = 0; i < K * N; ++i) static_cast<float *>(h_after->data)[i] = 2.0f * static_cast<float *>(h->data)[i];

        graph g;
        std::vector<std::pair<tsr_tensor *, tsr_tensor *>> products; // (in the graph, alone)
        auto product = [&](int32_t ty, tsr_tensor * alone_input) {
            tsr_tensor * w = repacked_weight(ctx, fb, ty, K, M, rng);
            tsr_tensor * p = mul_mat(ctx, w, h);
            tsr_tensor * alone = mul_mat(ctx, w, alone_input);
            g.build_forward(p);
            products.emplace_back(p, alone);
        };
        for (int32_t ty : before) product(ty, h_before);
        tsr_tensor * twice = scale(ctx, h, 2.0f, 0.0f);
        twice->data = h->data; // in place: rewrites h
        g.build_forward(twice);
        for (int32_t ty : after) product(ty, h_after);
        for (auto & [p, alone] : products) ASSERT_EQ(compute(alone, 1), TSR_STATUS_SUCCESS);

        thread_pool pool(3);
        for (int nth : {1, 2, 3}) {
            SCOPED_TRACE(std::to_string(nth) + " threads");
            std::memcpy(h->data, h_before->data, nbytes(h));
            for (auto & [p, alone] : products) std::memset(p->data, 0x7f, nbytes(p));
            ASSERT_EQ(pool.compute(g.view(), nth), TSR_STATUS_SUCCESS);
            for (size_t i = 0; i < products.size(); ++i) {
                EXPECT_TRUE(same_bytes(products[i].first, products[i].second))
                    << "product " << i << " (" << type_name(products[i].first->src[0]->type) << ")";
            }
        }
    }
}

// The reuse itself: a product computed right after another over the same
// tensor, whose values changed in between behind the graph's back, gives
// the product of the OLD values (the previous node's columns were taken);
// without a previous node, or after a product of another format, the new.
TEST(RepackMulMat, TheNextProductTakesTheColumnsThePreviousLeft) {
    const int64_t K = 256, M = 32;
    // Q4_0 and Q8_0 columns differ where the kernels shift Q4_0's sums
    // (vector builds: by 3, Q8_0's by 7 or 0); the portable ones store both alike.
    const bool q8_like_q4 = repack_act_layout(TSR_TYPE_Q4_0) == repack_act_layout(TSR_TYPE_Q8_0);
#ifdef TESSERA_REQUIRE_ISA
    EXPECT_FALSE(q8_like_q4) << "the vector kernels shift Q4_0's sums";
#endif
    for (const auto & [first, second, reuse] : {std::tuple{TSR_TYPE_Q4_0, TSR_TYPE_Q4_0, true},
                                                std::tuple{TSR_TYPE_Q4_K, TSR_TYPE_Q4_K, true},
                                                std::tuple{TSR_TYPE_Q4_0, TSR_TYPE_Q8_0, q8_like_q4},
                                                std::tuple{TSR_TYPE_Q4_K, TSR_TYPE_Q6_K, false}}) {
        SCOPED_TRACE(std::string(type_name(first)) + " then " + std::string(type_name(second)));
        context ctx(data_ctx());
        std::mt19937 rng(9);
        fake_repack_buffer fb;
        tsr_tensor * h = ctx.new_tensor(TSR_TYPE_F32, {K, 1});
        fill_uniform(h, rng);
        tsr_tensor * h_old = ctx.new_tensor(TSR_TYPE_F32, {K, 1});
        std::memcpy(h_old->data, h->data, nbytes(h));
        tsr_tensor * w1 = repacked_weight(ctx, fb, first, K, M, rng);
        tsr_tensor * w2 = repacked_weight(ctx, fb, second, K, M, rng);
        if (!is_repacked(w1) || !is_repacked(w2)) continue; // K-quants are stored plainly in builds without AVX2
        tsr_tensor * p1 = mul_mat(ctx, w1, h);
        tsr_tensor * p2 = mul_mat(ctx, w2, h);
        tsr_tensor * want_old = mul_mat(ctx, w2, h_old);
        ASSERT_EQ(compute(want_old, 1), TSR_STATUS_SUCCESS);

        std::vector<char> scratch(std::max(node_work_size(p1), node_work_size(p2)) + 64);
        compute_params p;
        p.wdata = scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
        p.wsize = scratch.size() - 64;
        scratch_memo memo;
        p.memo = &memo;
        ASSERT_TRUE(compute_forward(p, p1));
        for (int64_t k = 0; k < K; ++k) set_f32(h, -3.0f * static_cast<float>(get(h, k)), k); // behind the graph's back
        p.prev = p1;
        ASSERT_TRUE(compute_forward(p, p2));
        EXPECT_EQ(same_bytes(p2, want_old), reuse) << "the columns p1 left were " << (reuse ? "not " : "") << "taken";
        // No previous node: quantized afresh from h's new values.
        tsr_tensor * want_new = mul_mat(ctx, w2, h);
        ASSERT_EQ(compute(want_new, 1), TSR_STATUS_SUCCESS);
        ASSERT_FALSE(same_bytes(want_new, want_old));
        p.prev = nullptr;
        ASSERT_TRUE(compute_forward(p, p2));
        EXPECT_TRUE(same_bytes(p2, want_new));
    }
}

// Only MUL_MAT may read a repacked tensor, and only as src[0] itself.
TEST(RepackSupport, OtherReadersOfRepackedDataAreRefused) {
    context ctx(data_ctx());
    std::mt19937 rng(3);
    tsr_tensor * a = ctx.new_tensor(TSR_TYPE_Q4_0, {64, 16});
    fill_weights(a, rng);
    const std::vector<uint8_t> orig(static_cast<uint8_t *>(a->data), static_cast<uint8_t *>(a->data) + nbytes(a));
    fake_repack_buffer fb;
    fb.place(a, orig.data());
    ASSERT_TRUE(is_repacked(a));
    tsr_tensor * idx = ctx.new_tensor(TSR_TYPE_I32, {2});
    set_i32(idx, 0, 0);
    set_i32(idx, 5, 1);
    tsr_tensor * rows = get_rows(ctx, a, idx);
    EXPECT_FALSE(supports_op(rows));
    EXPECT_EQ(compute(rows, 1), TSR_STATUS_FAILED); // refused, not computed on the wrong layout
    tsr_tensor * b = ctx.new_tensor(TSR_TYPE_F32, {64, 2});
    fill_uniform(b, rng);
    EXPECT_TRUE(supports_op(mul_mat(ctx, a, b)));
    EXPECT_FALSE(supports_op(mul_mat(ctx, view_2d(ctx, a, 64, 8, a->nb[1], 0), b))); // a view of it
    // dst not packed along m: the repacked kernels do not write strided output.
    tsr_tensor * ok = mul_mat(ctx, a, b);
    ok->nb[0] = 8;
    EXPECT_FALSE(supports_op(ok));
}

} // namespace
} // namespace tessera::cpu::test

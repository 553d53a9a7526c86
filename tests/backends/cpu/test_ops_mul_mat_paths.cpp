// MUL_MAT shapes aimed at the vector paths of the CPU kernels
// (src/backends/cpu/ops/mul_mat_impl.hpp): decode-time attention over a
// KV cache (N = 1..3, K view with strided rows, V^T view with strided
// elements), GEMM blocking edges (K over several 256-chunks, M over
// several 128-row blocks and not a multiple of the panel height, N not a
// multiple of the tile width, strided activations), quantized GEMM and
// mat-vec edges, and the on-the-fly activation quantizer against the
// core's reference quantizer, byte for byte. Built against every kernel
// variant (test_backends_cpu, _haswell, _zen4), so each path is checked
// where this machine can run it; the baseline build checks the portable
// kernel on the same shapes.
//
// Tolerances (|got - want| per element, want in double from the exact
// inputs): float weights: the kernels sum in FMA chains of at most 256
// terms (or 16 lanes of K/16 terms), the chain sums added in order:
// tol = 1.2e-7 * (min(K, 256) + ceil(K / 256) + 6) * sum_k |a_k b_k|
// (gamma_n with u = 2^-24, doubled). Quantized weights: the activation
// quantization error bound of test_ops_mul_mat.cpp plus 1e-5 relative.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/compute.hpp"
#include "backends/cpu/graph_compute.hpp"
#include "backends/cpu/ops/mul_mat_impl.hpp"
#include "backends/cpu/ops/q8_act.hpp"
#include "backends/cpu/mul_mat_check.hpp"
#include "backends/cpu/ref_util.hpp"
#include "tessera/core/graph.hpp"
#include "tessera/core/ops.hpp"
#include "tessera/core/types.hpp"

namespace tessera::cpu::test {
namespace {

// Computes out with 1 thread, checks it, and checks that 2 and 5 threads
// give the same bytes.
void compute_check_and_compare(tsr_tensor * a, tsr_tensor * b, tsr_tensor * out) {
    ASSERT_EQ(compute(out, 1), TSR_STATUS_SUCCESS);
    check_mul_mat(a, b, out);
    const std::vector<char> one(static_cast<char *>(out->data), static_cast<char *>(out->data) + nbytes(out));
    for (int nth : {2, 5}) {
        std::memset(out->data, 0, nbytes(out));
        ASSERT_EQ(compute(out, nth), TSR_STATUS_SUCCESS);
        EXPECT_EQ(std::memcmp(one.data(), out->data, one.size()), 0) << nth << " threads differ from 1";
    }
}

// One decode step (N = n_tokens <= 3) or a short batch of attention over a
// cache of n_kv positions laid out as the Llama graph does
// (llm/llama_graph.cpp): cache [head_dim * n_head_kv, n_kv] packed; K view
// [head_dim, n_kv, n_head_kv] (rows strided by the cache row); V^T view
// [n_kv, head_dim, n_head_kv] (elements strided by the cache row,
// consecutive head dims adjacent).
void attention_case(int32_t kv_type, int64_t head_dim, int64_t n_kv, int64_t n_tokens) {
    const int64_t n_head_kv = 2, n_head = 6;
    context ctx(data_ctx());
    std::mt19937 rng(static_cast<unsigned>(head_dim * 1000 + n_kv * 10 + n_tokens));
    tsr_tensor * kc = ctx.new_tensor(static_cast<type>(kv_type), {head_dim * n_head_kv, n_kv});
    tsr_tensor * vc = ctx.new_tensor(static_cast<type>(kv_type), {head_dim * n_head_kv, n_kv});
    fill_weights(kc, rng);
    fill_weights(vc, rng);
    const uint64_t row = kc->nb[1], esz = kc->nb[0];
    tsr_tensor * K = view_3d(ctx, kc, head_dim, n_kv, n_head_kv, row, head_dim * esz, 0);
    const int64_t v_ne[3] = {n_kv, head_dim, n_head_kv};
    const uint64_t v_nb[3] = {row, esz, uint64_t(head_dim) * esz};
    tsr_tensor * Vt = view(ctx, vc, v_ne, v_nb, 0);
    tsr_tensor * q_base = ctx.new_tensor(TSR_TYPE_F32, {head_dim, n_head, n_tokens});
    fill_uniform(q_base, rng);
    tsr_tensor * Q = permute(ctx, q_base, 0, 2, 1, 3); // [head_dim, n_tokens, n_head]
    tsr_tensor * kq = mul_mat(ctx, K, Q);              // [n_kv, n_tokens, n_head]
    SCOPED_TRACE("KV " + std::string(type_name(kv_type)) + " head_dim " + std::to_string(head_dim) + " n_kv " +
                 std::to_string(n_kv) + " tokens " + std::to_string(n_tokens));
    compute_check_and_compare(K, Q, kq);
    tsr_tensor * p = ctx.new_tensor(TSR_TYPE_F32, {n_kv, n_tokens, n_head});
    fill_uniform(p, rng, 0.0f, 1.0f);
    tsr_tensor * kqv = mul_mat(ctx, Vt, p); // [head_dim, n_tokens, n_head]
    compute_check_and_compare(Vt, p, kqv);
}

TEST(MulMatAttention, DecodeOverKvCacheViews) {
    for (int32_t ty : {TSR_TYPE_F32, TSR_TYPE_F16}) {
        for (int64_t n_tokens : {1, 2, 3}) {
            attention_case(ty, 64, 300, n_tokens); // n_kv > 256: several FMA chains
            attention_case(ty, 33, 7, n_tokens);   // head_dim not a multiple of 8
        }
    }
}

TEST(MulMatAttention, PromptOverKvCacheViews) {
    for (int32_t ty : {TSR_TYPE_F32, TSR_TYPE_F16}) {
        attention_case(ty, 64, 70, 9);
        attention_case(ty, 40, 33, 4);
    }
}

struct gemm_case {
    int32_t type;
    int64_t K, M, N;
};

class MulMatGemmEdges : public ::testing::TestWithParam<gemm_case> {};

// Packed weights and activations; then the same weights transposed in
// memory (m-contiguous view) and activations with strided elements.
TEST_P(MulMatGemmEdges, PackedTransposedAndStrided) {
    const gemm_case c = GetParam();
    context ctx(data_ctx());
    std::mt19937 rng(static_cast<unsigned>(c.K * 7 + c.M * 3 + c.N + c.type));
    tsr_tensor * a = ctx.new_tensor(static_cast<type>(c.type), {c.K, c.M});
    fill_weights(a, rng);
    tsr_tensor * b = ctx.new_tensor(TSR_TYPE_F32, {c.K, c.N});
    fill_uniform(b, rng);
    compute_check_and_compare(a, b, mul_mat(ctx, a, b));
    if (is_quant(c.type)) {
        tsr_tensor * bt_base = ctx.new_tensor(TSR_TYPE_F32, {c.N, c.K});
        fill_uniform(bt_base, rng);
        tsr_tensor * bt = transpose(ctx, bt_base); // [K, N], nb[0] != 4
        compute_check_and_compare(a, bt, mul_mat(ctx, a, bt));
        return;
    }
    tsr_tensor * at_base = ctx.new_tensor(static_cast<type>(c.type), {c.M, c.K});
    fill_weights(at_base, rng);
    tsr_tensor * at = transpose(ctx, at_base); // [K, M], nb[1] = element size
    tsr_tensor * bt_base = ctx.new_tensor(TSR_TYPE_F32, {c.N, c.K});
    fill_uniform(bt_base, rng);
    tsr_tensor * bt = transpose(ctx, bt_base);
    compute_check_and_compare(at, b, mul_mat(ctx, at, b));
    compute_check_and_compare(at, bt, mul_mat(ctx, at, bt));
}

std::string gemm_name(const ::testing::TestParamInfo<gemm_case> & info) {
    const gemm_case & c = info.param;
    return std::string(type_name(c.type)) + "_K" + std::to_string(c.K) + "_M" + std::to_string(c.M) + "_N" +
           std::to_string(c.N);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MulMatGemmEdges,
    ::testing::Values(gemm_case{TSR_TYPE_F32, 600, 150, 13}, gemm_case{TSR_TYPE_F16, 520, 135, 100},
                      gemm_case{TSR_TYPE_BF16, 257, 33, 4}, gemm_case{TSR_TYPE_BF16, 301, 70, 9},
                      gemm_case{TSR_TYPE_BF16, 300, 64, 12}, gemm_case{TSR_TYPE_F32, 8, 40, 26},
                      // float GEMM items cut into column parts (gemm_f.cpp
                      // for_each_block): on 2 threads 10 items of 5 tiles,
                      // on 5 threads 15 items of 3 (a part of one tile or none)
                      gemm_case{TSR_TYPE_F16, 300, 200, 72}, gemm_case{TSR_TYPE_F32, 64, 97, 40},
                      gemm_case{TSR_TYPE_Q4_0, 544, 45, 11}, gemm_case{TSR_TYPE_Q8_0, 544, 37, 9},
                      gemm_case{TSR_TYPE_Q4_0, 64, 17, 4}, gemm_case{TSR_TYPE_Q8_0, 1024, 23, 1},
                      gemm_case{TSR_TYPE_Q4_0, 1024, 9, 3}, gemm_case{TSR_TYPE_Q8_0, 32, 130, 5},
                      // mat-vec with 1, 2 and 3 blocks past a multiple of 4
                      gemm_case{TSR_TYPE_Q4_0, 160, 21, 1}, gemm_case{TSR_TYPE_Q8_0, 192, 13, 2},
                      gemm_case{TSR_TYPE_Q4_0, 224, 11, 1}, gemm_case{TSR_TYPE_Q8_0, 96, 8, 3}),
    gemm_name);

// F32 weights in plain rows (on AVX-512 builds with
// cpu_tuning::gemm_f32_rows, gemm_f32_rows.cpp: weights broadcast from
// copied rows, the dst tile transposed) against the same weights stored
// transposed (m-contiguous: gemm_f.cpp's k-major panels by vector copies):
// each is checked against the double product, and both must give the same
// bits, since each element is the same FMA chains per K chunk whatever
// the path. Shapes: M under one 8-row panel and past a multiple of 8, more
// than one 256-row item; N at the GEMM minimum, a last micro-tile of 1, 2
// or 3 16-column tiles with padding, more than one 512-column item; K
// under one 256-chunk, over several with a short last one; activations in
// place and strided; batched weights broadcast over the activations'
// batches.
TEST(MulMatGemmF32Rows, SameBitsAsTheTransposedWeights) {
    struct shape {
        int64_t K, M, N, batches; // batches: a has 1, b and dst `batches`
    };
    for (const shape c : {shape{8, 5, 4, 1}, shape{300, 37, 13, 1}, shape{600, 64, 40, 1}, shape{257, 520, 100, 1},
                          shape{96, 24, 530, 1}, shape{300, 21, 35, 3}}) {
        SCOPED_TRACE("K " + std::to_string(c.K) + " M " + std::to_string(c.M) + " N " + std::to_string(c.N) + " batches " +
                     std::to_string(c.batches));
        context ctx(data_ctx());
        std::mt19937 rng(static_cast<unsigned>(c.K * 31 + c.M * 7 + c.N));
        tsr_tensor * a = ctx.new_tensor(TSR_TYPE_F32, {c.K, c.M});
        fill_weights(a, rng);
        tsr_tensor * at_base = ctx.new_tensor(TSR_TYPE_F32, {c.M, c.K}); // a's values, element (m, k) at [k][m]
        const auto * av = static_cast<const float *>(a->data);
        auto * tv = static_cast<float *>(at_base->data);
        for (int64_t m = 0; m < c.M; ++m) {
            for (int64_t k = 0; k < c.K; ++k) tv[k * c.M + m] = av[m * c.K + k];
        }
        tsr_tensor * at = transpose(ctx, at_base); // [K, M], nb[1] = 4
        tsr_tensor * b = ctx.new_tensor(TSR_TYPE_F32, {c.K, c.N, c.batches});
        fill_uniform(b, rng);
        tsr_tensor * bt_base = ctx.new_tensor(TSR_TYPE_F32, {c.N, c.K});
        fill_uniform(bt_base, rng);
        tsr_tensor * bt = transpose(ctx, bt_base); // [K, N], elements strided
        for (tsr_tensor * x : {b, bt}) {
            if (x == bt && c.batches > 1) continue;
            tsr_tensor * rows = mul_mat(ctx, a, x);
            tsr_tensor * cols = mul_mat(ctx, at, x);
            compute_check_and_compare(a, x, rows);
            compute_check_and_compare(at, x, cols);
            ASSERT_EQ(nbytes(rows), nbytes(cols));
            EXPECT_EQ(std::memcmp(rows->data, cols->data, nbytes(rows)), 0)
                << "weights in rows and transposed differ (" << (x == b ? "packed" : "strided") << " activations)";
        }
    }
}

// Float GEMMs one after another with no data hazard between them (as the
// Q, K and V products of a prompt), reading different activations (two of
// them strided), so only the barrier before a node with shared scratch
// (its packed activations, gemm_f_prepare) keeps a thread from repacking
// what another still reads. Each product is checked, and 2, 3 and 5
// threads must give the bytes of 1 (under TSan, a missing barrier is
// reported as a race on the shared scratch).
TEST(MulMatGemmShared, ProductsWithoutHazardsKeepTheirPackedColumns) {
    context ctx(data_ctx());
    std::mt19937 rng(77);
    const int64_t K = 300;
    tsr_tensor * b1 = ctx.new_tensor(TSR_TYPE_F32, {K, 37});
    tsr_tensor * b2_base = ctx.new_tensor(TSR_TYPE_F32, {21, K});
    tsr_tensor * b3 = ctx.new_tensor(TSR_TYPE_F32, {K, 9, 2});
    tsr_tensor * a1 = ctx.new_tensor(TSR_TYPE_F16, {K, 200});
    tsr_tensor * a2 = ctx.new_tensor(TSR_TYPE_F32, {K, 64});
    tsr_tensor * a3 = ctx.new_tensor(TSR_TYPE_BF16, {K, 100, 2});
    for (tsr_tensor * t : {b1, b2_base, b3}) fill_uniform(t, rng);
    for (tsr_tensor * t : {a1, a2, a3}) fill_weights(t, rng);
    tsr_tensor * b2 = transpose(ctx, b2_base); // [K, 21], elements strided
    tsr_tensor * outs[] = {mul_mat(ctx, a1, b1), mul_mat(ctx, a2, b2), mul_mat(ctx, a3, b3), mul_mat(ctx, a1, b2)};
    const tsr_tensor * as[] = {a1, a2, a3, a1};
    const tsr_tensor * bs[] = {b1, b2, b3, b2};
    graph g;
    for (tsr_tensor * o : outs) g.build_forward(o);
    node_scratch need;
    ASSERT_TRUE(checked_scratch(outs[0], need));
    // The vector kernels pack 37 columns in tiles of 6 (AVX2) or 8
    // (AVX-512), K floats each; the portable kernel has no shared scratch.
    if (need.shared > 0) EXPECT_GE(need.shared, 37u * K * sizeof(float));
    std::vector<std::vector<char>> one;
    for (int nth : {1, 2, 3, 5}) {
        for (tsr_tensor * o : outs) std::memset(o->data, 0, nbytes(o));
        ASSERT_EQ(graph_compute(g.view(), nth), TSR_STATUS_SUCCESS);
        for (size_t i = 0; i < std::size(outs); ++i) {
            const auto * d = static_cast<const char *>(outs[i]->data);
            if (nth == 1) {
                check_mul_mat(as[i], bs[i], outs[i]);
                one.emplace_back(d, d + nbytes(outs[i]));
            } else {
                EXPECT_EQ(std::memcmp(one[i].data(), d, one[i].size()), 0) << "product " << i << ": " << nth << " threads differ from 1";
            }
        }
    }
}

// compute_forward refuses a node with shared scratch called without it,
// and a prepare call for a node that has none.
TEST(MulMatGemmShared, ComputeForwardChecksTheSharedScratch) {
    context ctx(data_ctx());
    std::mt19937 rng(5);
    tsr_tensor * a = ctx.new_tensor(TSR_TYPE_F32, {64, 48});
    tsr_tensor * b = ctx.new_tensor(TSR_TYPE_F32, {64, 16});
    fill_weights(a, rng);
    fill_uniform(b, rng);
    tsr_tensor * mm = mul_mat(ctx, a, b);
    tsr_tensor * add = tessera::add(ctx, b, b);
    node_scratch need, none;
    ASSERT_TRUE(checked_scratch(mm, need));
    ASSERT_TRUE(checked_scratch(add, none));
    EXPECT_EQ(none.shared, 0u);
    struct alignas(64) line { char bytes[64]; }; // scratch is 64-byte aligned
    std::vector<line> wbuf(need.per_thread / sizeof(line) + 1), sbuf(need.shared / sizeof(line) + 1);
    compute_params p;
    p.wdata = wbuf.data();
    p.wsize = need.per_thread;
    p.prepare = true;
    EXPECT_FALSE(compute_forward(p, add)); // no shared scratch: no prepare call
    p.prepare = false;
    EXPECT_TRUE(compute_forward(p, add));
    if (need.shared == 0) return; // portable kernel: computed in one call
    EXPECT_FALSE(compute_forward(p, mm)); // shared scratch missing
    p.shared = sbuf.data();
    p.shared_size = need.shared - 1;
    EXPECT_FALSE(compute_forward(p, mm)); // one byte short
    p.shared_size = need.shared;
    p.prepare = true;
    ASSERT_TRUE(compute_forward(p, mm));
    p.prepare = false;
    ASSERT_TRUE(compute_forward(p, mm));
    check_mul_mat(a, b, mm);
}

// Weights whose Q8_0 quants hit the extremes (-128, 127, 0) and Q4_0
// nibbles 0 and 15 everywhere: the unsigned-offset and sign-transfer tricks
// of the integer kernels must still be exact.
// BF16 weights: a build either multiplies the exact F32 activations (F32
// FMA chains) or, on AVX512-BF16, activations rounded to BF16 to nearest
// even (vdpbf16ps, bf16_dot.hpp). Every element must match one of the two
// double products within the F32 tolerance, the same one for a whole
// product; the data make the two differ by far more than that (so a
// truncating conversion, or a mix of the two, fails). One column (the
// one-token kernel), several (the GEMM), K odd (a last pair with one
// element) and over a 256-chunk.
TEST(MulMatBf16, ActivationsExactOrRoundedToNearestEven) {
    const auto bf16_rne = [](float x) {
        uint32_t u;
        std::memcpy(&u, &x, sizeof u);
        u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
        float r;
        std::memcpy(&r, &u, sizeof r);
        return r;
    };
    for (const int64_t K : {int64_t{301}, int64_t{600}}) {
        for (const int64_t N : {int64_t{1}, int64_t{35}}) {
            SCOPED_TRACE("K " + std::to_string(K) + " N " + std::to_string(N));
            context ctx(data_ctx());
            std::mt19937 rng(static_cast<unsigned>(K + N));
            const int64_t M = 40;
            tsr_tensor * a = ctx.new_tensor(TSR_TYPE_BF16, {K, M});
            fill_weights(a, rng);
            tsr_tensor * b = ctx.new_tensor(TSR_TYPE_F32, {K, N});
            fill_uniform(b, rng, 0.5f, 1.0f); // one sign: rounding errors do not cancel
            tsr_tensor * out = mul_mat(ctx, a, b);
            ASSERT_EQ(compute(out, 2), TSR_STATUS_SUCCESS);
            int rounded = -1; // which product the first distinguishable element matched
            int distinguishable = 0;
            for (int64_t n = 0; n < N; ++n) {
                for (int64_t m = 0; m < M; ++m) {
                    double exact = 0, rne = 0, abs_sum = 0;
                    for (int64_t k = 0; k < K; ++k) {
                        const double w = get(a, k, m), x = get(b, k, n);
                        exact += w * x;
                        rne += w * bf16_rne(static_cast<float>(x));
                        abs_sum += std::fabs(w * x);
                    }
                    const double tol = 1.2e-7 * static_cast<double>(std::min<int64_t>(K, 256) + (K + 255) / 256 + 6) * abs_sum;
                    const double got = get(out, m, n);
                    const bool is_exact = std::fabs(got - exact) <= tol, is_rne = std::fabs(got - rne) <= tol;
                    ASSERT_TRUE(is_exact || is_rne) << "m " << m << " n " << n << ": got " << got << ", exact " << exact
                                                    << ", with BF16 activations " << rne << ", tolerance " << tol;
                    if (is_exact == is_rne) continue;
                    ++distinguishable;
                    if (rounded < 0) rounded = is_rne ? 1 : 0;
                    ASSERT_EQ(rounded, is_rne ? 1 : 0) << "m " << m << " n " << n << ": a mix of the two";
                }
            }
            EXPECT_GE(distinguishable, M * N / 2); // about 80% here (the weights have both signs)
        }
    }
}

TEST(MulMatQuantExtremes, ExtremeQuantsStayExact) {
    for (int32_t ty : {TSR_TYPE_Q8_0, TSR_TYPE_Q4_0}) {
        for (int64_t N : {1, 6}) {
            context ctx(data_ctx());
            std::mt19937 rng(static_cast<unsigned>(ty + N));
            tsr_tensor * a = ctx.new_tensor(static_cast<type>(ty), {256, 19});
            fill_weights(a, rng);
            auto * p = static_cast<unsigned char *>(a->data);
            const size_t bs = ty == TSR_TYPE_Q8_0 ? 34 : 18;
            const unsigned char pattern[3] = {0x80, 0x7f, 0x00}; // Q8_0: -128, 127, 0; Q4_0: nibbles 0/8, 15/7, 0/0
            for (size_t blk = 0; blk + bs <= nbytes(a); blk += bs) {
                for (size_t j = 2; j < bs; ++j) p[blk + j] = (blk / bs) % 2 == 0 ? pattern[j % 3] : (ty == TSR_TYPE_Q4_0 ? 0xff : 0x80);
            }
            tsr_tensor * b = ctx.new_tensor(TSR_TYPE_F32, {256, N});
            fill_uniform(b, rng);
            compute_check_and_compare(a, b, mul_mat(ctx, a, b));
        }
    }
}

// x (n_blocks blocks of 32) quantized by the core's reference Q8_0
// quantizer (ref) and by quantize_q8_act into a 64-byte aligned plain
// column (col, in mem).
struct q8_pair {
    std::vector<block_q8_0> ref;
    std::vector<unsigned char> mem;
    q8_col col{};
};
q8_pair quantize_both(const std::vector<float> & x, int64_t n_blocks) {
    q8_pair r;
    r.ref.resize(static_cast<size_t>(n_blocks));
    quantize_row_q8_0_ref(x.data(), r.ref.data(), n_blocks * 32);
    r.mem.resize(q8_col_bytes(n_blocks) + 64);
    void * base = r.mem.data() + (64 - reinterpret_cast<uintptr_t>(r.mem.data()) % 64) % 64;
    r.col = q8_col_at(base, n_blocks);
    quantize_q8_act(x.data(), n_blocks, r.col, 0);
    return r;
}

// The activation quantizer of the integer kernels reproduces the core's
// reference Q8_0 quantizer bit for bit: same F16 scale, same rounding
// (half away from zero), same block sums; except a block holding a NaN,
// which gets a NaN scale, zero quants and sum (the reference skips the NaN
// and quantizes the rest), so that a NaN activation cannot vanish.
TEST(Q8Activations, MatchReferenceQuantizerExactly) {
    std::mt19937 rng(17);
    std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
    const int64_t n_blocks = 40;
    std::vector<float> x(static_cast<size_t>(n_blocks * 32));
    for (float & v : x) v = dist(rng);
    // Block 1: quarter steps, block 2: tiny values (F16 subnormal scale),
    // block 3: zeros, block 4: a NaN and an infinity among ordinary values,
    // block 5: scale beyond F16 (infinite d), block 6: exact ties, block 7:
    // one ulp either side of ties, block 8 below.
    for (int j = 0; j < 32; ++j) {
        x[32 + j] = 0.25f * static_cast<float>(j - 16);
        x[64 + j] = 1e-30f * static_cast<float>(j - 16);
        x[96 + j] = 0.0f;
        x[160 + j] = 1e6f * static_cast<float>(j - 16);
    }
    x[128 + 3] = std::numeric_limits<float>::quiet_NaN();
    x[128 + 7] = std::numeric_limits<float>::infinity();
    // Values whose x / d lands exactly on k + 0.5: d = 2 (amax 254), x = 2k + 1.
    for (int j = 0; j < 32; ++j) x[192 + j] = static_cast<float>(2 * (j - 16) + 1);
    x[192] = 254.0f;
    // d = 1 (amax 127): x / d = x, just below and just above k + 0.5.
    for (int j = 0; j < 32; ++j) {
        const float half = static_cast<float>(j - 16) + 0.5f;
        x[224 + j] = j % 2 == 0 ? std::nextafter(half, 0.0f) : std::nextafter(half, 200.0f * (half > 0 ? 1.0f : -1.0f));
    }
    x[224] = 127.0f;
    // Block 8: subnormal values, d subnormal and 1 / d infinite (the
    // reference then quantizes every nonzero value to +-127).
    for (int j = 0; j < 32; ++j) x[256 + j] = 1e-40f * static_cast<float>(j - 16);

    const q8_pair q = quantize_both(x, n_blocks);
    const std::vector<block_q8_0> & ref = q.ref;
    const q8_col & col = q.col;
    // The same into an interleaved layout (blocks 100 bytes apart, scale and
    // sum after the quants), sums scaled by 2^7.
    std::vector<unsigned char> tiled(static_cast<size_t>(n_blocks) * 100);
    q8_col tcol{};
    tcol.qs = reinterpret_cast<int8_t *>(tiled.data());
    tcol.d = reinterpret_cast<float *>(tiled.data() + 32);
    tcol.sum = reinterpret_cast<int32_t *>(tiled.data() + 36);
    tcol.qs_stride = tcol.aux_stride = 100;
    quantize_q8_act(x.data(), n_blocks, tcol, 7);
    for (int64_t b = 0; b < n_blocks; ++b) {
        const float d_ref = f16_to_f32(ref[b].d);
        float d_tiled;
        std::memcpy(&d_tiled, tiled.data() + b * 100 + 32, 4);
        int32_t sum_tiled;
        std::memcpy(&sum_tiled, tiled.data() + b * 100 + 36, 4);
        if (b == 4) { // the NaN block
            EXPECT_FALSE(std::isnan(d_ref)) << "the reference skips the NaN";
            EXPECT_TRUE(std::isnan(col.d[b]));
            EXPECT_TRUE(std::isnan(d_tiled));
            for (int j = 0; j < 32; ++j) {
                ASSERT_EQ(col.qs[b * 32 + j], 0) << "element " << j;
                ASSERT_EQ(tiled[b * 100 + j], 0) << "element " << j;
            }
            EXPECT_EQ(col.sum[b], 0);
            EXPECT_EQ(sum_tiled, 0);
            continue;
        }
        if (std::isnan(d_ref)) {
            EXPECT_TRUE(std::isnan(col.d[b])) << "block " << b;
            EXPECT_TRUE(std::isnan(d_tiled)) << "block " << b;
        } else {
            EXPECT_EQ(col.d[b], d_ref) << "block " << b;
            EXPECT_EQ(d_tiled, d_ref) << "block " << b;
        }
        int32_t sum = 0;
        for (int j = 0; j < 32; ++j) {
            ASSERT_EQ(col.qs[b * 32 + j], ref[b].qs[j]) << "block " << b << " element " << j << " x=" << x[b * 32 + j];
            ASSERT_EQ(static_cast<int8_t>(tiled[b * 100 + j]), ref[b].qs[j]) << "block " << b << " element " << j;
            sum += ref[b].qs[j];
        }
        EXPECT_EQ(col.sum[b], sum) << "block " << b;
        EXPECT_EQ(sum_tiled, sum * 128) << "block " << b;
    }
}

// The same over 20,000 blocks of random values at random magnitudes (from
// subnormal to 1e37, so scales that are subnormal, ordinary, and beyond
// F16), with zeros and values of equal magnitude mixed in: the vector
// paths' checks for when their shortcuts hold (AVX-512: finite values and
// a finite 1 / d) against the reference, bit for bit.
TEST(Q8Activations, MatchReferenceQuantizerAtEveryMagnitude) {
    std::mt19937 rng(23);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> exponent(-44.0f, 37.0f);
    constexpr int64_t n_blocks = 20000;
    std::vector<float> x(static_cast<size_t>(n_blocks * 32));
    for (int64_t b = 0; b < n_blocks; ++b) {
        const float scale = std::pow(10.0f, exponent(rng));
        for (int j = 0; j < 32; ++j) {
            float & v = x[static_cast<size_t>(b * 32 + j)];
            v = scale * normal(rng);
            if (b % 7 == 0 && j % 5 == 0) v = 0.0f;
            if (b % 11 == 0 && j % 3 == 0) v = (j % 2 == 0 ? 1.0f : -1.0f) * scale;
        }
    }
    const q8_pair q = quantize_both(x, n_blocks);
    const std::vector<block_q8_0> & ref = q.ref;
    const q8_col & col = q.col;
    for (int64_t b = 0; b < n_blocks; ++b) {
        const float d_ref = f16_to_f32(ref[b].d);
        ASSERT_EQ(std::memcmp(&col.d[b], &d_ref, sizeof d_ref), 0) << "block " << b << ": " << col.d[b] << " vs " << d_ref;
        int32_t sum = 0;
        for (int j = 0; j < 32; ++j) {
            ASSERT_EQ(col.qs[b * 32 + j], ref[b].qs[j]) << "block " << b << " element " << j << " x=" << x[b * 32 + j];
            sum += ref[b].qs[j];
        }
        ASSERT_EQ(col.sum[b], sum) << "block " << b;
    }
}

// The Q8_K activation quantizer of the K-quant kernels (quantize_q8_k_act)
// reproduces the core's quantize_row_q8_k_ref byte for byte (scale from the
// first value of largest magnitude, ties to even, block sums) in every
// variant, except for a super-block holding a NaN (NaN scale, zero quants
// and sums; the reference skips the NaN); the expected quants of the
// hand-made super-blocks are also checked directly.
TEST(Q8KActivations, MatchReferenceQuantizerExactly) {
    std::mt19937 rng(29);
    std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
    const int64_t n_super = 9 + 4 + 16;
    std::vector<float> x(static_cast<size_t>(n_super * 256));
    for (float & v : x) v = dist(rng);
    // Super-blocks 9 .. 12: the largest magnitude 2e-38 (-127 / x is not
    // finite), 3e38, 1e-30 and one value repeated; 13 .. 28: the largest
    // magnitude at element 17 e of super-block 13 + e (value e of the e-th
    // 16-value vector), magnitudes scaled by 10^(e - 8).
    for (int e = 0; e < 256; ++e) {
        x[9 * 256 + e] = 1e-38f * dist(rng) / 3.0f;
        x[10 * 256 + e] = 1e38f * dist(rng);
        x[11 * 256 + e] = 1e-30f * dist(rng);
        x[12 * 256 + e] = -0.75f;
    }
    x[9 * 256 + 77] = 2e-38f;
    x[10 * 256 + 255] = -3e38f;
    for (int e = 0; e < 16; ++e) {
        float * sb = x.data() + (13 + e) * 256;
        const float scale = std::pow(10.0f, static_cast<float>(e - 8));
        for (int i = 0; i < 256; ++i) sb[i] *= scale;
        sb[17 * e] = (e % 2 ? -4.0f : 4.0f) * scale;
    }
    float * s1 = x.data() + 256;   // exact ties: largest value 127, so q = -x rounded half to even
    float * s2 = x.data() + 512;   // zeros
    float * s3 = x.data() + 768;   // NaNs and a negative largest value, -127 at element 200
    float * s4 = x.data() + 1024;  // the largest magnitude twice, other sign first (element 37)
    float * s5 = x.data() + 1280;  // an infinity
    for (int e = 0; e < 256; ++e) {
        s1[e] = static_cast<float>(e % 64 - 32) + 0.5f;
        s2[e] = 0.0f;
        s3[e] = 0.25f * static_cast<float>(e % 17 - 8);
        s4[e] = dist(rng);
    }
    s1[100] = 127.0f;
    s3[3] = s3[250] = std::numeric_limits<float>::quiet_NaN();
    s3[200] = -127.0f;
    s4[37] = -5.0f;
    s4[90] = 5.0f;
    s5[11] = std::numeric_limits<float>::infinity();
    std::vector<block_q8_k> ref(static_cast<size_t>(n_super)), got(static_cast<size_t>(n_super));
    quantize_row_q8_k_ref(x.data(), ref.data(), n_super * 256);
    quantize_q8_k_act(x.data(), n_super, got.data());
    for (int64_t b = 0; b < n_super; ++b) {
        SCOPED_TRACE("super-block " + std::to_string(b));
        if (b == 3) { // the NaN super-block
            EXPECT_TRUE(std::isnan(got[b].d));
            for (int e = 0; e < 256; ++e) ASSERT_EQ(got[b].qs[e], 0) << "element " << e;
            for (int j = 0; j < 16; ++j) ASSERT_EQ(got[b].bsums[j], 0) << "sum " << j;
            continue;
        }
        if (std::isnan(ref[b].d)) {
            EXPECT_TRUE(std::isnan(got[b].d));
        } else {
            EXPECT_EQ(got[b].d, ref[b].d);
        }
        for (int e = 0; e < 256; ++e) ASSERT_EQ(got[b].qs[e], ref[b].qs[e]) << "element " << e << " x=" << x[b * 256 + e];
        for (int j = 0; j < 16; ++j) ASSERT_EQ(got[b].bsums[j], ref[b].bsums[j]) << "sum " << j;
    }
    // The hand-made cases.
    EXPECT_EQ(ref[1].d, -1.0f);
    for (int e = 0; e < 256; ++e) {
        if (e == 100) continue;
        const int k = e % 64 - 32; // x = k + 0.5, q = round-half-even(-(k + 0.5))
        const int want = (k % 2 == 0) ? -k : -(k + 1);
        ASSERT_EQ(ref[1].qs[e], want) << e;
    }
    EXPECT_EQ(ref[1].qs[100], -127);
    EXPECT_EQ(ref[2].d, 0.0f);
    EXPECT_EQ(ref[3].d, 1.0f);
    EXPECT_EQ(ref[3].qs[3], 0);
    EXPECT_EQ(ref[3].qs[200], -127);
    EXPECT_EQ(ref[4].d, 1.0f / (-127.0f / -5.0f)); // -5 comes first
    EXPECT_EQ(ref[4].qs[37], -127);
    EXPECT_EQ(ref[4].qs[90], 127);
}

// The work grid of the MUL_MAT kernels: every dst element in exactly one
// item, row blocks within one granule of each other, as many items per
// thread where at most nth extra row blocks allow it (1B's 2048-row F16
// products used to get 7 blocks of 288 rows and one of 32), and the
// threads' shares of rows within a granule or two of each other.
TEST(MulMatGrid, ItemsCoverEveryElementOnceInEvenBlocks) {
    struct shape {
        int64_t M, N, n_batch, granule, rows_max, col_granule, cols_max;
        int nth;
    };
    const shape shapes[] = {
        {2048, 512, 1, 48, 288, 8, 1 << 20, 2}, {4096, 512, 1, 48, 288, 8, 1 << 20, 2},
        {256, 512, 1, 48, 288, 8, 1 << 20, 2},  {2048, 1, 1, 8, 16, 8, 256, 2},
        {5632, 70, 3, 16, 16, 8, 256, 3},       {100, 7, 1, 8, 64, 4, 32, 4},
        {7, 3, 2, 8, 16, 4, 8, 8},              {0, 4, 1, 8, 16, 4, 8, 2},
    };
    for (const shape & sh : shapes) {
        SCOPED_TRACE("M=" + std::to_string(sh.M) + " N=" + std::to_string(sh.N) + " nth=" + std::to_string(sh.nth));
        mm_dims d{};
        d.M = sh.M;
        d.N = sh.N;
        d.n_batch = sh.n_batch;
        const mm_grid g = make_mm_grid(d, sh.nth, sh.granule, sh.rows_max, sh.col_granule, sh.cols_max);
        ASSERT_EQ(g.n_items, sh.n_batch * g.n_rblocks * g.n_cblocks);
        std::vector<int> hits(static_cast<size_t>(sh.n_batch * sh.M * sh.N), 0);
        int64_t shortest = INT64_MAX, longest = 0;
        for (int64_t it = 0; it < g.n_items; ++it) {
            const mm_item item = item_of(g, d, it);
            ASSERT_EQ(item.m0 % sh.granule, 0);
            ASSERT_LE(item.m1 - item.m0, g.rows_per_item);
            if (item.m1 < sh.M) { // all but the last block: whole granules
                shortest = std::min(shortest, item.m1 - item.m0);
                longest = std::max(longest, item.m1 - item.m0);
            }
            for (int64_t n = item.n0; n < item.n1; ++n) {
                for (int64_t m = item.m0; m < item.m1; ++m) ++hits[static_cast<size_t>((item.batch * sh.N + n) * sh.M + m)];
            }
        }
        for (int h : hits) ASSERT_EQ(h, 1);
        if (longest > 0) EXPECT_LE(longest - shortest, sh.granule);
        // Each thread's contiguous share of the items (work_queue's split)
        // holds as many rows as another's, give or take one granule (and
        // the short last granule), when the thread count divides the items.
        if (g.n_items > 0 && g.n_items % sh.nth == 0) {
            int64_t least = INT64_MAX, most = 0;
            for (int t = 0; t < sh.nth; ++t) {
                const item_range share = split_items(g.n_items, t, sh.nth);
                int64_t rows = 0;
                for (int64_t it = share.begin; it < share.end; ++it) {
                    const mm_item item = item_of(g, d, it);
                    rows += (item.m1 - item.m0) * (item.n1 - item.n0);
                }
                least = std::min(least, rows);
                most = std::max(most, rows);
            }
            EXPECT_LE(most - least, 2 * sh.granule * g.cols_per_item) << "threads' shares differ";
        }
    }
    // 2048 rows in granules of 48 on 2 threads: 8 blocks, 4 per thread, of
    // 5 or 6 granules (before: 7 of 288 rows and one of 32).
    mm_dims d{};
    d.M = 2048;
    d.N = 512;
    d.n_batch = 1;
    const mm_grid g = make_mm_grid(d, 2, 48, 288, 8, 1 << 20);
    EXPECT_EQ(g.n_items % 2, 0);
    for (int64_t it = 0; it < g.n_items; ++it) {
        const mm_item item = item_of(g, d, it);
        EXPECT_GE(item.m1 - item.m0, 5 * 48 - 16) << it; // the last block ends at row 2048, 16 short of a granule
    }
}

} // namespace
} // namespace tessera::cpu::test

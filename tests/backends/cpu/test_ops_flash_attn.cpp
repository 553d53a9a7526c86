// FLASH_ATTN_EXT against a double-precision attention written here
// (softmax(scale * q.k + mask) V per query row and head, computed naively),
// on the layouts the Llama graph uses: q a permuted view of [D, H, T], K/V
// views of a [H_kv * D, n_ctx] cache of F32 or F16. Causal masks with -inf
// (rows with no visible key give zeros), grouped-query attention, several
// thread counts giving identical bytes, agreement with the unfused
// MUL_MAT/SOFT_MAX/MUL_MAT path, and the builder's shape errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/ref_util.hpp"
#include "tessera/core/error.hpp"
#include "support/error_of.hpp"

namespace tessera::cpu::test {
namespace {

constexpr float k_ninf = -std::numeric_limits<float>::infinity();

struct fa_case {
    int64_t T, n_kv, D, H, H_kv;
    tsr_type kv_type;
    int64_t mask_pad; // extra mask rows beyond T (a padded mask)
};

std::string case_name(const ::testing::TestParamInfo<fa_case> & info) {
    const fa_case & c = info.param;
    return "T" + std::to_string(c.T) + "_kv" + std::to_string(c.n_kv) + "_D" + std::to_string(c.D) + "_H" +
           std::to_string(c.H) + "x" + std::to_string(c.H_kv) + (c.kv_type == TSR_TYPE_F16 ? "_F16" : "_F32") +
           (c.mask_pad > 0 ? "_padded" : "");
}

// The graph's tensors for one case: q [D, T, H] (view), K/V [D, n_kv, H_kv]
// (views of caches with 5 more rows than n_kv), causal mask [n_kv, T + pad]
// where query i sits at position n_kv - T + i (queries before the first key
// see nothing).
struct attention_inputs {
    context ctx{data_ctx()};
    tsr_tensor * q = nullptr;
    tsr_tensor * k = nullptr;
    tsr_tensor * v = nullptr;
    tsr_tensor * mask = nullptr;
    float scale = 0;

    explicit attention_inputs(const fa_case & c, unsigned seed) {
        std::mt19937 rng(seed);
        scale = 1.0f / std::sqrt(static_cast<float>(c.D));
        tsr_tensor * q_packed = ctx.new_tensor(TSR_TYPE_F32, {c.D, c.H, c.T});
        fill_uniform(q_packed, rng, -1.0f, 1.0f);
        q = permute(ctx, q_packed, 0, 2, 1, 3);
        const int64_t n_ctx = c.n_kv + 5;
        tsr_tensor * k_cache = ctx.new_tensor(c.kv_type, {c.D * c.H_kv, n_ctx});
        tsr_tensor * v_cache = ctx.new_tensor(c.kv_type, {c.D * c.H_kv, n_ctx});
        fill_weights(k_cache, rng);
        fill_weights(v_cache, rng);
        const uint64_t esz = k_cache->nb[0];
        k = view_3d(ctx, k_cache, c.D, c.n_kv, c.H_kv, k_cache->nb[1], static_cast<uint64_t>(c.D) * esz, 0);
        v = view_3d(ctx, v_cache, c.D, c.n_kv, c.H_kv, v_cache->nb[1], static_cast<uint64_t>(c.D) * esz, 0);
        mask = ctx.new_tensor(TSR_TYPE_F32, {c.n_kv, c.T + c.mask_pad});
        for_each_index(mask, [&](int64_t j, int64_t i, int64_t, int64_t) {
            set_f32(mask, j <= c.n_kv - c.T + i ? 0.0f : k_ninf, j, i);
        });
    }
};

// Reference output [D] of query row i, head h, in double; zeros when every key is masked.
std::vector<double> reference_row(const attention_inputs & in, int64_t i, int64_t h) {
    const int64_t D = in.q->ne[0], n_kv = in.k->ne[1], hk = h / (in.q->ne[2] / in.k->ne[2]);
    std::vector<double> s(static_cast<size_t>(n_kv));
    double mx = -INFINITY;
    for (int64_t j = 0; j < n_kv; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += get(in.q, d, i, h) * get(in.k, d, j, hk);
        s[j] = static_cast<double>(in.scale) * dot + get(in.mask, j, i);
        mx = std::max(mx, s[j]);
    }
    std::vector<double> out(static_cast<size_t>(D), 0.0);
    if (mx == -INFINITY) return out;
    double sum = 0;
    for (int64_t j = 0; j < n_kv; ++j) {
        const double w = std::exp(s[j] - mx);
        sum += w;
        for (int64_t d = 0; d < D; ++d) out[d] += w * get(in.v, d, j, hk);
    }
    for (double & o : out) o /= sum;
    return out;
}

std::vector<char> bytes_of(const tsr_tensor * t) {
    const auto * p = static_cast<const char *>(t->data);
    return {p, p + nbytes(t)};
}

class FlashAttn : public ::testing::TestWithParam<fa_case> {};

// Each output is a convex combination of V values (|v| < 4): F32 rounding
// of the scores (|s| <= ~10, D products) and of exp and the sums stays far
// below 1e-5 relative; tolerance 2e-5 * (1 + |want|) on top of the F16
// values themselves (which the reference reads exactly).
TEST_P(FlashAttn, MatchesDoubleReferenceForAnyThreadCount) {
    const fa_case c = GetParam();
    attention_inputs in(c, static_cast<unsigned>(c.T * 1000 + c.n_kv * 10 + c.D));
    tsr_tensor * out = flash_attn_ext(in.ctx, in.q, in.k, in.v, in.mask, in.scale);
    ASSERT_EQ(out->ne[0], c.D);
    ASSERT_EQ(out->ne[1], c.H);
    ASSERT_EQ(out->ne[2], c.T);
    ASSERT_EQ(compute(out, 1), TSR_STATUS_SUCCESS);
    const std::vector<char> one_thread = bytes_of(out);
    double worst = 0;
    for (int64_t i = 0; i < c.T; ++i) {
        for (int64_t h = 0; h < c.H; ++h) {
            const std::vector<double> want = reference_row(in, i, h);
            const bool none_visible = c.n_kv - c.T + i < 0;
            for (int64_t d = 0; d < c.D; ++d) {
                const double got = get(out, d, h, i);
                if (none_visible) {
                    ASSERT_EQ(got, 0.0) << "fully masked row " << i << " head " << h << " d " << d;
                    continue;
                }
                ASSERT_TRUE(std::isfinite(got)) << "row " << i << " head " << h << " d " << d;
                ASSERT_NEAR(got, want[d], 2e-5 * (1.0 + std::fabs(want[d])))
                    << "row " << i << " head " << h << " d " << d;
                worst = std::max(worst, std::fabs(got - want[d]));
            }
        }
    }
    RecordProperty("max_abs_error", std::to_string(worst));
    for (int nth : {2, 3, 7}) {
        std::memset(out->data, 0xff, nbytes(out));
        ASSERT_EQ(compute(out, nth), TSR_STATUS_SUCCESS);
        EXPECT_EQ(bytes_of(out), one_thread) << nth << " threads differ from 1 thread";
    }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, FlashAttn,
    ::testing::Values(fa_case{1, 1, 64, 9, 3, TSR_TYPE_F32, 0}, fa_case{1, 7, 48, 4, 4, TSR_TYPE_F16, 0},
                      fa_case{1, 300, 64, 9, 3, TSR_TYPE_F16, 0}, fa_case{1, 300, 48, 4, 4, TSR_TYPE_F32, 0},
                      fa_case{37, 1, 48, 9, 3, TSR_TYPE_F16, 0}, fa_case{37, 7, 64, 4, 4, TSR_TYPE_F32, 3},
                      fa_case{37, 300, 64, 9, 3, TSR_TYPE_F32, 0}, fa_case{37, 300, 64, 9, 3, TSR_TYPE_F16, 5},
                      fa_case{37, 300, 48, 4, 4, TSR_TYPE_F16, 0}, fa_case{37, 7, 48, 9, 3, TSR_TYPE_F32, 0},
                      // head_dim 40: an odd number of 16-dimension tiles in the keys' transposition;
                      // 8 heads a KV head: groups of six rows with different causal ends
                      fa_case{37, 300, 40, 16, 2, TSR_TYPE_F16, 0}, fa_case{37, 130, 40, 8, 1, TSR_TYPE_F32, 2},
                      // head_dim not a multiple of 8 (the portable path on every ISA), no mask below
                      fa_case{5, 19, 12, 2, 1, TSR_TYPE_F32, 0},
                      // one row (decoding): the threads' runs of pairs cut KV heads and, with
                      // 16 heads a KV head, a run after k_tile (12) pairs
                      fa_case{1, 300, 64, 16, 1, TSR_TYPE_F16, 0}, fa_case{1, 130, 40, 10, 2, TSR_TYPE_F32, 0}),
    case_name);

// Without a mask every key is visible; head_dim 20 is not a multiple of 8.
TEST(FlashAttnExt, NoMask) {
    const fa_case c{3, 140, 20, 2, 1, TSR_TYPE_F16, 0};
    attention_inputs in(c, 11);
    tsr_tensor * out = flash_attn_ext(in.ctx, in.q, in.k, in.v, nullptr, in.scale);
    ASSERT_EQ(compute(out, 2), TSR_STATUS_SUCCESS);
    for_each_index(in.mask, [&](int64_t j, int64_t i, int64_t, int64_t) { set_f32(in.mask, 0.0f, j, i); });
    for (int64_t i = 0; i < c.T; ++i) {
        for (int64_t h = 0; h < c.H; ++h) {
            const std::vector<double> want = reference_row(in, i, h);
            for (int64_t d = 0; d < c.D; ++d) ASSERT_NEAR(get(out, d, h, i), want[d], 2e-5 * (1.0 + std::fabs(want[d])));
        }
    }
}

// The fused op against the graph it replaces (MUL_MAT, SOFT_MAX, MUL_MAT on
// a transposed V view, permuted back): same values up to float rounding.
TEST(FlashAttnExt, MatchesUnfusedGraph) {
    for (const fa_case & c : {fa_case{37, 300, 64, 9, 3, TSR_TYPE_F32, 0}, fa_case{37, 300, 64, 9, 3, TSR_TYPE_F16, 0},
                              fa_case{37, 200, 40, 16, 2, TSR_TYPE_F16, 0}}) {
        const tsr_type kv_type = c.kv_type;
        attention_inputs in(c, 5);
        tsr_tensor * fused = flash_attn_ext(in.ctx, in.q, in.k, in.v, in.mask, in.scale);
        const uint64_t esz = in.v->nb[0];
        const int64_t vt_ne[3] = {c.n_kv, c.D, c.H_kv};
        const uint64_t vt_nb[3] = {in.v->nb[1], esz, static_cast<uint64_t>(c.D) * esz};
        tsr_tensor * vt = view(in.ctx, in.v->view_src, vt_ne, vt_nb, 0);
        tsr_tensor * kq = soft_max(in.ctx, mul_mat(in.ctx, in.k, in.q), in.mask, in.scale);
        tsr_tensor * unfused = cont(in.ctx, permute(in.ctx, mul_mat(in.ctx, vt, kq), 0, 2, 1, 3));
        ASSERT_EQ(compute(fused, 2), TSR_STATUS_SUCCESS);
        ASSERT_EQ(compute(unfused, 2), TSR_STATUS_SUCCESS);
        for_each_index(fused, [&](int64_t d, int64_t h, int64_t i, int64_t) {
            const double a = get(fused, d, h, i), b = get(unfused, d, h, i);
            ASSERT_NEAR(a, b, 2e-5 * (1.0 + std::fabs(b))) << d << "," << h << "," << i;
        });
    }
}

// A query row computed in a prompt (in a tile of rows, whose scores and
// accumulations share K and V loads) gets the same bytes as the same row
// computed alone (T = 1, as in decoding): the kernels do each row's
// arithmetic in the same order whatever rows it is grouped with. Rows near
// the start and end of tiles, with causal ends in different key blocks.
// Prompts of few heads a KV head read transposed keys with the
// dimension-lane kernel's sums (scores_rows_dt): head sizes 8 to 128
// (16-lane and 8-lane forms, compile-time and run-time chain lengths), 1 to
// 5 heads a KV head, F32 and F16 caches, with more or fewer rows than a
// tile.
TEST(FlashAttnExt, ARowGetsTheSameBitsInATileAsAlone) {
    for (const fa_case & c : {fa_case{37, 300, 64, 9, 3, TSR_TYPE_F32, 0}, fa_case{37, 300, 64, 9, 3, TSR_TYPE_F16, 0},
                              fa_case{37, 200, 40, 16, 2, TSR_TYPE_F16, 0}, fa_case{37, 150, 128, 8, 2, TSR_TYPE_F16, 0},
                              fa_case{37, 150, 128, 4, 4, TSR_TYPE_F32, 0}, fa_case{37, 150, 96, 10, 2, TSR_TYPE_F16, 0},
                              fa_case{37, 150, 80, 5, 1, TSR_TYPE_F32, 0}, fa_case{37, 150, 8, 8, 4, TSR_TYPE_F16, 0},
                              fa_case{37, 150, 48, 3, 3, TSR_TYPE_F16, 0}, fa_case{37, 150, 256, 2, 1, TSR_TYPE_F16, 0},
                              fa_case{13, 150, 64, 1, 1, TSR_TYPE_F16, 0}}) {
        const tsr_type kv_type = c.kv_type;
        attention_inputs in(c, 21);
        tsr_tensor * all = flash_attn_ext(in.ctx, in.q, in.k, in.v, in.mask, in.scale);
        ASSERT_EQ(compute(all, 2), TSR_STATUS_SUCCESS);
        const tsr_tensor * q_packed = in.q->view_src; // [D, H, T]
        for (int64_t i : {0, 1, 7, 8, 12, 20, 35, 36}) {
            if (i >= c.T) continue;
            tsr_tensor * q1 = in.ctx.new_tensor(TSR_TYPE_F32, {c.D, c.H, 1});
            tsr_tensor * m1 = in.ctx.new_tensor(TSR_TYPE_F32, {c.n_kv, 1});
            for_each_index(q1, [&](int64_t d, int64_t h, int64_t, int64_t) { set_f32(q1, get(q_packed, d, h, i), d, h); });
            for_each_index(m1, [&](int64_t j, int64_t, int64_t, int64_t) { set_f32(m1, get(in.mask, j, i), j); });
            tsr_tensor * one = flash_attn_ext(in.ctx, permute(in.ctx, q1, 0, 2, 1, 3), in.k, in.v, m1, in.scale);
            ASSERT_EQ(compute(one, 1), TSR_STATUS_SUCCESS);
            const size_t row_bytes = static_cast<size_t>(c.D * c.H) * sizeof(float);
            EXPECT_EQ(std::memcmp(static_cast<const char *>(all->data) + static_cast<size_t>(i) * all->nb[2], one->data, row_bytes), 0)
                << "row " << i << (kv_type == TSR_TYPE_F16 ? " F16" : " F32") << " differs from the row alone";
        }
    }
}

// A NaN in a query row makes every score of that (row, head) NaN: its
// output must be NaN, not the zeros of a row whose keys are all masked
// (the running maximum used to skip NaN scores). Other pairs stay finite.
// Both score kernels (9 heads over 3, 16 over 2), prompt and one row.
TEST(FlashAttnExt, ANaNQueryGivesANaNRow) {
    for (const fa_case & c : {fa_case{37, 300, 64, 9, 3, TSR_TYPE_F16, 0}, fa_case{37, 300, 64, 16, 2, TSR_TYPE_F16, 0},
                              fa_case{1, 300, 64, 9, 3, TSR_TYPE_F32, 0}, fa_case{1, 300, 64, 16, 2, TSR_TYPE_F16, 0}}) {
        attention_inputs in(c, 5);
        tsr_tensor * q_packed = in.q->view_src; // [D, H, T]
        const int64_t bad_i = c.T - 1, bad_h = 2;
        set_f32(q_packed, std::numeric_limits<float>::quiet_NaN(), 7, bad_h, bad_i);
        tsr_tensor * out = flash_attn_ext(in.ctx, in.q, in.k, in.v, in.mask, in.scale);
        ASSERT_EQ(compute(out, 2), TSR_STATUS_SUCCESS);
        for (int64_t i = 0; i < c.T; ++i) {
            for (int64_t h = 0; h < c.H; ++h) {
                for (int64_t d = 0; d < c.D; ++d) {
                    const float o = get(out, d, h, i);
                    if (i == bad_i && h == bad_h) {
                        ASSERT_TRUE(std::isnan(o)) << "T " << c.T << " H " << c.H << ": element " << d << " is " << o;
                    } else {
                        ASSERT_TRUE(std::isfinite(o)) << "T " << c.T << " H " << c.H << ": row " << i << " head " << h;
                    }
                }
            }
        }
    }
}

// A node whose sources were changed after building (bad metadata reaching
// the backend) is refused: compute fails, never crashes.
TEST(FlashAttnExt, CorruptedNodeFails) {
    const fa_case c{2, 7, 16, 2, 1, TSR_TYPE_F32, 0};
    attention_inputs in(c, 1);
    tsr_tensor * out = flash_attn_ext(in.ctx, in.q, in.k, in.v, in.mask, in.scale);
    in.mask->ne[0] = 6; // no longer n_kv
    EXPECT_EQ(compute(out, 2), TSR_STATUS_FAILED);
    in.mask->ne[0] = c.n_kv;
    out->src[2] = nullptr; // v missing
    EXPECT_EQ(compute(out, 2), TSR_STATUS_FAILED);
}

using tessera::test::error_of; // support/error_of.hpp

#define EXPECT_FA_ERROR(stmt, ...)                                                          \
    do {                                                                                    \
        const std::string msg_ = error_of([&] { stmt; });                                   \
        for (const char * s_ : {"FLASH_ATTN_EXT", __VA_ARGS__}) {                          \
            EXPECT_NE(msg_.find(s_), std::string::npos) << "'" << s_ << "' not in: " << msg_; \
        }                                                                                   \
    } while (0)

TEST(FlashAttnExt, BadShapesNameTheOpShapesAndDimension) {
    context ctx;
    tensor * q = ctx.new_tensor(TSR_TYPE_F32, {64, 5, 9});
    tensor * k = ctx.new_tensor(TSR_TYPE_F16, {64, 30, 3});
    tensor * v = ctx.new_tensor(TSR_TYPE_F16, {64, 30, 3});
    tensor * mask = ctx.new_tensor(TSR_TYPE_F32, {30, 8});
    tensor * ok = flash_attn_ext(ctx, q, k, v, mask, 0.125f);
    EXPECT_EQ(ok->op, TSR_OP_FLASH_ATTN_EXT);
    EXPECT_EQ(ok->type, TSR_TYPE_F32);
    EXPECT_EQ(ok->ne[0], 64);
    EXPECT_EQ(ok->ne[1], 9);
    EXPECT_EQ(ok->ne[2], 5);
    EXPECT_EQ(ok->nb[1], 64u * 4u);
    EXPECT_EQ(ok->src[0], q);
    EXPECT_EQ(ok->src[3], mask);
    EXPECT_STREQ(op_name(TSR_OP_FLASH_ATTN_EXT), "FLASH_ATTN_EXT");

    tensor * k48 = ctx.new_tensor(TSR_TYPE_F16, {48, 30, 3});
    EXPECT_FA_ERROR(flash_attn_ext(ctx, q, k48, v, mask, 1.0f), "[64,5,9,1]", "[48,30,3,1]", "ne[0]", "64 vs 48");
    tensor * v31 = ctx.new_tensor(TSR_TYPE_F16, {64, 31, 3});
    EXPECT_FA_ERROR(flash_attn_ext(ctx, q, k, v31, mask, 1.0f), "[64,30,3,1]", "[64,31,3,1]", "ne[1]", "30 vs 31");
    tensor * k4 = ctx.new_tensor(TSR_TYPE_F16, {64, 30, 4});
    tensor * v4 = ctx.new_tensor(TSR_TYPE_F16, {64, 30, 4});
    EXPECT_FA_ERROR(flash_attn_ext(ctx, q, k4, v4, mask, 1.0f), "ne[2]", "9 heads are not a multiple of k's 4");
    tensor * q16 = ctx.new_tensor(TSR_TYPE_F16, {64, 5, 9});
    EXPECT_FA_ERROR(flash_attn_ext(ctx, q16, k, v, mask, 1.0f), "q [64,5,9,1] must be F32");
    tensor * kq8 = ctx.new_tensor(TSR_TYPE_Q8_0, {64, 30, 3});
    EXPECT_FA_ERROR(flash_attn_ext(ctx, q, kq8, v, mask, 1.0f), "k [64,30,3,1] must be F32 or F16", "Q8_0");
    tensor * kt = permute(ctx, ctx.new_tensor(TSR_TYPE_F16, {30, 64, 3}), 1, 0, 2, 3);
    EXPECT_FA_ERROR(flash_attn_ext(ctx, q, kt, v, mask, 1.0f), "packed along ne[0]");
    tensor * m29 = ctx.new_tensor(TSR_TYPE_F32, {29, 8});
    EXPECT_FA_ERROR(flash_attn_ext(ctx, q, k, v, m29, 1.0f), "mask [29,8,1,1]", "mask.ne[0] = 29 vs k.ne[1] = 30");
    tensor * m4 = ctx.new_tensor(TSR_TYPE_F32, {30, 4});
    EXPECT_FA_ERROR(flash_attn_ext(ctx, q, k, v, m4, 1.0f), "mask [30,4,1,1]", "fewer than q.ne[1] = 5");
    tensor * m16 = ctx.new_tensor(TSR_TYPE_F16, {30, 8});
    EXPECT_FA_ERROR(flash_attn_ext(ctx, q, k, v, m16, 1.0f), "mask", "must be F32");
    tensor * mh = ctx.new_tensor(TSR_TYPE_F32, {30, 8, 2});
    EXPECT_FA_ERROR(flash_attn_ext(ctx, q, k, v, mh, 1.0f), "ne[2]", "9 is not a multiple of 2");
    tensor * q4 = ctx.new_tensor(TSR_TYPE_F32, {64, 5, 9, 2});
    EXPECT_FA_ERROR(flash_attn_ext(ctx, q4, k, v, mask, 1.0f), "ne[3] == 1");
    EXPECT_FA_ERROR(flash_attn_ext(ctx, q, nullptr, v, mask, 1.0f), "k is null");
}

} // namespace
} // namespace tessera::cpu::test

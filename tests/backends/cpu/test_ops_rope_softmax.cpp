// ROPE (normal and NeoX, n_dims < head_dim, per-token positions, frequency
// base and scale) and SOFT_MAX (scale, broadcast mask, all -inf rows)
// against double-precision references, on packed and permuted inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "backends/cpu/ref_util.hpp"

namespace tessera::cpu::test {
namespace {

struct rope_case {
    int64_t head_dim, n_dims;
    rope_mode mode;
    float base, scale;
    bool permuted;
};

class Rope : public ::testing::TestWithParam<rope_case> {};

// Reference: RoFormer eq. 34 with theta_i = pos * scale * base^(-2i/n_dims),
// pairs (2i, 2i+1) for NORMAL and (i, i + n_dims/2) for NEOX; computed in
// double. The kernel rounds cos/sin to F32 and rotates in F32: |x| <= 2, so
// the error is a few F32 ulps of 2: tolerance 2e-6.
TEST_P(Rope, MatchesReference) {
    const rope_case c = GetParam();
    const int64_t n_head = 3, n_tokens = 5;
    context ctx(data_ctx());
    std::mt19937 rng(static_cast<unsigned>(c.head_dim + c.n_dims));
    tsr_tensor * x = nullptr;
    if (c.permuted) {
        // [head_dim, n_tokens, n_head] packed, viewed as [head_dim, n_head, n_tokens]
        tsr_tensor * base = ctx.new_tensor(TSR_TYPE_F32, {c.head_dim, n_tokens, n_head});
        x = permute(ctx, base, 0, 2, 1, 3);
    } else {
        x = ctx.new_tensor(TSR_TYPE_F32, {c.head_dim, n_head, n_tokens});
    }
    fill_uniform(x, rng, -2.0f, 2.0f);
    tsr_tensor * pos = ctx.new_tensor(TSR_TYPE_I32, {n_tokens});
    const int32_t positions[n_tokens] = {0, 1, 7, 511, 4095};
    for (int64_t t = 0; t < n_tokens; ++t) set_i32(pos, positions[t], t);
    tsr_tensor * out = rope(ctx, x, pos, static_cast<int>(c.n_dims), c.mode, c.base, c.scale);
    for (int nth : thread_counts()) {
        ASSERT_EQ(compute(out, nth), TSR_STATUS_SUCCESS);
        for (int64_t t = 0; t < n_tokens; ++t) {
            for (int64_t h = 0; h < n_head; ++h) {
                std::vector<double> want(static_cast<size_t>(c.head_dim));
                for (int64_t i = 0; i < c.head_dim; ++i) want[i] = get(x, i, h, t);
                for (int64_t i = 0; i < c.n_dims / 2; ++i) {
                    const double theta = positions[t] * static_cast<double>(c.scale) *
                                         std::pow(static_cast<double>(c.base), -2.0 * i / c.n_dims);
                    const int64_t j0 = c.mode == ROPE_NEOX ? i : 2 * i;
                    const int64_t j1 = c.mode == ROPE_NEOX ? i + c.n_dims / 2 : 2 * i + 1;
                    const double x0 = get(x, j0, h, t), x1 = get(x, j1, h, t);
                    want[j0] = x0 * std::cos(theta) - x1 * std::sin(theta);
                    want[j1] = x0 * std::sin(theta) + x1 * std::cos(theta);
                }
                for (int64_t i = 0; i < c.head_dim; ++i) {
                    const double tol = i < c.n_dims ? 2e-6 : 0.0; // the tail is copied exactly
                    ASSERT_NEAR(get(out, i, h, t), want[i], tol) << "i=" << i << " head " << h << " token " << t;
                }
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Modes, Rope,
                         ::testing::Values(rope_case{8, 8, ROPE_NORMAL, 10000.0f, 1.0f, false},
                                           rope_case{64, 32, ROPE_NORMAL, 10000.0f, 1.0f, true},
                                           rope_case{33, 6, ROPE_NORMAL, 500000.0f, 0.25f, false},
                                           rope_case{8, 8, ROPE_NEOX, 10000.0f, 1.0f, true},
                                           rope_case{64, 48, ROPE_NEOX, 1000000.0f, 0.5f, false},
                                           rope_case{31, 2, ROPE_NEOX, 10000.0f, 1.0f, true}));

// freq_factors (Llama 3.1's rope_freqs): theta_i is divided by factor i.
// Nodes in one graph with other factors, the same values in another
// tensor, and none, then the factors' values changed between two runs of
// the same graph: each matches the double reference, so no thread reuses
// a table computed with other factors.
TEST(Rope, FreqFactorsDivideEachPairsFrequency) {
    const int64_t head_dim = 16, n_head = 2, n_tokens = 3;
    const int n_dims = 12; // factors for 6 pairs; the tensor holds 8 (>= n_dims / 2 is enough)
    context ctx(data_ctx());
    std::mt19937 rng(5);
    tsr_tensor * x = ctx.new_tensor(TSR_TYPE_F32, {head_dim, n_head, n_tokens});
    fill_uniform(x, rng, -2.0f, 2.0f);
    tsr_tensor * pos = ctx.new_tensor(TSR_TYPE_I32, {n_tokens});
    const int32_t positions[n_tokens] = {3, 100, 3000};
    for (int64_t t = 0; t < n_tokens; ++t) set_i32(pos, positions[t], t);
    tsr_tensor * f1 = ctx.new_tensor(TSR_TYPE_F32, {8});
    tsr_tensor * f2 = ctx.new_tensor(TSR_TYPE_F32, {8});
    tsr_tensor * f1_copy = ctx.new_tensor(TSR_TYPE_F32, {8});
    const float v1[8] = {1.0f, 1.0f, 2.5f, 4.69f, 8.0f, 8.0f, 100.0f, 100.0f};
    const float v2[8] = {0.5f, 3.0f, 1.0f, 1.0f, 1.25f, 16.0f, 1.0f, 1.0f};
    std::memcpy(f1->data, v1, sizeof v1);
    std::memcpy(f2->data, v2, sizeof v2);
    std::memcpy(f1_copy->data, v1, sizeof v1);
    tsr_tensor * const factors[] = {f1, f2, nullptr, f1_copy};
    graph g;
    std::vector<tsr_tensor *> outs;
    for (tsr_tensor * f : factors) {
        outs.push_back(rope(ctx, x, pos, n_dims, ROPE_NORMAL, 10000.0f, 0.5f, f));
        g.build_forward(outs.back());
    }
    ASSERT_EQ(outs[0]->src[2], f1);
    const auto check = [&](int nth) {
        for (size_t k = 0; k < outs.size(); ++k) {
            const auto * fv = factors[k] != nullptr ? static_cast<const float *>(factors[k]->data) : nullptr;
            for (int64_t t = 0; t < n_tokens; ++t) {
                for (int64_t h = 0; h < n_head; ++h) {
                    for (int64_t i = 0; i < head_dim; ++i) {
                        double want = get(x, i, h, t);
                        if (i < n_dims) {
                            const int64_t pair = i / 2;
                            double theta = positions[t] * 0.5 * std::pow(10000.0, -2.0 * pair / n_dims);
                            if (fv != nullptr) theta /= fv[pair];
                            const double x0 = get(x, 2 * pair, h, t), x1 = get(x, 2 * pair + 1, h, t);
                            want = i % 2 == 0 ? x0 * std::cos(theta) - x1 * std::sin(theta)
                                              : x0 * std::sin(theta) + x1 * std::cos(theta);
                        }
                        ASSERT_NEAR(get(outs[k], i, h, t), want, i < n_dims ? 4e-6 : 0.0)
                            << "node " << k << " token " << t << " head " << h << " i=" << i << " threads " << nth;
                    }
                }
            }
        }
    };
    for (int nth : thread_counts()) {
        ASSERT_EQ(graph_compute(g.view(), nth), TSR_STATUS_SUCCESS);
        check(nth);
    }
    // New values in f1 (same tensor, same address): the tables follow.
    static_cast<float *>(f1->data)[2] = 0.125f;
    ASSERT_EQ(graph_compute(g.view(), 1), TSR_STATUS_SUCCESS);
    check(1);
}

// Each thread keeps its last cos/sin table between nodes (rope.cpp): nodes
// of one graph that differ in one parameter each (position, n_dims, base,
// scale, -0 against +0, and n_dims 0, which the builder refuses but a
// hand-made node may carry: a plain copy) must each get their own.
TEST(Rope, TableIsRecomputedWhenAnyParameterChanges) {
    struct params {
        int n_dims;
        float base, scale;
        int32_t position;
    };
    const params ps[] = {{8, 10000.0f, 1.0f, 7}, {8, 10000.0f, 1.0f, 8}, {6, 10000.0f, 1.0f, 8},
                         {6, 500.0f, 1.0f, 8},   {6, 500.0f, 0.5f, 8},   {6, 500.0f, 0.0f, 8},
                         {6, 500.0f, -0.0f, 8},  {2, 500.0f, 0.5f, 8},   {2, 500.0f, 0.5f, 8}};
    const int64_t head_dim = 8, n_head = 2;
    context ctx(data_ctx());
    std::mt19937 rng(11);
    tsr_tensor * x = ctx.new_tensor(TSR_TYPE_F32, {head_dim, n_head, 1});
    fill_uniform(x, rng, -2.0f, 2.0f);
    graph g;
    std::vector<tsr_tensor *> outs;
    for (const params & p : ps) {
        tsr_tensor * pos = ctx.new_tensor(TSR_TYPE_I32, {1});
        set_i32(pos, p.position, 0);
        outs.push_back(rope(ctx, x, pos, p.n_dims, ROPE_NORMAL, p.base, p.scale));
        g.build_forward(outs.back());
    }
    // A hand-made n_dims 0 node: the last one, its op_params edited.
    outs.back()->op_params[0] = 0;
    {
        // Alone, on a thread that has no table yet.
        graph alone;
        alone.build_forward(outs.back());
        tsr_status st = TSR_STATUS_FAILED;
        std::thread([&] { st = graph_compute(alone.view(), 1); }).join();
        ASSERT_EQ(st, TSR_STATUS_SUCCESS);
        for (int64_t i = 0; i < nelements(x); ++i) {
            ASSERT_EQ(static_cast<const float *>(outs.back()->data)[i], static_cast<const float *>(x->data)[i]) << i;
        }
    }
    for (int nth : thread_counts()) {
        const tsr_graph_view v = g.view();
        ASSERT_EQ(graph_compute(v, nth), TSR_STATUS_SUCCESS);
        for (size_t k = 0; k < outs.size(); ++k) {
            const int n_dims = static_cast<int>(outs[k]->op_params[0]);
            for (int64_t h = 0; h < n_head; ++h) {
                for (int64_t i = 0; i < head_dim; ++i) {
                    double want = get(x, i, h, 0);
                    if (i < n_dims) {
                        const int64_t pair = i / 2;
                        const double theta = ps[k].position * static_cast<double>(ps[k].scale) *
                                             std::pow(static_cast<double>(ps[k].base), -2.0 * pair / n_dims);
                        const double x0 = get(x, 2 * pair, h, 0), x1 = get(x, 2 * pair + 1, h, 0);
                        want = i % 2 == 0 ? x0 * std::cos(theta) - x1 * std::sin(theta) : x0 * std::sin(theta) + x1 * std::cos(theta);
                    }
                    const double got = get(outs[k], i, h, 0);
                    ASSERT_NEAR(got, want, i < n_dims ? 2e-6 : 0.0) << "node " << k << " i=" << i << " head " << h;
                }
            }
        }
    }
}

// Each thread keeps a table per position below a cap (1 MiB of tables:
// 4096 positions at n_dims 64, 16384 at 16) across nodes, and the last one
// computed for any other position (rope.cpp). Nodes with n_dims 16 (whose
// tables are laid out at a quarter of the stride), then 64 with base A, B, A again
// over the same positions, in an order a prompt never has (repeats,
// negative, at and past the caps): every node matches the double
// reference, and both 64/A nodes give exactly the bytes of a 64/A node
// computed alone on a fresh thread (tables are kept, never approximated).
TEST(Rope, TablesKeptAcrossNodesGiveTheSameBits) {
    const int64_t head_dim = 64, n_head = 2;
    const std::vector<int32_t> positions = {5000, 3, -2, 3, 0, 4095, 4096, 5000, 70000, 8191, 8192, 1};
    const auto n_tokens = static_cast<int64_t>(positions.size());
    context ctx(data_ctx());
    std::mt19937 rng(12);
    tsr_tensor * x = ctx.new_tensor(TSR_TYPE_F32, {head_dim, n_head, n_tokens});
    fill_uniform(x, rng, -2.0f, 2.0f);
    tsr_tensor * pos = ctx.new_tensor(TSR_TYPE_I32, {n_tokens});
    for (int64_t t = 0; t < n_tokens; ++t) set_i32(pos, positions[static_cast<size_t>(t)], t);
    struct params {
        int n_dims;
        float base;
    };
    const params ps[] = {{16, 10000.0f}, {64, 10000.0f}, {64, 500000.0f}, {64, 10000.0f}};
    std::vector<tsr_tensor *> outs;
    graph g;
    for (const params & p : ps) {
        outs.push_back(rope(ctx, x, pos, p.n_dims, ROPE_NORMAL, p.base, 1.0f));
        g.build_forward(outs.back());
    }
    tsr_tensor * alone_out = rope(ctx, x, pos, static_cast<int>(head_dim), ROPE_NORMAL, 10000.0f, 1.0f);
    graph alone;
    alone.build_forward(alone_out);
    tsr_status st = TSR_STATUS_FAILED;
    std::thread([&] { st = graph_compute(alone.view(), 1); }).join();
    ASSERT_EQ(st, TSR_STATUS_SUCCESS);
    const size_t bytes = static_cast<size_t>(nelements(x)) * sizeof(float);
    for (int nth : thread_counts()) {
        for (int rep = 0; rep < 2; ++rep) { // the second time, every table is already kept
            ASSERT_EQ(graph_compute(g.view(), nth), TSR_STATUS_SUCCESS);
            for (size_t k = 0; k < outs.size(); ++k) {
                const int64_t n_dims = ps[k].n_dims;
                for (int64_t t = 0; t < n_tokens; ++t) {
                    for (int64_t h = 0; h < n_head; ++h) {
                        for (int64_t i = 0; i < n_dims / 2; ++i) {
                            const double theta = positions[static_cast<size_t>(t)] *
                                                 std::pow(static_cast<double>(ps[k].base), -2.0 * i / n_dims);
                            const double x0 = get(x, 2 * i, h, t), x1 = get(x, 2 * i + 1, h, t);
                            ASSERT_NEAR(get(outs[k], 2 * i, h, t), x0 * std::cos(theta) - x1 * std::sin(theta), 2e-6)
                                << "node " << k << " token " << t << " pair " << i;
                            ASSERT_NEAR(get(outs[k], 2 * i + 1, h, t), x0 * std::sin(theta) + x1 * std::cos(theta), 2e-6)
                                << "node " << k << " token " << t << " pair " << i;
                        }
                        for (int64_t i = n_dims; i < head_dim; ++i) {
                            ASSERT_EQ(get(outs[k], i, h, t), get(x, i, h, t)) << "node " << k << " token " << t << " i=" << i;
                        }
                    }
                }
            }
            EXPECT_EQ(std::memcmp(outs[1]->data, alone_out->data, bytes), 0) << nth << " threads";
            EXPECT_EQ(std::memcmp(outs[3]->data, alone_out->data, bytes), 0) << nth << " threads";
        }
    }
}

// Reference: softmax(scale * a + mask) in double; rows of all -inf give 0.
// The kernel exponentiates in F32 after subtracting the max, sums in double:
// outputs in [0, 1] within 1e-6 relative + 1e-9.
void check_soft_max(const tsr_tensor * a, const tsr_tensor * mask, float scale, const tsr_tensor * out) {
    const int64_t n = a->ne[0];
    for (int64_t i3 = 0; i3 < a->ne[3]; ++i3) {
        for (int64_t i2 = 0; i2 < a->ne[2]; ++i2) {
            for (int64_t i1 = 0; i1 < a->ne[1]; ++i1) {
                std::vector<double> v(static_cast<size_t>(n));
                double mx = -INFINITY;
                for (int64_t i = 0; i < n; ++i) {
                    v[i] = scale * get(a, i, i1, i2, i3) +
                           (mask ? get(mask, i, i1, i2 % mask->ne[2], i3 % mask->ne[3]) : 0.0);
                    mx = std::max(mx, v[i]);
                }
                double sum = 0;
                for (int64_t i = 0; i < n; ++i) sum += mx == -INFINITY ? 0.0 : std::exp(v[i] - mx);
                for (int64_t i = 0; i < n; ++i) {
                    const double want = mx == -INFINITY ? 0.0 : std::exp(v[i] - mx) / sum;
                    ASSERT_NEAR(get(out, i, i1, i2, i3), want, 1e-6 * want + 1e-9)
                        << "row " << i1 << "," << i2 << "," << i3 << " i=" << i;
                }
            }
        }
    }
}

TEST(SoftMax, NoMaskOddSizes) {
    for (int64_t n : {1, 3, 31, 33, 4097}) {
        context ctx(data_ctx());
        std::mt19937 rng(static_cast<unsigned>(n));
        tsr_tensor * a = ctx.new_tensor(TSR_TYPE_F32, {n, 3, 2});
        fill_uniform(a, rng, -20.0f, 20.0f);
        tsr_tensor * out = soft_max(ctx, a, nullptr, 0.7f);
        ASSERT_EQ(compute(out, 3), TSR_STATUS_SUCCESS);
        check_soft_max(a, nullptr, 0.7f, out);
    }
}

TEST(SoftMax, CausalMaskBroadcastAndAllMaskedRow) {
    const int64_t n_kv = 37, n_tokens = 6, n_head = 4;
    context ctx(data_ctx());
    std::mt19937 rng(3);
    // a as attention scores [n_kv, n_tokens, n_head] viewed from [n_kv, n_head, n_tokens] (permuted).
    tsr_tensor * base = ctx.new_tensor(TSR_TYPE_F32, {n_kv, n_head, n_tokens});
    tsr_tensor * a = permute(ctx, base, 0, 2, 1, 3);
    fill_uniform(a, rng, -5.0f, 5.0f);
    // mask [n_kv, n_tokens + 2 (padded), 2]: broadcast over heads (4 % 2 == 0).
    tsr_tensor * mask = ctx.new_tensor(TSR_TYPE_F32, {n_kv, n_tokens + 2, 2});
    const float ninf = -std::numeric_limits<float>::infinity();
    for_each_index(mask, [&](int64_t i0, int64_t i1, int64_t i2, int64_t) {
        // causal: token i1 sees kv 0..30+i1; mask slice 1 differs (adds a bias)
        float v = i0 <= 30 + i1 ? (i2 == 0 ? 0.0f : 0.25f * static_cast<float>(i0 % 3)) : ninf;
        if (i1 == 2) v = ninf; // token 2: every kv masked -> zeros
        set_f32(mask, v, i0, i1, i2);
    });
    tsr_tensor * out = soft_max(ctx, a, mask, 0.125f);
    for (int nth : thread_counts()) {
        ASSERT_EQ(compute(out, nth), TSR_STATUS_SUCCESS);
        check_soft_max(a, mask, 0.125f, out);
        for (int64_t h = 0; h < n_head; ++h) {
            for (int64_t i = 0; i < n_kv; ++i) ASSERT_EQ(get(out, i, 2, h), 0.0);
        }
    }
}

// A NaN entry makes its row NaN (the maximum used to skip it and the row
// came out finite but wrong, or zeros when the rest was masked); other rows
// are untouched.
TEST(SoftMax, ANaNEntryGivesANaNRow) {
    context ctx(data_ctx());
    tsr_tensor * a = ctx.new_tensor(TSR_TYPE_F32, {5, 3});
    const float ninf = -std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    const float vals[3][5] = {{0.5f, nan, 1.0f, -2.0f, 0.0f}, {nan, ninf, ninf, ninf, ninf}, {1.0f, 2.0f, 3.0f, 4.0f, 5.0f}};
    for (int r = 0; r < 3; ++r) {
        for (int i = 0; i < 5; ++i) set_f32(a, vals[r][i], i, r);
    }
    tsr_tensor * out = soft_max(ctx, a, nullptr, 1.0f);
    ASSERT_EQ(compute(out, 1), TSR_STATUS_SUCCESS);
    for (int r = 0; r < 2; ++r) {
        for (int i = 0; i < 5; ++i) EXPECT_TRUE(std::isnan(get(out, i, r))) << "row " << r << " entry " << i;
    }
    double sum = 0;
    for (int i = 0; i < 5; ++i) sum += get(out, i, 2);
    EXPECT_NEAR(sum, 1.0, 1e-6);
    EXPECT_NEAR(get(out, 4, 2), std::exp(0.0) / (1 + std::exp(-1.0) + std::exp(-2.0) + std::exp(-3.0) + std::exp(-4.0)), 1e-6);
}

TEST(SoftMax, LargeValuesDoNotOverflow) {
    context ctx(data_ctx());
    tsr_tensor * a = ctx.new_tensor(TSR_TYPE_F32, {4});
    const float vals[4] = {1000.0f, 999.0f, -1000.0f, 1000.0f};
    for (int i = 0; i < 4; ++i) set_f32(a, vals[i], i);
    tsr_tensor * out = soft_max(ctx, a, nullptr, 1.0f);
    ASSERT_EQ(compute(out, 1), TSR_STATUS_SUCCESS);
    check_soft_max(a, nullptr, 1.0f, out);
    EXPECT_NEAR(get(out, 0) + get(out, 1) + get(out, 2) + get(out, 3), 1.0, 1e-6);
}

} // namespace
} // namespace tessera::cpu::test

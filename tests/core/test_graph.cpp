// Forward graph construction: order, leafs, duplicates, limits.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "tessera/core/error.hpp"
#include "tessera/core/graph.hpp"
#include "tessera/core/ops.hpp"

using namespace tessera;

namespace {

size_t index_of(std::span<tensor * const> v, const tensor * t) {
    return static_cast<size_t>(std::find(v.begin(), v.end(), t) - v.begin());
}

// Every dependency of every node (sources and view_src) is an earlier node or a leaf.
void expect_topological(const graph & g) {
    auto nodes = g.nodes();
    auto leafs = g.leafs();
    std::set<const tensor *> seen(leafs.begin(), leafs.end());
    EXPECT_EQ(seen.size(), leafs.size()) << "duplicate leaf";
    for (const tensor * l : leafs) EXPECT_EQ(l->op, TSR_OP_NONE);
    for (const tensor * n : nodes) {
        EXPECT_NE(n->op, TSR_OP_NONE);
        for (const tensor * s : n->src) {
            if (s != nullptr) {
                EXPECT_TRUE(seen.count(s)) << n->name << " before its source " << s->name;
            }
        }
        if (n->view_src != nullptr) {
            EXPECT_TRUE(seen.count(n->view_src));
        }
        EXPECT_TRUE(seen.insert(n).second) << "duplicate node " << n->name;
    }
}

} // namespace

TEST(Graph, SmallAttentionLikeGraph) {
    context ctx;
    tensor * x = context::set_name(ctx.new_tensor(TSR_TYPE_F32, {16, 4}), "x");
    tensor * w = context::set_name(ctx.new_tensor(TSR_TYPE_Q8_0, {32, 16}), "w"); // unused leaf
    tensor * wq = context::set_name(ctx.new_tensor(TSR_TYPE_F32, {16, 16}), "wq");
    tensor * norm_w = context::set_name(ctx.new_tensor(TSR_TYPE_F32, {16}), "norm_w");
    (void)w;
    tensor * n = context::set_name(rms_norm(ctx, x, 1e-6f), "norm");
    tensor * nw = context::set_name(mul(ctx, n, norm_w), "norm_w_mul");
    tensor * q = context::set_name(mul_mat(ctx, wq, nw), "q");
    tensor * qr = context::set_name(reshape(ctx, q, {4, 4, 4}), "q_r");
    tensor * qp = context::set_name(permute(ctx, qr, 0, 2, 1, 3), "q_p");
    tensor * kq = context::set_name(mul_mat(ctx, qp, qp), "kq"); // qp used twice
    tensor * out = context::set_name(soft_max(ctx, kq, nullptr, 0.5f), "out");

    graph g;
    g.build_forward(out);
    expect_topological(g);
    // Leafs in depth-first visiting order (mul_mat visits wq before its
    // activation operand); the unused weight is not in the graph.
    ASSERT_EQ(g.leafs().size(), 3u);
    EXPECT_EQ(g.leafs()[0], wq);
    EXPECT_EQ(g.leafs()[1], x);
    EXPECT_EQ(g.leafs()[2], norm_w);
    // Exact depth-first post-order.
    const tensor * expected[] = {n, nw, q, qr, qp, kq, out};
    ASSERT_EQ(g.nodes().size(), std::size(expected));
    for (size_t i = 0; i < std::size(expected); ++i) EXPECT_EQ(g.nodes()[i], expected[i]) << i;

    tsr_graph_view v = g.view();
    EXPECT_EQ(v.n_nodes, 7);
    EXPECT_EQ(v.n_leafs, 3);
    EXPECT_EQ(v.nodes[6], out);
    EXPECT_EQ(v.leafs[0], wq);

    // Building again from an existing node adds nothing.
    g.build_forward(out);
    g.build_forward(q);
    EXPECT_EQ(g.nodes().size(), 7u);
    EXPECT_EQ(g.leafs().size(), 3u);
}

TEST(Graph, SeveralOutputsShareNodes) {
    context ctx;
    tensor * a = ctx.new_tensor(TSR_TYPE_F32, {8});
    tensor * s = silu(ctx, a);
    tensor * o1 = scale(ctx, s, 2.0f);
    tensor * o2 = gelu(ctx, s);
    graph g;
    g.build_forward(o1);
    g.build_forward(o2);
    expect_topological(g);
    EXPECT_EQ(g.nodes().size(), 3u);
    EXPECT_LT(index_of(g.nodes(), s), index_of(g.nodes(), o2));
    EXPECT_EQ(g.leafs().size(), 1u);
}

TEST(Graph, ViewSourceIsADependency) {
    context ctx;
    tensor * cache = ctx.new_tensor(TSR_TYPE_F16, {8, 16});
    tensor * k = ctx.new_tensor(TSR_TYPE_F32, {8, 2});
    tensor * idx = ctx.new_tensor(TSR_TYPE_I32, {2});
    tensor * cache_view = view_2d(ctx, cache, 8, 16, cache->nb[1], 0);
    tensor * store = set_rows(ctx, cache_view, k, idx);
    graph g;
    g.build_forward(store);
    expect_topological(g);
    EXPECT_EQ(index_of(g.leafs(), cache) < g.leafs().size(), true);
    EXPECT_LT(index_of(g.nodes(), cache_view), index_of(g.nodes(), store));

    // A view built by hand with only view_src set still pulls its owner in.
    tensor * manual = ctx.new_tensor(TSR_TYPE_F32, {4});
    tensor * owner = ctx.new_tensor(TSR_TYPE_F32, {4});
    manual->op = TSR_OP_VIEW;
    manual->view_src = owner;
    graph g2;
    g2.build_forward(manual);
    ASSERT_EQ(g2.leafs().size(), 1u);
    EXPECT_EQ(g2.leafs()[0], owner);
}

TEST(Graph, DeepChainDoesNotRecurse) {
    context ctx(context::params{.max_tensors = 200001});
    tensor * t = ctx.new_tensor(TSR_TYPE_F32, {4});
    for (int i = 0; i < 200000; ++i) t = silu(ctx, t);
    graph g(200000);
    g.build_forward(t);
    EXPECT_EQ(g.nodes().size(), 200000u);
    EXPECT_EQ(g.nodes().back(), t);
}

TEST(Graph, SizeLimitThrowsAndLeavesGraphUnchanged) {
    context ctx;
    tensor * a = ctx.new_tensor(TSR_TYPE_F32, {8});
    tensor * s = silu(ctx, a);
    tensor * t = a;
    for (int i = 0; i < 5; ++i) t = scale(ctx, t, 2.0f);
    graph g(4);
    g.build_forward(s);
    EXPECT_EQ(g.nodes().size(), 1u);
    try {
        g.build_forward(t);
        FAIL() << "expected tessera::error";
    } catch (const tessera::error & e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("more than 4 nodes"), std::string::npos) << msg;
    }
    EXPECT_EQ(g.nodes().size(), 1u);
    EXPECT_EQ(g.leafs().size(), 1u);
    // Still usable: a smaller addition succeeds afterwards.
    tensor * u = gelu(ctx, s);
    g.build_forward(u);
    EXPECT_EQ(g.nodes().size(), 2u);
    EXPECT_EQ(g.nodes()[1], u);
}

TEST(Graph, LeafLimitAndBadInput) {
    context ctx;
    tensor * acc = ctx.new_tensor(TSR_TYPE_F32, {8});
    for (int i = 0; i < 3; ++i) acc = add(ctx, acc, ctx.new_tensor(TSR_TYPE_F32, {8}));
    graph g(3);
    const std::string msg = [&] {
        try {
            g.build_forward(acc);
        } catch (const tessera::error & e) {
            return std::string(e.what());
        }
        return std::string("<no error>");
    }();
    EXPECT_NE(msg.find("more than 3 leafs"), std::string::npos) << msg;
    EXPECT_TRUE(g.nodes().empty());
    EXPECT_THROW(g.build_forward(nullptr), tessera::error);

    // A cycle made by hand is reported, not followed forever.
    tensor * x = ctx.new_tensor(TSR_TYPE_F32, {8});
    tensor * y = silu(ctx, x);
    tensor * z = silu(ctx, y);
    y->src[0] = z;
    graph g2;
    EXPECT_THROW(g2.build_forward(z), tessera::error);
    EXPECT_TRUE(g2.nodes().empty());
}

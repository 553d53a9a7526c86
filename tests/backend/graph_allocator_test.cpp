// The graph allocator: exact placements and peak on hand-checked graphs,
// never-reused outputs, views keeping their source alive, reserve/grow,
// errors; and random graphs computed on the CPU backend give bit-identical
// results to the same graph with every tensor in its own memory, with no
// two live tensors overlapping.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>

#include "backend/test_support.hpp"
#include "tessera/backend/cpu.hpp"
#include "tessera/backend/graph_allocator.hpp"
#include "tessera/core/ops.hpp"

namespace tessera::test {
namespace {

class GraphAllocator : public ::testing::Test {
protected:
    void SetUp() override {
        reg.register_backend(cpu::backend_reg());
        dev = reg.device_at(0);
        buft = dev.default_buffer_type();
    }
    size_t offset_of(const tsr_tensor * t, graph_allocator & a) {
        return size_t(static_cast<char *>(t->data) - static_cast<char *>(a.get_buffer().base()));
    }
    registry reg;
    device dev;
    buffer_type buft;
    context ctx{context::params{512, false}};
};

// 256 floats = 1024 bytes: a multiple of the 64-byte alignment.
constexpr int64_t n = 256;
constexpr size_t S = n * 4;

TEST_F(GraphAllocator, ChainReusesMemoryOfFinishedTensors) {
    tsr_tensor * x = ctx.new_tensor(TSR_TYPE_F32, {n});
    x->flags |= TSR_FLAG_INPUT;
    tsr_tensor * a = scale(ctx, x, 2.0f);
    tsr_tensor * b = scale(ctx, a, 2.0f);
    tsr_tensor * c = scale(ctx, b, 2.0f);
    tsr_tensor * d = scale(ctx, c, 2.0f);
    graph g;
    g.build_forward(d);
    graph_allocator alloc(buft);
    EXPECT_TRUE(alloc.allocate(g));
    // x [0,S); a [S,2S); x free -> b [0,S); a free -> c [S,2S); b free -> d [0,S).
    EXPECT_EQ(alloc.peak_size(), 2 * S);
    EXPECT_EQ(alloc.buffer_size(), 2 * S);
    EXPECT_EQ(offset_of(x, alloc), 0u);
    EXPECT_EQ(offset_of(a, alloc), S);
    EXPECT_EQ(offset_of(b, alloc), 0u);
    EXPECT_EQ(offset_of(c, alloc), S);
    EXPECT_EQ(offset_of(d, alloc), 0u);
    EXPECT_EQ(d->buffer, alloc.get_buffer().get());
    EXPECT_EQ(alloc.get_buffer().usage(), TSR_BUFFER_USAGE_COMPUTE);

    std::vector<float> xs(n);
    for (int64_t i = 0; i < n; ++i) xs[size_t(i)] = float(i) - 100.0f;
    tensor_set(x, xs.data(), 0, S);
    backend be = dev.init("n_threads=2");
    ASSERT_EQ(be.graph_compute(g), TSR_STATUS_SUCCESS);
    std::vector<float> out(n);
    tensor_get(d, out.data(), 0, S);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(out[size_t(i)], xs[size_t(i)] * 16.0f);
}

TEST_F(GraphAllocator, OutputsAreNeverReused) {
    tsr_tensor * x = ctx.new_tensor(TSR_TYPE_F32, {n});
    tsr_tensor * a = scale(ctx, x, 2.0f);
    tsr_tensor * b = scale(ctx, a, 2.0f);
    b->flags |= TSR_FLAG_OUTPUT;
    tsr_tensor * c = scale(ctx, b, 2.0f);
    tsr_tensor * d = scale(ctx, c, 2.0f);
    graph g;
    g.build_forward(d);
    graph_allocator alloc(buft);
    alloc.allocate(g);
    // x [0,S); a [S,2S); b [0,S) kept; c [S,2S); d [2S,3S).
    EXPECT_EQ(alloc.peak_size(), 3 * S);
    EXPECT_EQ(offset_of(b, alloc), 0u);
    EXPECT_EQ(offset_of(d, alloc), 2 * S);
}

TEST_F(GraphAllocator, ViewKeepsItsSourceAliveUntilItsReadersRan) {
    tsr_tensor * x = ctx.new_tensor(TSR_TYPE_F32, {n});
    tsr_tensor * a = scale(ctx, x, 2.0f);
    tsr_tensor * v = reshape(ctx, a, {n / 2, 2});
    tsr_tensor * b = scale(ctx, x, 3.0f);       // x still read here
    tsr_tensor * c = add(ctx, reshape(ctx, b, {n / 2, 2}), v);
    graph g;
    g.build_forward(c);
    graph_allocator alloc(buft);
    alloc.allocate(g);
    EXPECT_EQ(v->data, a->data);
    EXPECT_EQ(v->buffer, a->buffer);
    // a must not be reused before c ran, so x, a, b and c never share memory
    // except c reusing x (last read by b).
    EXPECT_NE(offset_of(b, alloc), offset_of(a, alloc));
    EXPECT_NE(offset_of(c, alloc), offset_of(a, alloc));
    EXPECT_NE(offset_of(c, alloc), offset_of(b, alloc));
    EXPECT_EQ(offset_of(c, alloc), offset_of(x, alloc));
    EXPECT_EQ(alloc.peak_size(), 3 * S);

    std::vector<float> xs(n, 1.5f);
    tensor_set(x, xs.data(), 0, S);
    backend be = dev.init("n_threads=1");
    ASSERT_EQ(be.graph_compute(g), TSR_STATUS_SUCCESS);
    std::vector<float> out(n);
    tensor_get(c, out.data(), 0, S);
    for (float f : out) EXPECT_EQ(f, 1.5f * 5.0f);
}

TEST_F(GraphAllocator, LeafsWithDataAndWeightsAreLeftAlone) {
    buffer wbuf = buft.alloc(S);
    tsr_tensor * w = ctx.new_tensor(TSR_TYPE_F32, {n});
    w->flags |= TSR_FLAG_PARAM;
    wbuf.place(w, 0);
    tsr_tensor * x = ctx.new_tensor(TSR_TYPE_F32, {n});
    tsr_tensor * y = mul(ctx, x, w);
    graph g;
    g.build_forward(y);
    graph_allocator alloc(buft);
    alloc.allocate(g);
    EXPECT_EQ(w->data, wbuf.base());
    EXPECT_EQ(w->buffer, wbuf.get());
    EXPECT_EQ(alloc.peak_size(), 2 * S); // x and y only
}

TEST_F(GraphAllocator, ReserveOnceThenAllocateSmallerAndLargerGraphs) {
    auto build = [&](int64_t len, int depth, graph & g) {
        tsr_tensor * cur = ctx.new_tensor(TSR_TYPE_F32, {len});
        for (int i = 0; i < depth; ++i) cur = scale(ctx, cur, 1.0f);
        g.build_forward(cur);
    };
    graph big, small, bigger;
    build(4 * n, 5, big);
    build(n, 3, small);
    build(8 * n, 2, bigger);
    graph_allocator alloc(buft);
    alloc.reserve(big);
    EXPECT_EQ(alloc.peak_size(), 8 * S);
    EXPECT_EQ(alloc.buffer_size(), 8 * S);
    for (tsr_tensor * t : big.nodes()) EXPECT_EQ(t->data, nullptr); // reserve places nothing
    EXPECT_FALSE(alloc.allocate(small));
    EXPECT_EQ(alloc.buffer_size(), 8 * S);
    EXPECT_EQ(alloc.peak_size(), 2 * S);
    EXPECT_FALSE(alloc.allocate(big)); // fits the reservation
    EXPECT_FALSE(alloc.allocate(big)); // again: its own old placements are redone
    EXPECT_TRUE(alloc.allocate(bigger));
    EXPECT_EQ(alloc.buffer_size(), 16 * S);
}

TEST_F(GraphAllocator, ErrorsNameTheTensor) {
    tsr_tensor * w = context::set_name(ctx.new_tensor(TSR_TYPE_F32, {n}), "blk.0.ffn_up");
    w->flags |= TSR_FLAG_PARAM;
    tsr_tensor * x = ctx.new_tensor(TSR_TYPE_F32, {n});
    graph g;
    g.build_forward(add(ctx, x, w));
    graph_allocator alloc(buft);
    EXPECT_EQ(error_of([&] { alloc.allocate(g); }),
              "graph_allocator: weight 'blk.0.ffn_up' has no data (load the weights before "
              "allocating the graph)");
    EXPECT_EQ(alloc.buffer_size(), 0u);
}

TEST_F(GraphAllocator, BufferTypeMaximumIsEnforced) {
    // A buffer type limited to 1 KiB (the fake GPU plugin's type has no
    // limit, so wrap the CPU type's functions with a max_size).
    static tsr_buffer_type_i limited = *cpu::backend_reg()
                                           ->iface->get_device(cpu::backend_reg(), 0)
                                           ->iface->get_buffer_type(nullptr)
                                           ->iface;
    limited.get_max_size = [](tsr_buffer_type *) -> size_t { return 1024; };
    tsr_buffer_type small_type{&limited, dev.get(), nullptr};
    graph_allocator alloc(buffer_type(&small_type, nullptr));
    tsr_tensor * x = ctx.new_tensor(TSR_TYPE_F32, {n});
    graph g;
    g.build_forward(scale(ctx, x, 1.0f));
    EXPECT_EQ(error_of([&] { alloc.allocate(g); }),
              "graph_allocator: the graph needs 2048 bytes but buffer type 'CPU' allows at most "
              "1024 in one buffer");
}

// ---- random graphs ----------------------------------------------------------

// A random DAG of element-wise ops over [len] F32 tensors (some through
// reshape views), with outputs marked. Built twice from one seed: once in
// a context that gives every tensor its own memory (the reference), once
// for the allocator.
struct random_dag {
    std::vector<tsr_tensor *> inputs, all;
    tsr_tensor * root = nullptr;
    random_dag(context & ctx, uint32_t seed, int64_t len) {
        std::mt19937 rng(seed);
        for (int i = 0; i < 3; ++i) {
            tsr_tensor * t = ctx.new_tensor(TSR_TYPE_F32, {len});
            t->flags |= TSR_FLAG_INPUT;
            inputs.push_back(t);
            all.push_back(t);
        }
        std::vector<tsr_tensor *> outs;
        for (int i = 0; i < 40; ++i) {
            auto pick = [&] {
                // Mostly recent tensors, sometimes old ones (long lifetimes).
                const size_t k = all.size();
                std::uniform_int_distribution<size_t> recent(k > 4 ? k - 4 : 0, k - 1), any(0, k - 1);
                return (rng() % 4 == 0) ? all[any(rng)] : all[recent(rng)];
            };
            tsr_tensor * a = pick();
            tsr_tensor * r = nullptr;
            switch (rng() % 5) {
            case 0: r = add(ctx, a, pick()); break;
            case 1: r = mul(ctx, a, pick()); break;
            case 2: r = scale(ctx, a, 0.5f, 0.25f); break;
            case 3: r = silu(ctx, a); break;
            default: r = reshape(ctx, add(ctx, reshape(ctx, a, {len / 4, 4}), reshape(ctx, pick(), {len / 4, 4})), {len}); break;
            }
            if (rng() % 8 == 0) {
                r->flags |= TSR_FLAG_OUTPUT;
                outs.push_back(r);
            }
            all.push_back(r);
        }
        // One root that reads every output and the last tensor.
        root = all.back();
        for (tsr_tensor * o : outs) root = add(ctx, root, o);
    }
};

TEST_F(GraphAllocator, RandomGraphsMatchSeparateMemoryBitForBit) {
    backend be = dev.init("n_threads=2");
    graph_allocator alloc(buft);
    const int64_t len = 132; // 528 bytes: not a multiple of the alignment
    size_t total_peak = 0, total_naive = 0;
    for (uint32_t seed = 1; seed <= 30; ++seed) {
        SCOPED_TRACE(seed);
        context ref_ctx{context::params{512, true}};
        context gctx{context::params{512, false}};
        random_dag ref(ref_ctx, seed, len), dag(gctx, seed, len);
        graph rg, g;
        rg.build_forward(ref.root);
        g.build_forward(dag.root);
        alloc.allocate(g);
        std::mt19937 rng(seed * 7);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        for (size_t i = 0; i < ref.inputs.size(); ++i) {
            std::vector<float> v(len);
            for (auto & f : v) f = u(rng);
            if (dag.inputs[i]->data == nullptr) continue; // not read by this graph
            std::memcpy(ref.inputs[i]->data, v.data(), len * 4);
            tensor_set(dag.inputs[i], v.data(), 0, len * 4);
        }
        ASSERT_EQ(be.graph_compute(rg), TSR_STATUS_SUCCESS);
        ASSERT_EQ(be.graph_compute(g), TSR_STATUS_SUCCESS);
        // Every output and the root agree bit for bit.
        for (size_t i = 0; i < dag.all.size(); ++i) {
            if (!(dag.all[i]->flags & TSR_FLAG_OUTPUT)) continue;
            ASSERT_EQ(std::memcmp(dag.all[i]->data, ref.all[i]->data, len * 4), 0) << "output " << i;
        }
        ASSERT_EQ(std::memcmp(dag.root->data, ref.root->data, len * 4), 0);
        // The peak never exceeds one block per tensor, and usually beats it.
        size_t owned = 0;
        for (tsr_tensor * t : g.leafs()) owned += (t->view_src == nullptr);
        for (tsr_tensor * t : g.nodes()) owned += (t->view_src == nullptr);
        const size_t block = (len * 4 + 63) / 64 * 64;
        EXPECT_LE(alloc.peak_size(), owned * block);
        total_peak += alloc.peak_size();
        total_naive += owned * block;
    }
    EXPECT_LT(total_peak, total_naive / 2);
}

} // namespace
} // namespace tessera::test

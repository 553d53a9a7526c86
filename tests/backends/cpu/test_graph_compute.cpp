// The thread pool and the graph walk: bit-identical results for any thread
// count, the abort callback (stops every thread at the same node, pool stays
// usable), repeated aborts under a watchdog, pause/resume, and bad graphs
// (unsupported ops, null data, data errors) giving FAILED, never a crash.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <limits>
#include <random>
#include <thread>

#include "backends/cpu/compute.hpp"
#include "backends/cpu/graph_compute.hpp"
#include "backends/cpu/ops/mul_mat_impl.hpp"
#include "backends/cpu/ops/vec_dot_k.hpp"
#include "backends/cpu/ops/work_queue.hpp"
#include "backends/cpu/ref_util.hpp"
#include "tessera/core/error.hpp"

namespace tessera::cpu::test {
namespace {

// Runs f on another thread and ends the process if it does not finish in
// `limit` (a hang must not stall the suite; the message says which test).
template <class F>
void with_watchdog(const char * what, std::chrono::seconds limit, F f) {
    auto fut = std::async(std::launch::async, f);
    if (fut.wait_for(limit) != std::future_status::ready) {
        std::fprintf(stderr, "watchdog: '%s' did not finish within %lld s (hang)\n", what,
                     static_cast<long long>(limit.count()));
        std::fflush(stderr);
        std::_Exit(3);
    }
    fut.get();
}

// Computes the graph that ends in `out` on 1, 2, 3 and 7 threads, with the
// bytes of `clear` set to 0xff before each run: every run gives out the
// bytes of the first, whose elements (rows of row_len, out being
// contiguous) are all finite. Under TSan a missing barrier shows as a race.
void expect_same_bytes_on_1_2_3_7_threads(tsr_tensor * out, tsr_tensor * clear, int64_t row_len) {
    graph g;
    g.build_forward(out);
    thread_pool pool(7);
    std::vector<char> ref;
    const int64_t n = static_cast<int64_t>(nbytes(out) / sizeof(float));
    for (int nth : {1, 2, 3, 7}) {
        std::memset(clear->data, 0xff, nbytes(clear));
        ASSERT_EQ(pool.compute(g.view(), nth), TSR_STATUS_SUCCESS);
        std::vector<char> got(static_cast<char *>(out->data), static_cast<char *>(out->data) + nbytes(out));
        if (ref.empty()) {
            ref = got;
            for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(std::isfinite(get(out, i % row_len, i / row_len))) << i;
        } else {
            EXPECT_EQ(got, ref) << nth << " threads differ from 1";
        }
    }
}

// A small transformer-like block: many nodes of different ops, with
// quantized and F16 weights, views, a KV-cache write and an attention.
struct block_graph {
    context ctx{data_ctx()};
    graph g;
    std::vector<tsr_tensor *> outputs; // every computed node, in graph order
    std::vector<std::array<tsr_tensor *, 3>> projections; // per layer: the Q, K, V products

    explicit block_graph(int layers = 2) {
        std::mt19937 rng(2024);
        const int64_t n_embd = 64, n_head = 4, head_dim = 16, n_tokens = 5, n_kv = 8, n_ff = 96;
        tsr_tensor * tok_embd = ctx.new_tensor(TSR_TYPE_Q8_0, {n_embd, 50});
        fill_weights(tok_embd, rng);
        tsr_tensor * tokens = ctx.new_tensor(TSR_TYPE_I32, {n_tokens});
        for (int64_t i = 0; i < n_tokens; ++i) set_i32(tokens, static_cast<int32_t>((i * 7 + 3) % 50), i);
        tsr_tensor * pos = ctx.new_tensor(TSR_TYPE_I32, {n_tokens});
        for (int64_t i = 0; i < n_tokens; ++i) set_i32(pos, static_cast<int32_t>(i + 3), i);
        tsr_tensor * kv_idx = ctx.new_tensor(TSR_TYPE_I64, {n_tokens});
        for (int64_t i = 0; i < n_tokens; ++i) set_i64(kv_idx, i + 3, i);
        tsr_tensor * mask = ctx.new_tensor(TSR_TYPE_F32, {n_kv, n_tokens});
        for_each_index(mask, [&](int64_t i0, int64_t i1, int64_t, int64_t) {
            set_f32(mask, i0 <= i1 + 3 ? 0.0f : -std::numeric_limits<float>::infinity(), i0, i1);
        });

        tsr_tensor * x = get_rows(ctx, tok_embd, tokens);
        for (int l = 0; l < layers; ++l) {
            const int32_t wt = l % 2 == 0 ? TSR_TYPE_Q4_0 : TSR_TYPE_F16;
            auto weight = [&](int64_t k, int64_t m) {
                tsr_tensor * w = ctx.new_tensor(static_cast<type>(wt), {k, m});
                fill_weights(w, rng);
                return w;
            };
            tsr_tensor * norm_w = ctx.new_tensor(TSR_TYPE_F32, {n_embd});
            fill_uniform(norm_w, rng, 0.5f, 1.5f);
            tsr_tensor * h = mul(ctx, rms_norm(ctx, x, 1e-5f), norm_w);
            tsr_tensor * q_mm = mul_mat(ctx, weight(n_embd, n_embd), h);
            tsr_tensor * k_mm = mul_mat(ctx, weight(n_embd, n_embd), h);
            tsr_tensor * v = mul_mat(ctx, weight(n_embd, n_embd), h);
            // The three products next to each other: independent nodes that
            // share one barrier (graph_compute.hpp).
            for (tsr_tensor * t : {q_mm, k_mm, v}) g.build_forward(t);
            projections.push_back({q_mm, k_mm, v});
            tsr_tensor * q = reshape(ctx, q_mm, {head_dim, n_head, n_tokens});
            tsr_tensor * k = reshape(ctx, k_mm, {head_dim, n_head, n_tokens});
            q = rope(ctx, q, pos, head_dim, ROPE_NEOX, 10000.0f, 1.0f);
            k = rope(ctx, k, pos, head_dim / 2, ROPE_NORMAL, 10000.0f, 1.0f);
            tsr_tensor * k_cache = ctx.new_tensor(TSR_TYPE_F16, {n_embd, n_kv});
            tsr_tensor * v_cache = ctx.new_tensor(TSR_TYPE_F32, {n_embd, n_kv});
            tsr_tensor * k_store = set_rows(ctx, k_cache, reshape(ctx, k, {n_embd, n_tokens}), kv_idx);
            tsr_tensor * v_store = set_rows(ctx, v_cache, v, kv_idx);
            g.build_forward(k_store);
            g.build_forward(v_store);
            tsr_tensor * kk = permute(ctx, reshape(ctx, k_cache, {head_dim, n_head, n_kv}), 0, 2, 1, 3);
            tsr_tensor * qq = permute(ctx, q, 0, 2, 1, 3);
            tsr_tensor * kq = soft_max(ctx, mul_mat(ctx, kk, qq), mask, 0.25f);
            tsr_tensor * vv = permute(ctx, reshape(ctx, v_cache, {head_dim, n_head, n_kv}), 1, 2, 0, 3);
            tsr_tensor * att = mul_mat(ctx, vv, kq); // [head_dim, n_tokens, n_head]
            tsr_tensor * att2 = cont(ctx, permute(ctx, att, 0, 2, 1, 3));
            x = add(ctx, x, mul_mat(ctx, weight(n_embd, n_embd), reshape(ctx, att2, {n_embd, n_tokens})));
            tsr_tensor * ff = silu(ctx, mul_mat(ctx, weight(n_embd, n_ff), x));
            ff = mul(ctx, ff, gelu(ctx, mul_mat(ctx, weight(n_embd, n_ff), x)));
            x = add(ctx, x, scale(ctx, mul_mat(ctx, weight(n_ff, n_embd), ff), 0.5f, 0.0f));
        }
        tsr_tensor * logits = mul_mat(ctx, tok_embd, rms_norm(ctx, x, 1e-5f));
        tsr_tensor * out16 = ctx.new_tensor(TSR_TYPE_F16, {50, n_tokens});
        g.build_forward(cpy(ctx, logits, out16));
        g.build_forward(argmax(ctx, logits));
        for (tsr_tensor * n : g.nodes()) {
            if (!op_is_noop(n->op)) outputs.push_back(n);
        }
    }

    // Bytes of every computed node, concatenated.
    std::vector<char> snapshot() const {
        std::vector<char> all;
        for (const tsr_tensor * n : outputs) {
            const auto * p = static_cast<const char *>(n->data);
            all.insert(all.end(), p, p + nbytes(n));
        }
        return all;
    }

    // Fills every computed node with a sentinel byte pattern 0xff (NaN for
    // F32/F16). SET_ROWS nodes alias their cache, which later nodes read:
    // those are zeroed instead (a fresh cache).
    void poison() {
        for (tsr_tensor * n : outputs) std::memset(n->data, n->op == TSR_OP_SET_ROWS ? 0 : 0xff, nbytes(n));
    }

    // True when some byte differs from the sentinel (the node ran).
    bool computed(const tsr_tensor * n) const {
        const auto * p = static_cast<const unsigned char *>(n->data);
        const unsigned char sentinel = n->op == TSR_OP_SET_ROWS ? 0 : 0xff;
        for (size_t i = 0; i < nbytes(n); ++i) {
            if (p[i] != sentinel) return true;
        }
        return false;
    }

    // True when no 4-byte run of the sentinel is left (every row was
    // written). SET_ROWS writes only some rows: true once it ran.
    bool fully_computed(const tsr_tensor * n) const {
        if (n->op == TSR_OP_SET_ROWS) return computed(n);
        const auto * p = static_cast<const unsigned char *>(n->data);
        for (size_t i = 0; i + 4 <= nbytes(n); i += 4) {
            if (p[i] == 0xff && p[i + 1] == 0xff && p[i + 2] == 0xff && p[i + 3] == 0xff) return false;
        }
        return true;
    }
};

TEST(GraphCompute, BitIdenticalFor1_2And7Threads) {
    block_graph bg;
    ASSERT_GT(bg.outputs.size(), 40u);
    thread_pool pool(7);
    std::vector<char> ref;
    for (int nth : {1, 2, 7}) {
        bg.poison();
        ASSERT_EQ(pool.compute(bg.g.view(), nth), TSR_STATUS_SUCCESS);
        for (const tsr_tensor * n : bg.outputs) {
            ASSERT_TRUE(bg.fully_computed(n)) << op_name(n->op) << " " << n->name;
        }
        if (ref.empty()) {
            ref = bg.snapshot();
        } else {
            EXPECT_TRUE(bg.snapshot() == ref) << nth << " threads differ from 1 thread";
        }
    }
    // The one-shot helper gives the same bytes.
    bg.poison();
    ASSERT_EQ(graph_compute(bg.g.view(), 2), TSR_STATUS_SUCCESS);
    EXPECT_TRUE(bg.snapshot() == ref);
}

TEST(GraphCompute, IndependentNodesShareABarrier) {
    block_graph bg;
    const std::vector<tsr_tensor *> & nodes = bg.outputs;
    const std::vector<char> sync = barriers_before(nodes);
    ASSERT_EQ(sync.size(), nodes.size());
    EXPECT_EQ(sync[0], 1) << "the first node waits";
    auto index_of = [&](const tsr_tensor * t) {
        return static_cast<size_t>(std::find(nodes.begin(), nodes.end(), t) - nodes.begin());
    };
    int shared = 0;
    for (const auto & qkv : bg.projections) {
        const size_t iq = index_of(qkv[0]);
        ASSERT_LT(iq + 2, nodes.size());
        ASSERT_EQ(nodes[iq + 1], qkv[1]);
        ASSERT_EQ(nodes[iq + 2], qkv[2]);
        EXPECT_EQ(sync[iq], 1) << "Q reads the norm computed just before";
        EXPECT_EQ(sync[iq + 1], 0) << "K is independent of Q";
        EXPECT_EQ(sync[iq + 2], 0) << "V is independent of Q and K";
        shared += 2;
    }
    EXPECT_EQ(shared, 4);
    // A node reading the previous node's output waits: every node that
    // reads an earlier computed node written since the last barrier, unless
    // both split the same rows statically (each thread reads its own rows).
    int chained = 0;
    for (size_t i = 1; i < nodes.size(); ++i) {
        if (sync[i] != 0) continue;
        for (size_t j = i; j-- > 0;) {
            for (const tsr_tensor * s : nodes[i]->src) {
                if (s != nodes[j]) continue;
                const bool own_rows = op_splits_rows(s->op) && op_splits_rows(nodes[i]->op) &&
                                      std::equal(s->ne, s->ne + TSR_MAX_DIMS, nodes[i]->ne);
                EXPECT_TRUE(own_rows) << "node " << i << " reads node " << j << " without a barrier";
                chained += own_rows ? 1 : 0;
            }
            if (sync[j] != 0) break;
        }
    }
    EXPECT_GT(chained, 0) << "the block's RMS_NORM and weight MUL follow each other without a barrier";
}

// Element-wise ops and RMS_NORM over the same rows follow each other without
// barriers (each thread computes the same rows of each, so it reads only
// what it wrote); a product, a broadcast source written since the barrier,
// or a different shape still gets one. Every thread count gives the bytes
// of one (under TSan, a missing barrier shows as a race).
TEST(GraphCompute, RowAlignedChainsSkipBarriers) {
    context ctx(data_ctx());
    std::mt19937 rng(9);
    tsr_tensor * x = ctx.new_tensor(TSR_TYPE_F32, {64, 5});
    tsr_tensor * y = ctx.new_tensor(TSR_TYPE_F32, {64, 5});
    tsr_tensor * wn = ctx.new_tensor(TSR_TYPE_F32, {64});
    tsr_tensor * wm = ctx.new_tensor(TSR_TYPE_F32, {64, 64});
    tsr_tensor * row = ctx.new_tensor(TSR_TYPE_F32, {64, 1});
    for (tsr_tensor * t : {x, y, wn, wm, row}) fill_uniform(t, rng);
    tsr_tensor * n1 = add(ctx, x, y);              // first node
    tsr_tensor * n2 = rms_norm(ctx, n1, 1e-5f);    // n1's rows
    tsr_tensor * n3 = mul(ctx, n2, wn);            // n2's rows, a leaf weight
    tsr_tensor * n4 = silu(ctx, n3);               // n3's rows
    tsr_tensor * n5 = mul(ctx, n4, n1);            // n4's and n1's rows
    tsr_tensor * n6 = mul_mat(ctx, wm, n5);        // a product: every row of n5
    tsr_tensor * n7 = scale(ctx, n6, 0.5f, 0.0f);  // a product's output
    tsr_tensor * n8 = scale(ctx, row, 2.0f, 1.0f); // independent of n7
    tsr_tensor * n9 = add(ctx, n7, n8);            // n8 broadcast over the rows
    tsr_tensor * n10 = rms_norm(ctx, reshape(ctx, n9, {32, 10}), 1e-5f); // other rows (through a view)
    // The graph walk passes the computing nodes only (not the view).
    EXPECT_EQ(barriers_before({n1, n2, n3, n4, n5, n6, n7, n8, n9, n10}), (std::vector<char>{1, 0, 0, 0, 0, 1, 1, 0, 1, 1}));
    expect_same_bytes_on_1_2_3_7_threads(n10, n10, 32);
}

// On several threads a small node of a cheap op is computed by thread 0
// alone (computed_by_thread_0), so a chain of them needs no barrier inside,
// even where one reads another through a view of another shape or writes
// over bytes another read; a node split between the threads still waits
// for them, and they for it. Bytes as on one thread for every thread count
// (TSan sees a missing barrier as a race).
TEST(GraphCompute, SmallNodesRunOnThread0WithoutBarriersBetweenThem) {
    context ctx(data_ctx());
    std::mt19937 rng(21);
    tsr_tensor * w = ctx.new_tensor(TSR_TYPE_F32, {64, 64});
    tsr_tensor * x = ctx.new_tensor(TSR_TYPE_F32, {64, 1});
    tsr_tensor * y = ctx.new_tensor(TSR_TYPE_F32, {32, 2});
    tsr_tensor * big = ctx.new_tensor(TSR_TYPE_F32, {4096});
    tsr_tensor * cache = ctx.new_tensor(TSR_TYPE_F16, {64, 4096}); // 512 KiB: only the rows stored count
    tsr_tensor * idx = ctx.new_tensor(TSR_TYPE_I32, {1});
    for (tsr_tensor * t : {w, x, y, big}) fill_uniform(t, rng);
    set_i32(idx, 7, 0);
    tsr_tensor * p = mul_mat(ctx, w, x);                          // split between the threads
    tsr_tensor * s1 = scale(ctx, p, 0.5f, 0.25f);                 // reads p: waits
    tsr_tensor * s2 = silu(ctx, reshape(ctx, s1, {32, 2}));       // s1 through a view of another shape
    tsr_tensor * s3 = add(ctx, s2, y);                            // written over p, which s1 read
    s3->data = p->data;                                           // (before the views of s3 are made)
    tsr_tensor * st = set_rows(ctx, cache, reshape(ctx, s3, {64, 1}), idx); // into a large cache
    tsr_tensor * q = mul_mat(ctx, w, reshape(ctx, s3, {64, 1}));  // split again: waits
    tsr_tensor * b = scale(ctx, big, 2.0f, 0.0f);                 // 16 KiB: split
    EXPECT_FALSE(computed_by_thread_0(p));
    EXPECT_TRUE(computed_by_thread_0(s1));
    EXPECT_TRUE(computed_by_thread_0(s2));
    EXPECT_TRUE(computed_by_thread_0(st)) << "64 floats stored, whatever the cache's size";
    EXPECT_FALSE(computed_by_thread_0(b)) << nbytes(b) << " bytes > " << k_thread_0_max_bytes;
    const std::vector<tsr_tensor *> nodes{p, s1, s2, s3, st, q};
    const std::vector<char> serial{0, 1, 1, 1, 1, 0};
    EXPECT_EQ(barriers_before(nodes, serial), (std::vector<char>{1, 1, 0, 0, 0, 1}));
    EXPECT_EQ(barriers_before(nodes), (std::vector<char>{1, 1, 1, 0, 1, 0})) << "split: s2 reads s1 through another shape, st reads s3";
    graph g;
    g.build_forward(st);
    g.build_forward(q);
    for (int nth : {1, 2}) {
        graph_analysis a;
        ASSERT_EQ(analyze_graph(g.view(), nth, false, a), TSR_STATUS_SUCCESS);
        ASSERT_EQ(a.nodes.size(), 6u);
        EXPECT_EQ(a.serial, (nth == 1 ? std::vector<char>(6, 0) : serial)) << nth << " threads";
    }
    thread_pool pool(7);
    std::vector<char> ref_q, ref_row;
    const size_t row = static_cast<size_t>(cache->nb[1]);
    for (int nth : {1, 2, 3, 7}) {
        std::memset(cache->data, 0, nbytes(cache));
        std::memset(q->data, 0xff, nbytes(q));
        ASSERT_EQ(pool.compute(g.view(), nth), TSR_STATUS_SUCCESS);
        const std::vector<char> got_q(static_cast<char *>(q->data), static_cast<char *>(q->data) + nbytes(q));
        const std::vector<char> got_row(static_cast<char *>(cache->data) + 7 * row, static_cast<char *>(cache->data) + 8 * row);
        if (ref_q.empty()) {
            ref_q = got_q;
            ref_row = got_row;
            // s3 = silu(0.5 p + 0.25) + y elementwise; q = w s3 (one thread, double reference).
            std::vector<double> s(64);
            for (int64_t i = 0; i < 64; ++i) {
                double pi = 0;
                for (int64_t k = 0; k < 64; ++k) pi += static_cast<double>(get(w, k, i)) * get(x, k, 0);
                const double v = 0.5 * pi + 0.25;
                s[static_cast<size_t>(i)] = v / (1.0 + std::exp(-v)) + get(y, i % 32, i / 32);
            }
            for (int64_t i = 0; i < 64; ++i) {
                double qi = 0;
                for (int64_t k = 0; k < 64; ++k) qi += static_cast<double>(get(w, k, i)) * s[static_cast<size_t>(k)];
                EXPECT_NEAR(get(q, i, 0), qi, 1e-3 * (1.0 + std::abs(qi))) << i;
                EXPECT_NEAR(get(cache, i, 7), s[static_cast<size_t>(i)], 2e-3 * (1.0 + std::abs(s[static_cast<size_t>(i)]))) << i;
            }
        } else {
            EXPECT_EQ(got_q, ref_q) << nth << " threads differ from 1";
            EXPECT_EQ(got_row, ref_row) << nth << " threads differ from 1";
        }
    }
}

// Independent nodes share a barrier, but at most k_max_nodes_between_barriers
// of them: finding the barriers stays linear in the graph's size. The
// values are those of each node alone on every thread count.
TEST(GraphCompute, ABarrierAtLeastEveryFewDozenNodes) {
    context ctx(data_ctx(1024));
    std::mt19937 rng(3);
    constexpr size_t n = 200;
    std::vector<tsr_tensor *> nodes;
    std::vector<tsr_tensor *> inputs;
    for (size_t i = 0; i < n; ++i) {
        tsr_tensor * x = ctx.new_tensor(TSR_TYPE_F32, {8, 2});
        fill_uniform(x, rng);
        inputs.push_back(x);
        nodes.push_back(scale(ctx, x, 2.0f, static_cast<float>(i)));
    }
    std::vector<char> want(n, 0);
    for (size_t i = 0; i < n; i += k_max_nodes_between_barriers) want[i] = 1;
    EXPECT_EQ(barriers_before(nodes), want);
    EXPECT_EQ(std::count(want.begin(), want.end(), 1), 4); // nodes 0, 64, 128 and 192
    graph g;
    for (tsr_tensor * t : nodes) g.build_forward(t);
    thread_pool pool(3);
    for (int nth : {1, 2, 3}) {
        for (tsr_tensor * t : nodes) std::memset(t->data, 0xff, nbytes(t));
        ASSERT_EQ(pool.compute(g.view(), nth), TSR_STATUS_SUCCESS);
        for (size_t i = 0; i < n; ++i) {
            for (int64_t r = 0; r < 2; ++r) {
                for (int64_t c = 0; c < 8; ++c) {
                    ASSERT_EQ(get(nodes[i], c, r), static_cast<float>(2.0 * get(inputs[i], c, r) + static_cast<double>(i))) << nth << " threads, node " << i;
                }
            }
        }
    }
}

TEST(GraphCompute, ReusedMemoryGetsABarrier) {
    // Three nodes on separate memory, then one whose output lands where the
    // first one read (as the graph allocator reuses a dead tensor's bytes):
    // it must wait until no thread still reads there.
    context ctx(data_ctx());
    std::mt19937 rng(5);
    tsr_tensor * a = ctx.new_tensor(TSR_TYPE_F32, {64, 4});
    tsr_tensor * b = ctx.new_tensor(TSR_TYPE_F32, {64, 4});
    tsr_tensor * arena = ctx.new_tensor(TSR_TYPE_F32, {64 * 5}); // a, and room for s3 half a row past it
    a->data = arena->data;
    fill_uniform(a, rng);
    fill_uniform(b, rng);
    tsr_tensor * s1 = scale(ctx, a, 2.0f, 0.0f);  // reads a
    tsr_tensor * s2 = scale(ctx, b, 3.0f, 0.0f);  // independent of s1
    tsr_tensor * s3 = scale(ctx, b, 4.0f, 0.0f);  // independent, but written over a
    tsr_tensor * s4 = add(ctx, s1, s2);           // reads s1 and s2, done before s3's barrier
    // (half a row on: a thread's rows of s3 lie on rows of a other threads read)
    s3->data = static_cast<float *>(a->data) + 32;
    const std::vector<char> sync = barriers_before({s1, s2, s3, s4});
    EXPECT_EQ(sync, (std::vector<char>{1, 0, 1, 0})) << "s4 reads what was written before the barrier at s3";
    // Exactly over a: each thread overwrites the rows of a it read itself
    // (OverwritingWhatTheSameThreadReadNeedsNoBarrier).
    s3->data = a->data;
    EXPECT_EQ(barriers_before({s1, s2, s3, s4}), (std::vector<char>{1, 0, 0, 0}));
    // Two nodes writing the same bytes: the second waits.
    s3->data = s2->data;
    EXPECT_EQ(barriers_before({s1, s2, s3}), (std::vector<char>{1, 0, 1}));
}

// A row-split node may write over bytes a row-split node since the last
// barrier read when each thread overwrites only what it read itself: both
// one row (thread 0 computes all of each, wherever the bytes lie, as the
// graph allocator puts a decoded token's MUL over part of the gate its
// SILU read), or the same rows read row for row and written to the same
// address. Partly overlapping rows of a larger node, or a node that does
// not split rows, still wait. The bytes are those of one thread for every
// thread count (TSan sees a missing barrier as a race).
TEST(GraphCompute, OverwritingWhatTheSameThreadReadNeedsNoBarrier) {
    context ctx(data_ctx());
    std::mt19937 rng(11);
    // rows: 1 (a decoded token) or 3; `shift` floats between the gate and the
    // product written over it, so 0 = the same address.
    auto check = [&](int64_t rows, int64_t shift, bool splits_rows, char want_sync) {
        SCOPED_TRACE(::testing::Message() << rows << " rows, shift " << shift << (splits_rows ? "" : ", a SCALE of a product"));
        tsr_tensor * w = ctx.new_tensor(TSR_TYPE_F32, {64, 64});
        tsr_tensor * x = ctx.new_tensor(TSR_TYPE_F32, {64, rows});
        tsr_tensor * up = ctx.new_tensor(TSR_TYPE_F32, {64, rows});
        tsr_tensor * arena = ctx.new_tensor(TSR_TYPE_F32, {64 * rows + 64}); // the gate and what lands on it
        for (tsr_tensor * t : {w, x, up}) fill_uniform(t, rng);
        tsr_tensor * gate = mul_mat(ctx, w, x);     // a product (barrier after it)
        tsr_tensor * act = silu(ctx, gate);         // reads the gate, rows split
        tsr_tensor * out = splits_rows ? mul(ctx, act, up) : mul_mat(ctx, w, act); // written over the gate
        gate->data = arena->data;
        out->data = static_cast<float *>(arena->data) + shift;
        EXPECT_EQ(barriers_before({gate, act, out}), (std::vector<char>{1, 1, want_sync}));
        expect_same_bytes_on_1_2_3_7_threads(out, arena, 64);
    };
    check(1, 32, true, 0);   // one row, half over the gate: thread 0 read and writes it all
    check(1, 0, true, 0);
    check(3, 0, true, 0);    // the same rows at the same address
    check(3, 32, true, 1);   // rows shifted half a row: a thread's row lies on two read by others
    check(1, 32, false, 1);  // a product reads every row: no row split
}

// Float GEMMs pack their activations into scratch shared by the threads
// (a prepare call, then a barrier). Products over the same activations in
// the same layout (a layer's q, k and v; gate and up) pack them once: the
// later ones reuse the scratch, unless a node since the packing wrote the
// activations or packed others. The results equal a double-precision
// product on every thread count.
TEST(GraphCompute, FloatProductsOfTheSameActivationsPackThemOnce) {
    context ctx(data_ctx());
    std::mt19937 rng(21);
    constexpr int64_t K = 96, M = 40, N = 24;
    tsr_tensor * w[5];
    for (tsr_tensor *& t : w) {
        t = ctx.new_tensor(TSR_TYPE_F16, {K, M});
        fill_weights(t, rng);
    }
    tsr_tensor * w32 = ctx.new_tensor(TSR_TYPE_F32, {K, M});
    tsr_tensor * h = ctx.new_tensor(TSR_TYPE_F32, {K, N});
    tsr_tensor * other = ctx.new_tensor(TSR_TYPE_F32, {K, N});
    for (tsr_tensor * t : {w32, h, other}) fill_uniform(t, rng);
    tsr_tensor * q = mul_mat(ctx, w[0], h);
    tsr_tensor * k = mul_mat(ctx, w[1], h);      // same h: reuses q's packing
    tsr_tensor * v = mul_mat(ctx, w32, h);       // F32 weights: reuses it where they pack h alike (below)
    tsr_tensor * o = mul_mat(ctx, w[2], other);  // other activations: packs
    tsr_tensor * g = mul_mat(ctx, w[3], h);      // h again, but o packed since: packs
    tsr_tensor * u = mul_mat(ctx, w[4], h);      // reuses g's
    tsr_tensor * sc = scale(ctx, other, 0.5f, 1.0f); // written over h (as a reused buffer)
    tsr_tensor * u2 = mul_mat(ctx, w[4], h);     // h was written since: packs
    const std::vector<tsr_tensor *> nodes = {q, k, v, o, g, u, sc, u2};
    std::vector<char> has_shared;
    for (tsr_tensor * n : nodes) {
        node_scratch need;
        ASSERT_TRUE(checked_scratch(n, need));
        has_shared.push_back(need.shared > 0 ? 1 : 0);
    }
    if (has_shared[0] == 0) GTEST_SKIP() << "this build has no float GEMM with shared scratch";
    EXPECT_EQ(has_shared, (std::vector<char>{1, 1, 1, 1, 1, 1, 0, 1}));
    // The scale's output lies on h only from here on (before, its bytes were
    // its own): the first call sees no write to h.
    // On AVX-512 builds with cpu_tuning::gemm_f32_rows the F32 product
    // packs h in 16-column tiles of its own (gemm_f_prepared_layout 4), so
    // it packs again.
    const char v_reuses = gemm_f32_rows_enabled() ? 0 : 1;
    EXPECT_EQ(prepared_before(nodes, has_shared), (std::vector<char>{0, 1, v_reuses, 0, 0, 1, 0, 1}));
    sc->data = h->data;
    EXPECT_EQ(prepared_before(nodes, has_shared), (std::vector<char>{0, 1, v_reuses, 0, 0, 1, 0, 0}));
    EXPECT_EQ(prepared_before({q, k}, {1, 0}), (std::vector<char>{0, 0})) << "k computes without shared scratch";

    // Expected products from h as it is before the scale overwrites it.
    const std::vector<std::pair<tsr_tensor *, tsr_tensor *>> products = {
        {q, w[0]}, {k, w[1]}, {v, w32}, {o, w[2]}, {g, w[3]}, {u, w[4]}};
    std::vector<std::vector<double>> want;
    for (const auto & [out, wt] : products) {
        const tsr_tensor * b = out->src[1];
        std::vector<double> r(static_cast<size_t>(M * N));
        for (int64_t n = 0; n < N; ++n) {
            for (int64_t m = 0; m < M; ++m) {
                double acc = 0;
                for (int64_t i = 0; i < K; ++i) acc += get(wt, i, m) * get(b, i, n);
                r[static_cast<size_t>(n * M + m)] = acc;
            }
        }
        want.push_back(r);
    }
    std::vector<float> h_copy(static_cast<float *>(h->data), static_cast<float *>(h->data) + K * N);
    graph gr;
    for (tsr_tensor * n : nodes) gr.build_forward(n);
    thread_pool pool(7);
    for (int nth : {1, 2, 3, 7}) {
        SCOPED_TRACE(::testing::Message() << nth << " threads");
        std::memcpy(h->data, h_copy.data(), h_copy.size() * sizeof(float));
        ASSERT_EQ(pool.compute(gr.view(), nth), TSR_STATUS_SUCCESS);
        for (size_t p = 0; p < products.size(); ++p) {
            for (int64_t n = 0; n < N; ++n) {
                for (int64_t m = 0; m < M; ++m) {
                    const double e = want[p][static_cast<size_t>(n * M + m)];
                    ASSERT_NEAR(get(products[p].first, m, n), e, 1e-4 * (1 + std::abs(e))) << "product " << p << " at " << m << "," << n;
                }
            }
        }
        // u2 packed h as the scale left it.
        for (int64_t n = 0; n < N; ++n) {
            for (int64_t m = 0; m < M; ++m) {
                double acc = 0;
                for (int64_t i = 0; i < K; ++i) acc += get(w[4], i, m) * (0.5 * get(other, i, n) + 1.0);
                ASSERT_NEAR(get(u2, m, n), acc, 1e-4 * (1 + std::abs(acc))) << m << "," << n;
            }
        }
    }
}

// Where the K-quant GEMM quantizes its activations once for all threads
// (shared scratch, a prepare call), products over the same activations
// with the same block-sum layout (Q4_K and Q5_K alike, Q6_K its own) take
// the columns the last one left, unless a node since wrote the
// activations or quantized others; every element still has the bits of
// dot_k_quant with the reference quantizer's columns, on any thread count.
TEST(MulMatK, ProductsOfTheSameActivationsQuantizeThemOnce) {
    context ctx(data_ctx());
    std::mt19937 rng(23);
    constexpr int64_t K = 512, M = 24, N = 21;
    const int32_t types[] = {TSR_TYPE_Q4_K, TSR_TYPE_Q4_K, TSR_TYPE_Q6_K, TSR_TYPE_Q6_K, TSR_TYPE_Q5_K, TSR_TYPE_Q4_K, TSR_TYPE_Q4_K};
    tsr_tensor * w[7];
    for (int i = 0; i < 7; ++i) {
        w[i] = ctx.new_tensor(static_cast<type>(types[i]), {K, M});
        fill_weights(w[i], rng);
    }
    tsr_tensor * h = ctx.new_tensor(TSR_TYPE_F32, {K, N});
    tsr_tensor * other = ctx.new_tensor(TSR_TYPE_F32, {K, N});
    fill_uniform(h, rng);
    fill_uniform(other, rng);
    tsr_tensor * q = mul_mat(ctx, w[0], h);
    tsr_tensor * k = mul_mat(ctx, w[1], h);      // reuses q's columns
    tsr_tensor * v = mul_mat(ctx, w[2], h);      // Q6_K pair words: quantizes (not on AMX)
    tsr_tensor * v2 = mul_mat(ctx, w[3], h);     // reuses v's
    tsr_tensor * g = mul_mat(ctx, w[4], h);      // Q5_K: the Q4_K layout again, but v's since: quantizes (not on AMX)
    tsr_tensor * u = mul_mat(ctx, w[5], h);      // Q4_K after Q5_K: reuses g's
    tsr_tensor * o = mul_mat(ctx, w[6], other);  // other activations: quantizes
    tsr_tensor * sc = scale(ctx, h, 0.5f, 1.0f);
    tsr_tensor * u2 = mul_mat(ctx, w[5], other); // reuses o's, unless the scale writes over other (below)
    const std::vector<tsr_tensor *> nodes = {q, k, v, v2, g, u, o, sc, u2};
    std::vector<char> has_shared;
    for (tsr_tensor * n : nodes) {
        node_scratch need;
        ASSERT_TRUE(checked_scratch(n, need));
        has_shared.push_back(need.shared > 0 ? 1 : 0);
    }
    if (has_shared[0] == 0) GTEST_SKIP() << "this build has no K-quant GEMM with shared scratch";
    EXPECT_EQ(has_shared, (std::vector<char>{1, 1, 1, 1, 1, 1, 1, 0, 1}));
    // On AMX one layout serves all three types (its Q6_K kernel reads no
    // block-sum pair words): v and g take q's columns too.
    const char amx = gemm_k_prepared_layout(mm_dims_of(q)) == gemm_k_prepared_layout(mm_dims_of(v)) ? 1 : 0;
    EXPECT_EQ(prepared_before(nodes, has_shared), (std::vector<char>{0, 1, amx, 1, amx, 1, 0, 0, 1}));
    sc->data = other->data; // the scale (of h) now writes over other, which u2 reads
    EXPECT_EQ(prepared_before(nodes, has_shared), (std::vector<char>{0, 1, amx, 1, amx, 1, 0, 0, 0}));

    // Expected bits; u2 reads other as the scale of h leaves it.
    const std::vector<std::pair<tsr_tensor *, tsr_tensor *>> products = {{q, w[0]}, {k, w[1]}, {v, w[2]}, {v2, w[3]},
                                                                         {g, w[4]}, {u, w[5]}, {o, w[6]}, {u2, w[5]}};
    std::vector<std::vector<float>> want;
    for (const auto & [out, wt] : products) {
        std::vector<float> r(static_cast<size_t>(M * N));
        for (int64_t n = 0; n < N; ++n) {
            std::vector<float> x(static_cast<size_t>(K));
            for (int64_t e = 0; e < K; ++e) x[static_cast<size_t>(e)] = static_cast<float>(get(out == u2 ? h : out->src[1], e, n));
            if (out == u2) {
                for (float & e : x) e = 0.5f * e + 1.0f;
            }
            std::vector<block_q8_k> xq(K / 256);
            quantize_row_q8_k_ref(x.data(), xq.data(), K);
            for (int64_t m = 0; m < M; ++m) {
                r[static_cast<size_t>(n * M + m)] =
                    dot_k_quant(wt->type, static_cast<const char *>(wt->data) + m * wt->nb[1], xq.data(), K / 256);
            }
        }
        want.push_back(r);
    }
    const std::vector<float> other_copy(static_cast<float *>(other->data), static_cast<float *>(other->data) + K * N);
    graph gr;
    for (tsr_tensor * n : nodes) gr.build_forward(n);
    thread_pool pool(7);
    for (int nth : {1, 2, 3, 7}) {
        SCOPED_TRACE(::testing::Message() << nth << " threads");
        std::memcpy(other->data, other_copy.data(), other_copy.size() * sizeof(float));
        ASSERT_EQ(pool.compute(gr.view(), nth), TSR_STATUS_SUCCESS);
        for (size_t p = 0; p < products.size(); ++p) {
            ASSERT_EQ(std::memcmp(products[p].first->data, want[p].data(), want[p].size() * sizeof(float)), 0) << "product " << p;
        }
    }
}

// The read-ahead of attention's keys and values: each FLASH_ATTN_EXT node's
// K and V views (byte ranges of n_kv rows of 384 bytes: 3 KV heads of 64
// F16) in equal shares of whole lines over the nodes since the previous
// one, capped at k_attn_prefetch_bytes; an attention right after another
// reads its own ahead.
TEST(GraphCompute, AttentionKeysAndValuesAreReadAheadOverTheNodesBefore) {
    context ctx(data_ctx());
    std::mt19937 rng(9);
    constexpr int64_t D = 64, H = 9, H_kv = 3;
    const auto attention = [&](tsr_tensor * kc, tsr_tensor * vc, int64_t n_kv) {
        tsr_tensor * q = ctx.new_tensor(TSR_TYPE_F32, {D, H, 1});
        fill_uniform(q, rng);
        tsr_tensor * mask = ctx.new_tensor(TSR_TYPE_F32, {n_kv, 1});
        std::memset(mask->data, 0, nbytes(mask)); // every key visible
        const uint64_t row = kc->nb[1], head = D * kc->nb[0];
        return flash_attn_ext(ctx, permute(ctx, q, 0, 2, 1, 3), view_3d(ctx, kc, D, n_kv, H_kv, row, head, 0),
                              view_3d(ctx, vc, D, n_kv, H_kv, row, head, 0), mask, 0.125f);
    };
    tsr_tensor * k1 = ctx.new_tensor(TSR_TYPE_F16, {D * H_kv, 300});
    tsr_tensor * v1 = ctx.new_tensor(TSR_TYPE_F16, {D * H_kv, 300});
    tsr_tensor * k2 = ctx.new_tensor(TSR_TYPE_F16, {D * H_kv, 1000}); // 384000 bytes: more than the cap
    tsr_tensor * v2 = ctx.new_tensor(TSR_TYPE_F16, {D * H_kv, 1000});
    tsr_tensor * x = ctx.new_tensor(TSR_TYPE_F32, {64, 4});
    fill_uniform(x, rng);
    tsr_tensor * n0 = rms_norm(ctx, x, 1e-5f);
    tsr_tensor * n1 = scale(ctx, n0, 2.0f, 0.0f);
    tsr_tensor * n2 = scale(ctx, n1, 2.0f, 0.0f);
    tsr_tensor * fa1 = attention(k1, v1, 256); // 256 of the 300 rows: 98304 bytes, 1536 lines
    tsr_tensor * n4 = scale(ctx, n2, 2.0f, 0.0f);
    tsr_tensor * fa2 = attention(k2, v2, 1000);
    tsr_tensor * fa3 = attention(k1, v1, 5); // 1920 bytes, 30 lines
    const auto plan = attention_prefetch({n0, n1, n2, fa1, n4, fa2, fa3}, false);
    ASSERT_EQ(plan.size(), 7u);
    const auto at = [](const tsr_tensor * t, size_t off) { return reinterpret_cast<uintptr_t>(t->data) + off; };
    for (int kv = 0; kv < 2; ++kv) {
        SCOPED_TRACE(kv == 0 ? "keys" : "values");
        const tsr_tensor * c1 = kv == 0 ? k1 : v1;
        const tsr_tensor * c2 = kv == 0 ? k2 : v2;
        ASSERT_EQ(at(c1, 0) % 64, 0u); // data_ctx aligns tensors to 64 bytes
        // fa1: 1536 lines over n0, n1, n2, 512 each
        EXPECT_EQ(plan[0][kv], (byte_span{at(c1, 0), at(c1, 32768)}));
        EXPECT_EQ(plan[1][kv], (byte_span{at(c1, 32768), at(c1, 65536)}));
        EXPECT_EQ(plan[2][kv], (byte_span{at(c1, 65536), at(c1, 98304)}));
        EXPECT_EQ(plan[3][kv], byte_span{}) << "an attention reads nothing ahead when nodes came before it";
        // fa2: capped, all on n4
        EXPECT_EQ(plan[4][kv], (byte_span{at(c2, 0), at(c2, k_attn_prefetch_bytes)}));
        EXPECT_EQ(plan[5][kv], byte_span{});
        // fa3, right after fa2: on itself
        EXPECT_EQ(plan[6][kv], (byte_span{at(c1, 0), at(c1, 1920)}));
    }
    // A smoke test: the graph computes with the read-ahead, on 1 and 3
    // threads alike (prefetching cannot change a result or fault).
    graph g;
    g.build_forward(fa3);
    for (tsr_tensor * c : {k1, v1}) fill_weights(c, rng);
    std::vector<char> ref;
    for (int nth : {1, 3}) {
        ASSERT_EQ(graph_compute(g.view(), nth), TSR_STATUS_SUCCESS);
        std::vector<char> got(static_cast<char *>(fa3->data), static_cast<char *>(fa3->data) + nbytes(fa3));
        if (ref.empty()) {
            ref = got;
            for (int64_t i = 0; i < D * H; ++i) ASSERT_TRUE(std::isfinite(get(fa3, i % D, i / D))) << i;
        }
        EXPECT_EQ(got, ref);
    }
}

// Shares that do not divide evenly, a view starting inside a line, and an
// attention without V (only the plan reads it): the keys of one KV head
// of 64 F16 (128-byte rows), from byte 100 of the cache for 1 key, cover
// lines [64, 128), [128, 192) and [192, 228) of it: one per node.
TEST(GraphCompute, AttentionReadAheadSharesWholeLinesFromTheFirst) {
    context ctx(data_ctx());
    tsr_tensor * kc = ctx.new_tensor(TSR_TYPE_F16, {64, 4});
    tsr_tensor * q = ctx.new_tensor(TSR_TYPE_F32, {64, 1, 1});
    tsr_tensor * mask = ctx.new_tensor(TSR_TYPE_F32, {1, 1});
    tsr_tensor * k = view_3d(ctx, kc, 64, 1, 1, kc->nb[1], 128, 100);
    tsr_tensor * fa = flash_attn_ext(ctx, permute(ctx, q, 0, 2, 1, 3), k, k, mask, 0.125f);
    fa->src[2] = nullptr;
    tsr_tensor * x = ctx.new_tensor(TSR_TYPE_F32, {8, 1});
    tsr_tensor * n0 = scale(ctx, x, 1.0f, 0.0f);
    tsr_tensor * n1 = scale(ctx, n0, 1.0f, 0.0f);
    tsr_tensor * n2 = scale(ctx, n1, 1.0f, 0.0f);
    tsr_tensor * n3 = scale(ctx, n2, 1.0f, 0.0f);
    const auto base = reinterpret_cast<uintptr_t>(kc->data);
    ASSERT_EQ(base % 64, 0u);
    const auto plan = attention_prefetch({n0, n1, n2, fa, n3}, false);
    ASSERT_EQ(plan.size(), 5u);
    EXPECT_EQ(plan[0][0], (byte_span{base + 64, base + 128}));
    EXPECT_EQ(plan[1][0], (byte_span{base + 128, base + 192}));
    EXPECT_EQ(plan[2][0], (byte_span{base + 192, base + 228}));
    for (size_t i = 0; i < plan.size(); ++i) EXPECT_EQ(plan[i][1], byte_span{}) << "no V, node " << i;
    EXPECT_EQ(plan[3][0], byte_span{});
    EXPECT_EQ(plan[4][0], byte_span{}) << "nodes after the last attention read nothing ahead";
    // Four nodes for the same three lines: the last gets none.
    const auto four = attention_prefetch({n0, n1, n2, n3, fa}, false);
    EXPECT_EQ(four[2][0], (byte_span{base + 192, base + 228}));
    EXPECT_EQ(four[3][0], byte_span{});
    // A graph without attention reads nothing ahead.
    for (const auto & spans : attention_prefetch({n0, n1}, false)) EXPECT_EQ(spans, (std::array<byte_span, 2>{}));
    EXPECT_TRUE(attention_prefetch({}, false).empty());
}

// visible_only: a leaf mask's visible keys bound the read-ahead (a decoded
// token's view is the cache rounded up, its masked tail never read). Keys
// of 384-byte rows (3 KV heads of 64 F16): 40 visible keys are 15360
// bytes, 240 lines, 80 for each of the three nodes before the attention.
TEST(GraphCompute, AttentionReadAheadStopsAtTheLastVisibleKey) {
    context ctx(data_ctx());
    constexpr int64_t D = 64, H = 9, H_kv = 3, n_kv = 256;
    constexpr float ninf = -std::numeric_limits<float>::infinity();
    tsr_tensor * kc = ctx.new_tensor(TSR_TYPE_F16, {D * H_kv, 300});
    tsr_tensor * vc = ctx.new_tensor(TSR_TYPE_F16, {D * H_kv, 300});
    const auto attention = [&](tsr_tensor * mask) {
        tsr_tensor * q = ctx.new_tensor(TSR_TYPE_F32, {D, H, mask->ne[1]});
        const uint64_t row = kc->nb[1], head = D * kc->nb[0];
        return flash_attn_ext(ctx, permute(ctx, q, 0, 2, 1, 3), view_3d(ctx, kc, D, n_kv, H_kv, row, head, 0),
                              view_3d(ctx, vc, D, n_kv, H_kv, row, head, 0), mask, 0.125f);
    };
    // Row i sees keys [0, ends[i]).
    const auto causal = [&](std::initializer_list<int64_t> ends) {
        tsr_tensor * mask = ctx.new_tensor(TSR_TYPE_F32, {n_kv, static_cast<int64_t>(ends.size())});
        int64_t i1 = 0;
        for (int64_t end : ends) {
            for (int64_t i0 = 0; i0 < n_kv; ++i0) set_f32(mask, i0 < end ? 0.0f : ninf, i0, i1);
            ++i1;
        }
        return mask;
    };
    tsr_tensor * x = ctx.new_tensor(TSR_TYPE_F32, {64, 4});
    tsr_tensor * n0 = scale(ctx, x, 1.0f, 0.0f);
    tsr_tensor * n1 = scale(ctx, n0, 1.0f, 0.0f);
    tsr_tensor * n2 = scale(ctx, n1, 1.0f, 0.0f);
    const auto at = [](const tsr_tensor * t, size_t off) { return reinterpret_cast<uintptr_t>(t->data) + off; };
    const auto check = [&](tsr_tensor * fa, size_t line_bytes_each, const char * what) {
        SCOPED_TRACE(what);
        const auto plan = attention_prefetch({n0, n1, n2, fa}, true);
        for (int kv = 0; kv < 2; ++kv) {
            const tsr_tensor * c = kv == 0 ? kc : vc;
            for (size_t j = 0; j < 3; ++j) {
                const byte_span want = line_bytes_each == 0 ? byte_span{}
                                                            : byte_span{at(c, j * line_bytes_each), at(c, (j + 1) * line_bytes_each)};
                EXPECT_EQ(plan[j][kv], want) << (kv == 0 ? "keys" : "values") << ", node " << j;
            }
            EXPECT_EQ(plan[3][kv], byte_span{});
        }
    };
    tsr_tensor * one_row = attention(causal({40}));
    check(one_row, 5120, "40 keys visible");
    // Without visible_only the whole view: 256 rows, 1536 lines, 512 a node.
    EXPECT_EQ(attention_prefetch({n0, n1, n2, one_row}, false)[0][0], (byte_span{at(kc, 0), at(kc, 32768)}));
    // The row that sees the most counts (two query rows: 10 and 40 keys).
    check(attention(causal({10, 40})), 5120, "rows seeing 10 and 40 keys");
    check(attention(causal({40, 10})), 5120, "rows seeing 40 and 10 keys");
    // A mask hiding every key: nothing to read ahead.
    check(attention(causal({0})), 0, "every key masked");
    // Every key visible: the whole view, as without visible_only.
    check(attention(causal({n_kv})), 32768, "every key visible");
    // A mask the graph computes (not a leaf) has no values before the
    // compute: the whole view.
    tsr_tensor * computed = scale(ctx, causal({40}), 1.0f, 0.0f);
    check(attention(computed), 32768, "a computed mask");
    // Two attentions, each with its own mask, the second right after the
    // first (it reads its own ahead): the second's 4 keys (1536 bytes, 24
    // lines) are not the first's 40.
    tsr_tensor * fa_a = attention(causal({40}));
    tsr_tensor * fa_b = attention(causal({4}));
    const auto two = attention_prefetch({n0, n1, n2, fa_a, fa_b}, true);
    EXPECT_EQ(two[2][0], (byte_span{at(kc, 10240), at(kc, 15360)}));
    EXPECT_EQ(two[4][0], (byte_span{at(kc, 0), at(kc, 1536)}));
    EXPECT_EQ(two[4][1], (byte_span{at(vc, 0), at(vc, 1536)}));
}

// Every item once, on 2, 3 and 8 threads; with the slots side by side or
// slot_stride apart (the graph walk's layout: a row of slots per thread),
// the slots between them untouched.
TEST(WorkQueue, EveryItemIsTakenExactlyOnce) {
    for (int nth : {2, 3, 8}) {
        for (int64_t n : {0, 1, 5, 1000}) {
            for (int64_t chunk : {1, 7}) {
              for (size_t stride : {size_t{1}, size_t{3}}) {
                SCOPED_TRACE(testing::Message() << nth << " threads, " << n << " items, chunk " << chunk << ", stride " << stride);
                std::unique_ptr<work_slot[]> slots(new work_slot[static_cast<size_t>(nth) * stride]);
                std::vector<std::atomic<int>> taken(static_cast<size_t>(n));
                std::vector<std::thread> threads;
                for (int ith = 0; ith < nth; ++ith) {
                    threads.emplace_back([&, ith] {
                        compute_params p;
                        p.ith = ith;
                        p.nth = nth;
                        p.slots = slots.get();
                        p.slot_stride = stride;
                        work_queue q(p, n, chunk);
                        for (item_range r{}; q.next(r);) {
                            for (int64_t i = r.begin; i < r.end; ++i) taken[static_cast<size_t>(i)].fetch_add(1);
                        }
                    });
                }
                for (std::thread & t : threads) t.join();
                for (int64_t i = 0; i < n; ++i) ASSERT_EQ(taken[static_cast<size_t>(i)].load(), 1) << "item " << i;
                for (size_t s = 0; s < static_cast<size_t>(nth) * stride; ++s) {
                    if (s % stride != 0) EXPECT_EQ(slots[s].range.load(), 0u) << "slot " << s << " is no thread's";
                }
              }
            }
        }
    }
}

TEST(WorkQueue, AFinishedThreadTakesFromASlowOne) {
    // Thread 0 takes one item of its half and then waits until thread 1
    // has either taken an item of thread 0's half (stolen it) or run out of
    // items: without stealing the test fails instead of hanging, and no
    // timing is involved.
    constexpr int64_t n = 64;
    std::unique_ptr<work_slot[]> slots(new work_slot[2]);
    std::atomic<int64_t> count[2] = {0, 0};
    std::atomic<bool> stole{false}, fast_done{false};
    std::vector<std::atomic<int>> taken(n);
    auto body = [&](int ith) {
        compute_params p;
        p.ith = ith;
        p.nth = 2;
        p.slots = slots.get();
        work_queue q(p, n, 1);
        for (item_range r{}; q.next(r);) {
            for (int64_t i = r.begin; i < r.end; ++i) {
                taken[static_cast<size_t>(i)].fetch_add(1);
                count[ith].fetch_add(1);
                if (ith == 1 && i < n / 2) stole.store(true);
            }
            if (ith == 0) {
                while (!stole.load() && !fast_done.load()) std::this_thread::yield();
            }
        }
        if (ith == 1) fast_done.store(true);
    };
    std::thread slow(body, 0), fast(body, 1);
    slow.join();
    fast.join();
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(taken[static_cast<size_t>(i)].load(), 1) << "item " << i;
    EXPECT_TRUE(stole.load()) << "the finished thread took nothing from the slow one";
    EXPECT_LT(count[0].load(), n / 2);
    EXPECT_GT(count[1].load(), n / 2);
    // Without shared slots each thread takes exactly its half.
    compute_params p;
    p.ith = 1;
    p.nth = 2;
    work_queue q(p, n, 1);
    item_range r{};
    ASSERT_TRUE(q.next(r));
    EXPECT_EQ(r.begin, n / 2);
    EXPECT_EQ(r.end, n);
    EXPECT_FALSE(q.next(r));
}

TEST(WorkQueue, TheOwnerTakesHalfOfWhatIsLeftAndAThiefAChunk) {
    // One thread of two, alone: it takes its own share [0, 50) half of what
    // is left at a time (at least the chunk of 4), then the other thread's
    // share [50, 100) from the back, 4 items at a time. Fewer takes means
    // fewer locked instructions (each waits for the loads before it).
    std::unique_ptr<work_slot[]> slots(new work_slot[2]);
    compute_params p;
    p.ith = 0;
    p.nth = 2;
    p.slots = slots.get();
    work_queue q(p, 100, 4);
    std::vector<std::pair<int64_t, int64_t>> got;
    for (item_range r{}; q.next(r);) got.emplace_back(r.begin, r.end);
    const std::vector<std::pair<int64_t, int64_t>> want = {
        {0, 25}, {25, 37}, {37, 43}, {43, 47}, {47, 50}, // own: 25, 12, 6, then the chunk of 4, then the last 3
        {96, 100}, {92, 96}, {88, 92}, {84, 88}, {80, 84}, {76, 80}, {72, 76}, {68, 72}, {64, 68}, {60, 64}, {56, 60}, {52, 56}, {50, 52}};
    EXPECT_EQ(got, want);
}

struct abort_after {
    std::atomic<int> calls{0};
    int allow = 0; // calls that return false before the first true
    static bool cb(void * p) {
        auto * self = static_cast<abort_after *>(p);
        return self->calls.fetch_add(1) >= self->allow;
    }
};

// One analysis computed many times gives the bytes of a fresh compute;
// it is refused by a pool with fewer threads than it was made for, and by
// a compute whose abort callback does not match it.
TEST(GraphCompute, AnAnalysisComputedAgainGivesTheSameBytes) {
    block_graph bg;
    thread_pool pool(3);
    bg.poison();
    ASSERT_EQ(pool.compute(bg.g.view(), 3), TSR_STATUS_SUCCESS);
    const std::vector<char> ref = bg.snapshot();
    for (int nth : {1, 3}) {
        SCOPED_TRACE(nth);
        graph_analysis a;
        ASSERT_EQ(analyze_graph(bg.g.view(), nth, false, a), TSR_STATUS_SUCCESS);
        EXPECT_EQ(a.n_threads, nth);
        EXPECT_EQ(a.nodes.size(), a.sync.size());
        EXPECT_EQ(a.sync[0], 1);
        for (int round = 0; round < 3; ++round) {
            bg.poison();
            ASSERT_EQ(graph_compute(pool, a), TSR_STATUS_SUCCESS);
            EXPECT_TRUE(bg.snapshot() == ref) << "round " << round;
        }
        auto never = [](void *) { return false; };
        EXPECT_EQ(graph_compute(pool, a, never, nullptr), TSR_STATUS_FAILED);
    }
    graph_analysis big;
    ASSERT_EQ(analyze_graph(bg.g.view(), 4, false, big), TSR_STATUS_SUCCESS);
    EXPECT_EQ(graph_compute(pool, big), TSR_STATUS_FAILED); // 4 threads on a pool of 3
    graph_analysis with_cb;
    ASSERT_EQ(analyze_graph(bg.g.view(), 2, true, with_cb), TSR_STATUS_SUCCESS);
    EXPECT_TRUE(std::all_of(with_cb.sync.begin(), with_cb.sync.end(), [](char c) { return c == 1; }));
    EXPECT_EQ(graph_compute(pool, with_cb), TSR_STATUS_FAILED); // made for a callback
    abort_after ab;
    ab.allow = 1000000;
    bg.poison();
    ASSERT_EQ(graph_compute(pool, with_cb, abort_after::cb, &ab), TSR_STATUS_SUCCESS);
    EXPECT_TRUE(bg.snapshot() == ref);
}

TEST(GraphCompute, AbortAfterNNodesStopsAllThreadsAtTheSameNode) {
    block_graph bg;
    thread_pool pool(7);
    bg.poison();
    ASSERT_EQ(pool.compute(bg.g.view(), 7), TSR_STATUS_SUCCESS);
    const std::vector<char> ref = bg.snapshot();

    for (int allow : {0, 1, 5, 17}) {
        for (int nth : {1, 2, 7}) {
            bg.poison();
            abort_after ab;
            ab.allow = allow;
            ASSERT_EQ(pool.compute(bg.g.view(), nth, abort_after::cb, &ab), TSR_STATUS_ABORTED);
            EXPECT_EQ(ab.calls.load(), allow + 1) << "called once before each started node";
            for (size_t i = 0; i < bg.outputs.size(); ++i) {
                const tsr_tensor * n = bg.outputs[i];
                if (static_cast<int>(i) < allow) {
                    EXPECT_TRUE(bg.fully_computed(n)) << "node " << i;
                } else {
                    EXPECT_FALSE(bg.computed(n)) << "node " << i << " (" << op_name(n->op) << ") ran after abort, "
                                                 << nth << " threads";
                }
            }
            // The pool is reusable and computes correctly afterwards.
            bg.poison();
            ASSERT_EQ(pool.compute(bg.g.view(), nth), TSR_STATUS_SUCCESS);
            EXPECT_TRUE(bg.snapshot() == ref);
        }
    }
}

TEST(GraphCompute, CallbackThatNeverAbortsIsCalledOncePerNode) {
    block_graph bg(1);
    abort_after ab;
    ab.allow = std::numeric_limits<int>::max();
    ASSERT_EQ(graph_compute(bg.g.view(), 3, abort_after::cb, &ab), TSR_STATUS_SUCCESS);
    EXPECT_EQ(ab.calls.load(), static_cast<int>(bg.outputs.size()));
}

TEST(GraphCompute, RepeatedAbortsWithOneToEightThreadsNeverHang) {
    with_watchdog("repeated aborts", std::chrono::seconds(300), [] {
        block_graph bg(1);
        thread_pool pool(8);
        std::mt19937 rng(77);
        const int n_nodes = static_cast<int>(bg.outputs.size());
        for (int iter = 0; iter < 160; ++iter) {
            const int nth = 1 + iter % 8;
            abort_after ab;
            ab.allow = std::uniform_int_distribution<int>(0, n_nodes + 2)(rng);
            const tsr_status st = pool.compute(bg.g.view(), nth, abort_after::cb, &ab);
            ASSERT_EQ(st, ab.allow < n_nodes ? TSR_STATUS_ABORTED : TSR_STATUS_SUCCESS) << "iteration " << iter;
        }
        ASSERT_EQ(pool.compute(bg.g.view(), 8), TSR_STATUS_SUCCESS);
    });
}

// Abort requested asynchronously by another thread at an arbitrary moment.
TEST(GraphCompute, AbortFromAnotherThreadNeverHangs) {
    with_watchdog("asynchronous aborts", std::chrono::seconds(300), [] {
        block_graph bg(1);
        thread_pool pool(8);
        for (int iter = 0; iter < 40; ++iter) {
            std::atomic<bool> stop{false};
            std::thread killer([&] {
                std::this_thread::sleep_for(std::chrono::microseconds(50 * (iter % 7)));
                stop.store(true);
            });
            const tsr_status st = pool.compute(
                bg.g.view(), 1 + iter % 8, [](void * p) { return static_cast<std::atomic<bool> *>(p)->load(); },
                &stop);
            killer.join();
            ASSERT_TRUE(st == TSR_STATUS_ABORTED || st == TSR_STATUS_SUCCESS);
        }
    });
}

TEST(ThreadPool, PauseAndResumeKeepComputing) {
    with_watchdog("pause/resume", std::chrono::seconds(300), [] {
        block_graph bg(1);
        thread_pool pool(4);
        ASSERT_EQ(pool.compute(bg.g.view(), 4), TSR_STATUS_SUCCESS);
        const std::vector<char> ref = bg.snapshot();
        EXPECT_FALSE(pool.paused());
        pool.pause();
        EXPECT_TRUE(pool.paused());
        // Let the workers fall asleep, then compute while paused.
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        bg.poison();
        ASSERT_EQ(pool.compute(bg.g.view(), 4), TSR_STATUS_SUCCESS);
        EXPECT_TRUE(bg.snapshot() == ref);
        pool.resume();
        EXPECT_FALSE(pool.paused());
        bg.poison();
        ASSERT_EQ(pool.compute(bg.g.view(), 3), TSR_STATUS_SUCCESS);
        EXPECT_TRUE(bg.snapshot() == ref);
    });
}

TEST(ThreadPool, RunGivesEachThreadItsIndexAndScratch) {
    thread_pool pool(5);
    struct ctx_t {
        thread_pool * pool;
        std::atomic<int> mask{0};
        std::atomic<int> aligned{0};
        int counter = 0; // incremented by thread 0 inside sync: visible to all afterwards
        std::atomic<int> saw{0};
    } c{&pool};
    pool.run(5, 1000, [](int ith, void * p) {
        auto * c = static_cast<ctx_t *>(p);
        c->mask.fetch_or(1 << ith);
        if (reinterpret_cast<uintptr_t>(c->pool->scratch(ith)) % 64 == 0 && c->pool->scratch_size(ith) >= 1000) {
            c->aligned.fetch_add(1);
            std::memset(c->pool->scratch(ith), ith, 1000); // writable, private to the thread
        }
        c->pool->sync(ith, [](void * q) { static_cast<ctx_t *>(q)->counter = 42; }, c);
        if (c->counter == 42) c->saw.fetch_add(1);
    }, &c);
    EXPECT_EQ(c.mask.load(), 0x1f);
    EXPECT_EQ(c.aligned.load(), 5);
    EXPECT_EQ(c.saw.load(), 5);
    EXPECT_EQ(pool.size(), 5);
}

TEST(ThreadPool, SyncAnyRunsTheCallbackOnceWithEveryThreadArrived) {
    // Each round every thread writes its slot, meets the others at
    // sync_any, and then must see every slot of the round; the callback
    // runs once per barrier, after all writes of the round (plain int
    // slots: TSan checks the barrier orders them).
    for (int nth : {1, 2, 3, 7}) {
        thread_pool pool(nth);
        constexpr int rounds = 2000;
        struct ctx_t {
            thread_pool * pool;
            int nth;
            int slot[8] = {};
            int calls = 0;  // written only by the callback
            int checked = 0; // rounds the callback found complete
            std::atomic<int> bad{0};
        } c{&pool, nth};
        pool.run(nth, 0, [](int ith, void * p) {
            auto * c = static_cast<ctx_t *>(p);
            for (int r = 1; r <= rounds; ++r) {
                c->slot[ith] = r;
                c->pool->sync_any([](void * q) {
                    auto * c = static_cast<ctx_t *>(q);
                    ++c->calls;
                    bool all = true;
                    for (int i = 0; i < c->nth; ++i) all = all && c->slot[i] == c->calls;
                    if (all) ++c->checked;
                }, c);
                for (int i = 0; i < c->nth; ++i) {
                    if (c->slot[i] != r) c->bad.fetch_add(1);
                }
                c->pool->sync_any(nullptr, nullptr); // nobody writes round r + 1 before all have read round r
            }
        }, &c);
        EXPECT_EQ(c.calls, rounds) << nth << " threads";
        EXPECT_EQ(c.checked, rounds) << nth << " threads";
        EXPECT_EQ(c.bad.load(), 0) << nth << " threads";
    }
}

// Runs `rounds` rounds of sync_vote on nth threads of `pool`: in each,
// every thread sleeps a random 0..max_delay_us (0: not at all), writes its
// slot and votes (thread r % nth votes yes in rounds divisible by
// yes_every); after the barrier it checks that every slot of the round is
// visible and that it got yes exactly in those rounds, then meets the
// others at a second barrier (nobody writes round r + 1 before all have
// read round r). Returns the wrong slots and votes seen.
int vote_rounds(thread_pool & pool, int nth, int rounds, int yes_every, int max_delay_us) {
    struct ctx_t {
        thread_pool * pool;
        int nth, rounds, yes_every, max_delay_us;
        int slot[8] = {};
        std::atomic<int> bad{0};
    } c{&pool, nth, rounds, yes_every, max_delay_us};
    pool.run(nth, 0, [](int ith, void * p) {
        auto * c = static_cast<ctx_t *>(p);
        std::mt19937 rng(static_cast<unsigned>(1234 + ith));
        std::uniform_int_distribution<int> delay_us(0, c->max_delay_us);
        for (int r = 1; r <= c->rounds; ++r) {
            if (c->max_delay_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay_us(rng)));
            c->slot[ith] = r;
            const bool yes = r % c->yes_every == 0;
            if (c->pool->sync_vote(ith, yes && r % c->nth == ith) != yes) c->bad.fetch_add(1);
            for (int i = 0; i < c->nth; ++i) {
                if (c->slot[i] != r) c->bad.fetch_add(1);
            }
            c->pool->sync_vote(ith, false);
        }
    }, &c);
    return c.bad.load();
}

TEST(ThreadPool, SyncVoteOrdersWritesAndEveryThreadGetsTheSameOr) {
    // Runs with fewer threads than the pool, then more, check that each run
    // starts its count afresh (a thread left out of a run is not behind).
    thread_pool pool(7);
    for (int nth : {1, 2, 3, 7, 2, 7}) EXPECT_EQ(vote_rounds(pool, nth, 2000, 5, 0), 0) << nth << " threads";
}

TEST(ThreadPool, SyncVoteWakesThreadsThatSlept) {
    // Arrivals staggered by random delays of 0-400 us around the barrier's
    // spin budget (100 us), so waiters often block in the futex and the
    // last arriver's store must wake them: a lost wake-up hangs this test
    // (ctest's timeout). 3 threads: a waiter may sleep on either other
    // thread's word.
    for (int nth : {2, 3}) {
        thread_pool pool(nth);
        EXPECT_EQ(vote_rounds(pool, nth, 400, 7, 400), 0) << nth << " threads";
    }
}

TEST(ThreadPool, SyncAnyAndSyncVoteGiveAnEarlyThreadWorkUntilItSaysDone) {
    // Thread 1 arrives first; thread 0 arrives only after thread 1's
    // while_waiting has run three times (no timing involved). while_waiting
    // says "done" on its fifth call, so it runs 3 to 5 times, never again
    // after that, and only on the thread that waited. The same for both
    // barriers that take such work (vote = 0: sync_any, 1: sync_vote).
    for (int vote = 0; vote < 2; ++vote) {
        thread_pool pool(2);
        struct ctx_t {
            thread_pool * pool;
            std::atomic<int> calls{0};
            std::atomic<int> calls_after_done{0};
            std::atomic<int> wrong_thread{0};
            std::atomic<bool> done{false};
            bool vote;
        } c{&pool};
        c.vote = vote != 0;
        struct wctx_t {
            ctx_t * c;
            int ith;
        };
        pool.run(2, 0, [](int ith, void * p) {
            auto * c = static_cast<ctx_t *>(p);
            wctx_t w{c, ith};
            const auto hook = [](void * q) {
                auto * w = static_cast<wctx_t *>(q);
                if (w->ith != 1) w->c->wrong_thread.fetch_add(1);
                if (w->c->done.load()) w->c->calls_after_done.fetch_add(1);
                const int n = w->c->calls.fetch_add(1) + 1;
                if (n == 5) w->c->done.store(true);
                return n < 5;
            };
            if (ith == 0) {
                while (c->calls.load() < 3) std::this_thread::yield();
            }
            if (c->vote) {
                c->pool->sync_vote(ith, false, hook, &w);
            } else {
                c->pool->sync_any(nullptr, nullptr, hook, &w);
            }
        }, &c);
        EXPECT_GE(c.calls.load(), 3) << (vote ? "sync_vote" : "sync_any");
        EXPECT_LE(c.calls.load(), 5);
        EXPECT_EQ(c.calls_after_done.load(), 0);
        EXPECT_EQ(c.wrong_thread.load(), 0);
    }
}

TEST(ThreadPool, RejectsBadThreadCounts) {
    EXPECT_THROW(thread_pool(0), tessera::error);
    EXPECT_THROW(thread_pool(thread_pool::max_threads + 1), tessera::error);
    // More threads than the pool has: clamped, still correct.
    block_graph bg(1);
    thread_pool pool(2);
    ASSERT_EQ(pool.compute(bg.g.view(), 1), TSR_STATUS_SUCCESS);
    const std::vector<char> ref = bg.snapshot();
    ASSERT_EQ(pool.compute(bg.g.view(), 64), TSR_STATUS_SUCCESS);
    EXPECT_TRUE(bg.snapshot() == ref);
}

// True when pool->run throws tessera::error (an empty job otherwise runs).
bool run_refused(thread_pool * pool) {
    try {
        pool->run(2, 0, [](int, void *) {}, nullptr);
    } catch (const tessera::error &) {
        return true;
    }
    return false;
}

// A run started from inside a run of the same pool on the same thread is
// refused (it would wait for itself), also when another pool's run lies
// between them (A -> B -> A: only the innermost pool was checked); a run
// of another pool from inside one computes.
TEST(ThreadPool, RunFromInsideARunOfTheSamePoolThrows) {
    with_watchdog("nested runs", std::chrono::seconds(120), [] {
        thread_pool a(2), b(2);
        struct ctx_t {
            thread_pool * a;
            thread_pool * b;
            std::atomic<int> b_ran{0};
            bool a_in_a_refused = false, a_in_b_refused = false, b_in_b_refused = false;
        } c{&a, &b};
        a.run(2, 0, [](int ith, void * p) {
            auto * c = static_cast<ctx_t *>(p);
            if (ith != 0) return;
            c->a_in_a_refused = run_refused(c->a);
            c->b->run(2, 0, [](int jth, void * q) {
                auto * c = static_cast<ctx_t *>(q);
                c->b_ran.fetch_add(1);
                if (jth != 0) return;
                c->a_in_b_refused = run_refused(c->a);
                c->b_in_b_refused = run_refused(c->b);
            }, c);
        }, &c);
        EXPECT_TRUE(c.a_in_a_refused);
        EXPECT_TRUE(c.a_in_b_refused);
        EXPECT_TRUE(c.b_in_b_refused);
        EXPECT_EQ(c.b_ran.load(), 2);
        // Both pools still run afterwards.
        std::atomic<int> n{0};
        a.run(2, 0, [](int, void * p) { static_cast<std::atomic<int> *>(p)->fetch_add(1); }, &n);
        b.run(2, 0, [](int, void * p) { static_cast<std::atomic<int> *>(p)->fetch_add(1); }, &n);
        EXPECT_EQ(n.load(), 4);
    });
}

TEST(GraphCompute, DataErrorFailsAndThePoolStaysUsable) {
    thread_pool pool(4);
    for (int nth : {1, 4}) {
        context ctx(data_ctx());
        tsr_tensor * a = ctx.new_tensor(TSR_TYPE_F32, {16, 4});
        tsr_tensor * idx = ctx.new_tensor(TSR_TYPE_I32, {3});
        set_i32(idx, 4, 1); // out of range
        tsr_tensor * rows = get_rows(ctx, a, idx);
        tsr_tensor * after = scale(ctx, rows, 2.0f, 1.0f);
        std::memset(after->data, 0xff, nbytes(after));
        graph g;
        g.build_forward(after);
        EXPECT_EQ(pool.compute(g.view(), nth), TSR_STATUS_FAILED);
        EXPECT_EQ(static_cast<unsigned char *>(after->data)[0], 0xff) << "nodes after the failure do not run";
        set_i32(idx, 3, 1);
        EXPECT_EQ(pool.compute(g.view(), nth), TSR_STATUS_SUCCESS);
        EXPECT_EQ(get(after, 0, 0), 1.0);
    }
}

TEST(GraphCompute, NullDataAndUnsupportedNodesFailWithoutComputing) {
    context ctx(data_ctx());
    tsr_tensor * a = ctx.new_tensor(TSR_TYPE_F32, {8});
    tsr_tensor * s = silu(ctx, a);
    graph g;
    g.build_forward(s);
    void * saved = s->data;
    s->data = nullptr;
    EXPECT_EQ(graph_compute(g.view(), 2), TSR_STATUS_FAILED);
    s->data = saved;
    a->data = nullptr; // a source without data
    EXPECT_EQ(graph_compute(g.view(), 2), TSR_STATUS_FAILED);

    context ctx2(data_ctx());
    tsr_tensor * b = ctx2.new_tensor(TSR_TYPE_F32, {8});
    tsr_tensor * n = silu(ctx2, b);
    n->type = TSR_TYPE_Q4_1; // no kernel for this type
    graph g2;
    g2.build_forward(n);
    EXPECT_EQ(graph_compute(g2.view(), 2), TSR_STATUS_FAILED);
    n->type = TSR_TYPE_F32;
    n->op = TSR_OP_COUNT + 5; // not an op
    EXPECT_EQ(graph_compute(g2.view(), 2), TSR_STATUS_FAILED);

    tsr_tensor * nodes[1] = {nullptr};
    tsr_graph_view bad{1, nodes, 0, nullptr};
    EXPECT_EQ(graph_compute(bad, 2), TSR_STATUS_FAILED);
    tsr_graph_view negative{-1, nullptr, 0, nullptr};
    EXPECT_EQ(graph_compute(negative, 2), TSR_STATUS_FAILED);
    tsr_graph_view empty{0, nullptr, 0, nullptr};
    EXPECT_EQ(graph_compute(empty, 2), TSR_STATUS_SUCCESS);
}

TEST(SupportsOp, TruthfulAndSafeOnOddInput) {
    EXPECT_FALSE(supports_op(nullptr));
    context ctx(data_ctx());
    tsr_tensor * f32 = ctx.new_tensor(TSR_TYPE_F32, {64, 4});
    tsr_tensor * q41 = ctx.new_tensor(TSR_TYPE_Q4_1, {64, 4});
    tsr_tensor * mm = mul_mat(ctx, f32, f32);
    EXPECT_TRUE(supports_op(mm));
    mm->src[0] = q41; // Q4_1 weights: no kernel
    EXPECT_FALSE(supports_op(mm));
    mm->src[0] = nullptr;
    EXPECT_FALSE(supports_op(mm));
    mm->src[0] = f32;
    mm->ne[0] = 5; // wrong result shape
    EXPECT_FALSE(supports_op(mm));
    mm->ne[0] = 4;
    mm->type = 4; // retired type id
    EXPECT_FALSE(supports_op(mm));
    mm->type = TSR_TYPE_F32;
    mm->ne[1] = 0;
    EXPECT_FALSE(supports_op(mm));
    EXPECT_EQ(node_work_size(mm), 0u);

    // Quantized weights must be row-contiguous.
    tsr_tensor * q8 = ctx.new_tensor(TSR_TYPE_Q8_0, {64, 4});
    tsr_tensor * mm2 = mul_mat(ctx, q8, f32);
    EXPECT_TRUE(supports_op(mm2));
    EXPECT_GT(node_work_size(mm2), 0u);
    tsr_tensor fake = *q8;
    fake.nb[0] = 40;
    mm2->src[0] = &fake;
    EXPECT_FALSE(supports_op(mm2));

    // Views and leafs are no-ops; a bad op id is unsupported.
    EXPECT_TRUE(supports_op(transpose(ctx, f32)));
    EXPECT_TRUE(supports_op(f32));
    tsr_tensor bad = *f32;
    bad.op = -1;
    EXPECT_FALSE(supports_op(&bad));

    // compute_forward refuses what supports_op refuses, and short scratch.
    compute_params p;
    EXPECT_FALSE(compute_forward(p, mm));
    EXPECT_FALSE(compute_forward(p, mul_mat(ctx, q8, f32))); // needs scratch, none given
}

} // namespace
} // namespace tessera::cpu::test

// backends/cpu/graph_compute.cpp — the node walk run on the thread pool.
#include "backends/cpu/graph_compute.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <vector>

#include "backends/cpu/compute.hpp"
#include "backends/cpu/ops/ops.hpp"
#include "backends/cpu/ops/tensor_access.hpp"
#include "tessera/core/tensor.hpp"
#include "tessera/core/types.hpp"

namespace tessera::cpu {

namespace {

// True when `node` and its sources have data (supports_op is checked by
// checked_scratch).
bool has_data(const tsr_tensor * node) {
    if (node->data == nullptr) return false;
    for (const tsr_tensor * s : node->src) {
        if (s != nullptr && s->data == nullptr) return false;
    }
    return true;
}

// The bytes [lo, hi) a tensor's elements can occupy (its strides' bounding
// interval); {0, UINTPTR_MAX} when that does not fit in an address.
byte_span range_of(const tsr_tensor * t) {
    constexpr byte_span everything{0, UINTPTR_MAX};
    const type_traits & tr = get_type_traits(t->type);
    uint64_t last = 0; // offset of the last block
    for (int i = 0; i < TSR_MAX_DIMS; ++i) {
        const uint64_t n = static_cast<uint64_t>(i == 0 ? t->ne[0] / tr.block_size : t->ne[i]) - 1;
        uint64_t step = 0;
        if (__builtin_mul_overflow(n, t->nb[i], &step) || __builtin_add_overflow(last, step, &last)) return everything;
    }
    byte_span r;
    r.lo = reinterpret_cast<uintptr_t>(t->data);
    if (__builtin_add_overflow(r.lo, last, &r.hi) || __builtin_add_overflow(r.hi, tr.type_size, &r.hi)) return everything;
    return r;
}

// True when every thread reads, of `src` (a node computed since the last
// barrier), only the rows it wrote itself: `src` and `node` split their
// rows statically the same way (op_splits_rows, the same shape) and src is
// contiguous, so no row shares bytes with another.
bool reads_own_rows(const tsr_tensor * node, const tsr_tensor * src) {
    return op_splits_rows(node->op) && op_splits_rows(src->op) && same_shape(node, src) && is_contiguous(src);
}

// True when `writer` may write over `src`, which `reader` (a node since the
// last barrier) reads, without a barrier between them, because each thread
// overwrites only bytes it read itself. Both split their rows statically
// (op_splits_rows), and either
//   - both have one row: thread 0 computes all of each (split_items gives
//     it row 0; the others have none, so read nothing), wherever the bytes
//     lie: a decoded token's MUL written over part of the gate its SILU
//     just read, its RMS_NORM over the product its residual ADD read; or
//   - they split the same rows (the same shape), `reader` reads `src` row
//     for row (the same shape) and the output is src's bytes exactly (the
//     same address, type and contiguous layout).
bool overwrites_own_rows(const tsr_tensor * writer, const tsr_tensor * reader, const tsr_tensor * src) {
    if (!op_splits_rows(writer->op) || !op_splits_rows(reader->op)) return false;
    if (count_rows(writer) == 1 && count_rows(reader) == 1) return true;
    return same_shape(writer, reader) && same_shape(src, reader) && writer->data == src->data && writer->type == src->type &&
           is_contiguous(writer) && is_contiguous(src);
}

// An attention whose mask is a leaf (an input the graph does not compute):
// its visible keys can be read before the compute.
bool reads_leaf_mask(const tsr_tensor * n) {
    return n->op == TSR_OP_FLASH_ATTN_EXT && n->src[3] != nullptr && n->src[3]->op == TSR_OP_NONE;
}

} // namespace

std::vector<std::array<byte_span, 2>> attention_prefetch(const std::vector<tsr_tensor *> & nodes, bool visible_only) {
    std::vector<std::array<byte_span, 2>> plan(nodes.size());
    size_t first = 0; // the first node of the current share
    // The last node's visible keys, reused by a node with the same mask and
    // shapes (every layer of a model shares one mask).
    const tsr_tensor * memo_mask = nullptr;
    int64_t memo_rows = -1, memo_n_kv = -1, memo_keys = 0;
    for (size_t i = 0; i < nodes.size(); ++i) {
        const tsr_tensor * n = nodes[i];
        if (n->op != TSR_OP_FLASH_ATTN_EXT) continue;
        const size_t from = first < i ? first : i; // nodes [from, to) share it
        const size_t to = first < i ? i : i + 1;
        first = i + 1;
        int64_t keys = -1; // all of each view's keys
        // A mask this graph computes has no values yet: all keys then.
        if (const tsr_tensor * mask = n->src[3]; visible_only && reads_leaf_mask(n)) {
            if (mask != memo_mask || n->src[0]->ne[1] != memo_rows || n->src[1]->ne[1] != memo_n_kv) {
                memo_mask = mask;
                memo_rows = n->src[0]->ne[1];
                memo_n_kv = n->src[1]->ne[1];
                memo_keys = flash_attn_ext_visible_keys(n);
            }
            keys = memo_keys;
        }
        for (int kv = 0; kv < 2; ++kv) {
            const tsr_tensor * view = n->src[1 + kv];
            if (view == nullptr || keys == 0) continue;
            tsr_tensor seen = *view; // the keys [0, keys) of the view
            if (keys > 0 && keys < seen.ne[1]) seen.ne[1] = keys;
            const byte_span r = range_of(&seen);
            if (r.lo == 0 && r.hi == UINTPTR_MAX) continue; // does not fit in an address
            const uintptr_t lo = r.lo & ~uintptr_t{63};
            const uintptr_t hi = r.hi - r.lo > k_attn_prefetch_bytes ? r.lo + k_attn_prefetch_bytes : r.hi;
            const uintptr_t lines = (hi - lo + 63) / 64, per = (lines + (to - from) - 1) / (to - from);
            for (size_t j = from; j < to; ++j) {
                const uintptr_t a = lo + (j - from) * per * 64;
                if (a < hi) plan[j][kv] = {a, std::min<uintptr_t>(hi, a + per * 64)};
            }
        }
    }
    return plan;
}

bool computed_by_thread_0(const tsr_tensor * node) {
    const tsr_tensor * written = node;
    switch (node->op) {
    case TSR_OP_ADD:
    case TSR_OP_MUL:
    case TSR_OP_SCALE:
    case TSR_OP_SILU:
    case TSR_OP_GELU:
    case TSR_OP_RMS_NORM:
    case TSR_OP_ROPE:
    case TSR_OP_GET_ROWS:
    case TSR_OP_CPY: break;
    case TSR_OP_SET_ROWS: written = node->src[1]; break; // dst is the whole cache; src[1] the rows stored
    default: return false;
    }
    if (written == nullptr) return false;
    const type_traits & tr = get_type_traits(written->type);
    uint64_t bytes = tr.type_size;
    for (int i = 0; i < TSR_MAX_DIMS; ++i) {
        const uint64_t n = static_cast<uint64_t>(i == 0 ? written->ne[0] / tr.block_size : written->ne[i]);
        if (__builtin_mul_overflow(bytes, n, &bytes)) return false;
    }
    return bytes <= k_thread_0_max_bytes;
}

// Threads split each node's output between them, so a node may start while
// other threads still work on earlier ones only when it touches none of
// their bytes (the graph allocator reuses memory of dead tensors, hence the
// write-after-read check), or when what it reads of them each thread wrote
// itself (reads_own_rows: a chain of element-wise ops and RMS_NORM over the
// same rows, as a residual ADD, the RMS_NORM and the weight MUL after it),
// or what it overwrites each thread read itself (overwrites_own_rows), or
// when it and the nodes whose bytes it shares are all computed by thread 0
// alone (serial). Quadratic only within one barrier's nodes.
std::vector<char> barriers_before(const std::vector<tsr_tensor *> & nodes, const std::vector<char> & serial) {
    std::vector<char> sync(nodes.size(), 1);
    const auto on_thread_0 = [&](size_t i) { return i < serial.size() && serial[i] != 0; };
    struct write {
        byte_span bytes;
        const tsr_tensor * node;
        bool serial;
    };
    std::vector<write> written; // since the last barrier
    struct read_of {
        byte_span bytes;
        const tsr_tensor * node; // the reader
        const tsr_tensor * src;  // what it read there
        bool serial;             // the reader is computed by thread 0 alone
    };
    std::vector<read_of> read;
    for (size_t i = 0; i < nodes.size(); ++i) {
        const tsr_tensor * node = nodes[i];
        const byte_span w = range_of(node);
        byte_span r[TSR_MAX_SRC];
        const tsr_tensor * rs[TSR_MAX_SRC];
        int n_r = 0;
        for (const tsr_tensor * s : node->src) {
            if (s != nullptr) {
                rs[n_r] = s;
                r[n_r++] = range_of(s);
            }
        }
        // A barrier at least every k_max_nodes_between_barriers nodes keeps
        // this loop linear in the nodes (each node is checked against those
        // since the last barrier).
        const bool mine = on_thread_0(i);
        bool hazard = i == 0 || written.size() >= k_max_nodes_between_barriers;
        for (const write & x : written) {
            if (mine && x.serial) continue; // thread 0 wrote it, before this node
            hazard = hazard || x.bytes.overlaps(w);
            for (int j = 0; j < n_r && !hazard; ++j) {
                hazard = x.bytes.overlaps(r[j]) && !(x.node == rs[j] && reads_own_rows(node, rs[j]));
            }
        }
        for (const read_of & x : read) {
            if (mine && x.serial) continue; // thread 0 read it, before this node
            hazard = hazard || (x.bytes.overlaps(w) && !overwrites_own_rows(node, x.node, x.src));
        }
        if (hazard) {
            written.clear();
            read.clear();
        }
        sync[i] = hazard ? 1 : 0;
        written.push_back({w, node, mine});
        for (int j = 0; j < n_r; ++j) read.push_back({r[j], node, rs[j], mine});
    }
    return sync;
}

std::vector<char> prepared_before(const std::vector<tsr_tensor *> & nodes, const std::vector<char> & has_shared) {
    std::vector<char> reuse(nodes.size(), 0);
    size_t last = SIZE_MAX; // the last node that filled the shared scratch
    for (size_t i = 0; i < nodes.size(); ++i) {
        if (i >= has_shared.size() || has_shared[i] == 0) continue;
        bool same = last != SIZE_MAX && nodes[i]->src[1] != nullptr && same_prepared(nodes[last], nodes[i]);
        if (same) {
            const byte_span read = range_of(nodes[i]->src[1]);
            for (size_t k = last; k < i && same; ++k) same = !range_of(nodes[k]).overlaps(read);
        }
        if (same) {
            reuse[i] = 1;
        } else {
            last = i;
        }
    }
    return reuse;
}

namespace {

// Most threads for which the walk's barriers are sync_vote (a flag line
// per thread, each thread reading every other's: n^2 line reads a barrier)
// rather than sync_any (one shared counter). Measured at 2 threads.
constexpr int k_vote_barrier_max_threads = 8;

// Bytes a thread may prefetch while it waits at one barrier (into L2).
constexpr size_t k_wait_prefetch_bytes = size_t{256} << 10;
// Smallest weight matrix worth prefetching for.
constexpr size_t k_wait_prefetch_min = size_t{64} << 10;

// A thread's prefetch cursor while it waits at a barrier.
struct wait_prefetch {
    const char * next = nullptr;
    const char * end = nullptr;
};

// Prefetches the 64-byte lines of s into L2: the barrier waits' weight
// read-ahead below and the attention read-ahead (attention_prefetch). The
// latter measured on Zen 4 (2 vCPUs, synth 135M Q4_0, `tessera bench -p 0 -n 32
// -d 512 -r 1`, medians of 5-6 alternating processes, without -> with the
// read-ahead of attention_prefetch): 200.8 -> 256.4 t/s on 1 thread, 331.4
// -> 351.2 on 2; after no prompt (tg128: 1 to 128 keys) 338.8 -> 337.3, and
// 1B Q4_0 (22 layers, weights 0.6 GB against the cache's 11 MB) the same.
// Without it, one decoded token's attention over 64 cached keys took 9-12
// us a layer with the cache cold against 3.4 hot (BM_attn_decode_layers).
void prefetch_span(const byte_span & s) {
    for (uintptr_t a = s.lo; a < s.hi; a += 64) __builtin_prefetch(reinterpret_cast<const char *>(a), 0, 2);
}

// One step of prefetching (1 KiB into L2); false when done.
bool prefetch_step(void * ctx) {
    auto * w = static_cast<wait_prefetch *>(ctx);
    const char * stop = std::min(w->end, w->next + 1024);
    prefetch_span({reinterpret_cast<uintptr_t>(w->next), reinterpret_cast<uintptr_t>(stop)});
    w->next = stop;
    return w->next < w->end;
}

// The bytes of the weights of the first MUL_MAT among the k nodes from i
// on, when they are large enough to prefetch: src[0] if it is a leaf
// (weights, not an activation computed by this graph); else empty.
byte_span upcoming_weights(const std::vector<tsr_tensor *> & nodes, size_t i, size_t k) {
    for (size_t j = i; j < nodes.size() && j < i + k; ++j) {
        const tsr_tensor * n = nodes[j];
        if (n->op != TSR_OP_MUL_MAT) continue;
        const tsr_tensor * w = n->src[0];
        if (w->op != TSR_OP_NONE || w->data == nullptr) return {};
        const byte_span r = range_of(w);
        return r.hi - r.lo >= k_wait_prefetch_min && r.hi - r.lo < (size_t{1} << 40) ? r : byte_span{};
    }
    return {};
}

// State shared by the threads of one graph run.
struct graph_run {
    const graph_analysis * a = nullptr;
    // compute_params::slots of every node: thread t's slot of node i at
    // slots[t * a->nodes.size() + i], each thread's row zeroed by that thread before
    // the first node's barrier (walk_nodes), so that a thread's first take
    // of its own share in a product finds the line in its own cache rather
    // than in that of the calling thread, which zeroed every slot before.
    // (Synth 135M Q4_0 tg128 on 2 threads, Zen 5, the two alternated graph
    // by graph in one process: 1.008, 1.009, 1.003, 1.007.)
    struct slot_memory {
        void operator()(work_slot * s) const { ::operator delete(s, std::align_val_t{alignof(work_slot)}); }
    };
    std::unique_ptr<work_slot, slot_memory> slots;
    thread_pool * pool = nullptr;
    // graph_analysis::attn_prefetch, or this run's plan of the keys the mask
    // lets the attentions see.
    const std::vector<std::array<byte_span, 2>> * attn_prefetch = nullptr;
    int n_threads = 1;
    // The barriers between nodes are thread_pool::sync_vote (no abort
    // callback, few threads) rather than sync_any.
    bool vote_barrier = false;
    tsr_abort_callback cb = nullptr;
    void * cb_data = nullptr;
    std::atomic<bool> failed{false}; // set by any thread on a data error
    // Written by thread 0 between arrivals and release (thread_pool::sync),
    // read by every thread after the release.
    bool stop = false;
    bool aborted = false;
};

// Runs while the other threads wait at the barrier before a node: on
// thread 0 when there is an abort callback, else on the last to arrive.
void decide(void * ctx) {
    auto * run = static_cast<graph_run *>(ctx);
    if (run->failed.load(std::memory_order_relaxed)) {
        run->stop = true;
        return;
    }
    if (run->cb == nullptr) return;
    bool abort_now = true;
    try {
        abort_now = run->cb(run->cb_data);
    } catch (...) {
        run->failed.store(true, std::memory_order_relaxed); // a throwing callback is a failure, not a crash
    }
    if (abort_now) {
        run->stop = true;
        run->aborted = !run->failed.load(std::memory_order_relaxed);
    }
}

void walk_nodes(int ith, void * ctx) {
    auto * run = static_cast<graph_run *>(ctx);
    const graph_analysis & a = *run->a;
    compute_params p;
    p.ith = ith;
    p.nth = run->n_threads;
    p.wdata = run->pool->scratch(ith);
    p.wsize = run->pool->scratch_size(ith);
    p.shared = run->pool->shared_scratch();
    p.shared_size = run->pool->shared_scratch_size();
    scratch_memo memo;
    p.memo = &memo;
    p.slot_stride = a.nodes.size();
    // This thread's slots, zero before the first node's barrier (every
    // graph's first node waits at one), so no thread takes from a share
    // before it is reset.
    work_slot * mine = run->slots.get() + static_cast<size_t>(ith) * a.nodes.size();
    for (size_t i = 0; i < a.nodes.size(); ++i) new (mine + i) work_slot{};
    for (size_t i = 0; i < a.nodes.size(); ++i) {
        p.prev = i > 0 ? a.nodes[i - 1] : nullptr;
        if (a.sync[i] != 0) {
            // The abort callback runs on the calling thread (thread 0);
            // without one, decide() may run on any thread.
            if (run->cb != nullptr) {
                run->pool->sync(ith, decide, run);
            } else {
                wait_prefetch wp;
                if (const byte_span & r = a.prefetch[i]; r.hi > r.lo) {
                    const size_t share = (r.hi - r.lo) / static_cast<size_t>(run->n_threads);
                    wp.next = reinterpret_cast<const char *>(r.lo) + share * static_cast<size_t>(ith);
                    wp.end = wp.next + std::min(share, k_wait_prefetch_bytes);
                }
                bool (*step)(void *) = wp.next != nullptr ? prefetch_step : nullptr;
                if (run->vote_barrier) {
                    // Every thread's vote is whether it saw a data error
                    // before arriving; the OR is the same on every thread.
                    if (run->pool->sync_vote(ith, run->failed.load(std::memory_order_relaxed), step, &wp)) break;
                } else {
                    run->pool->sync_any(decide, run, step, &wp);
                }
            }
            if (run->stop) break;
        }
        prefetch_span((*run->attn_prefetch)[i][0]);
        prefetch_span((*run->attn_prefetch)[i][1]);
        p.slots = run->slots.get() + i;
        if (a.serial[i] != 0) {
            // Not after a data error this thread has seen (others' are
            // seen at the next barrier, as the contract says).
            if (ith == 0 && !run->failed.load(std::memory_order_relaxed)) {
                p.nth = 1;
                if (!compute_checked_node(p, a.nodes[i])) run->failed.store(true, std::memory_order_relaxed);
                p.nth = run->n_threads;
            }
            continue;
        }
        if (a.prepare[i] != 0) {
            // Fill the shared scratch, then wait until every thread has.
            p.prepare = true;
            if (!compute_checked_node(p, a.nodes[i])) run->failed.store(true, std::memory_order_relaxed);
            p.prepare = false;
            if (run->vote_barrier) {
                run->pool->sync_vote(ith, false);
            } else if (run->n_threads > 1) {
                run->pool->sync_any(nullptr, nullptr);
            }
        }
        if (!compute_checked_node(p, a.nodes[i])) run->failed.store(true, std::memory_order_relaxed);
    }
}

} // namespace

tsr_status analyze_graph(const tsr_graph_view & g, int n_threads, bool with_cb, graph_analysis & a) {
    if (g.n_nodes < 0 || (g.n_nodes > 0 && g.nodes == nullptr)) return TSR_STATUS_FAILED;
    a = graph_analysis{};
    a.n_threads = std::max(n_threads, 1);
    a.with_cb = with_cb;
    try {
        a.nodes.reserve(static_cast<size_t>(g.n_nodes));
        for (int32_t i = 0; i < g.n_nodes; ++i) {
            tsr_tensor * node = g.nodes[i];
            if (node == nullptr) return TSR_STATUS_FAILED;
            if (op_is_noop(node->op)) continue;
            node_scratch need;
            // Checked here once: the threads then call compute_checked_node.
            if (!checked_scratch(node, need) || !has_data(node)) return TSR_STATUS_FAILED;
            a.work = std::max(a.work, need.per_thread);
            a.shared = std::max(a.shared, need.shared);
            a.nodes.push_back(node);
            a.prepare.push_back(need.shared > 0 ? 1 : 0);
        }
        const size_t n = a.nodes.size();
        a.serial.assign(n, 0);
        if (a.n_threads > 1) {
            for (size_t i = 0; i < n; ++i) a.serial[i] = a.prepare[i] == 0 && computed_by_thread_0(a.nodes[i]) ? 1 : 0;
        }
        // With an abort callback every node keeps its barrier: the callback
        // is documented to run before each node, with all threads stopped.
        a.sync = with_cb || a.n_threads == 1 ? std::vector<char>(n, 1) : barriers_before(a.nodes, a.serial);
        // A node whose shared scratch an earlier node filled alike skips
        // its prepare call.
        const std::vector<char> reuse = prepared_before(a.nodes, a.prepare);
        for (size_t i = 0; i < n; ++i) a.prepare[i] = a.prepare[i] != 0 && reuse[i] == 0 ? 1 : 0;
        // The shared scratch is rewritten by a node's prepare call, so no
        // thread may still read it for an earlier node. The first node
        // waits: the threads reset their work slots before it (walk_nodes).
        for (size_t i = 0; i < n; ++i) a.sync[i] = i == 0 || a.sync[i] != 0 || a.prepare[i] != 0 ? 1 : 0;
        // With a leaf mask every compute plans its own (run_analyzed).
        a.attn_masked = std::any_of(a.nodes.begin(), a.nodes.end(), reads_leaf_mask);
        if (!a.attn_masked) a.attn_prefetch = attention_prefetch(a.nodes, false);
        a.prefetch.assign(n, byte_span{});
        if (!with_cb && a.n_threads > 1) {
            for (size_t i = 0; i < n; ++i) {
                if (a.sync[i] != 0) a.prefetch[i] = upcoming_weights(a.nodes, i, 4);
            }
        }
    } catch (const std::bad_alloc &) {
        return TSR_STATUS_ALLOC_FAILED;
    }
    return TSR_STATUS_SUCCESS;
}

namespace {

tsr_status run_analyzed(thread_pool & pool, const graph_analysis & a, tsr_abort_callback cb, void * cb_data) {
    if (a.nodes.empty()) return TSR_STATUS_SUCCESS;
    graph_run run;
    run.a = &a;
    run.pool = &pool;
    run.n_threads = a.n_threads;
    run.attn_prefetch = &a.attn_prefetch;
    std::vector<std::array<byte_span, 2>> visible_plan;
    try {
        const size_t n_slots = a.nodes.size() * static_cast<size_t>(run.n_threads);
        run.slots.reset(static_cast<work_slot *>(::operator new(n_slots * sizeof(work_slot), std::align_val_t{alignof(work_slot)})));
        if (a.attn_masked) {
            visible_plan = attention_prefetch(a.nodes, true);
            run.attn_prefetch = &visible_plan;
        }
    } catch (const std::bad_alloc &) {
        return TSR_STATUS_ALLOC_FAILED;
    }
    run.cb = cb;
    run.cb_data = cb_data;
    run.vote_barrier = cb == nullptr && run.n_threads > 1 && run.n_threads <= k_vote_barrier_max_threads;
    try {
        pool.run(run.n_threads, a.work, a.shared, walk_nodes, &run);
    } catch (const std::bad_alloc &) {
        return TSR_STATUS_ALLOC_FAILED;
    }
    if (run.failed.load(std::memory_order_relaxed)) return TSR_STATUS_FAILED;
    if (run.aborted) return TSR_STATUS_ABORTED;
    return TSR_STATUS_SUCCESS;
}

} // namespace

tsr_status graph_compute(thread_pool & pool, const tsr_graph_view & g, int n_threads, tsr_abort_callback cb,
                         void * cb_data) {
    try {
        graph_analysis a;
        const tsr_status st = analyze_graph(g, std::clamp(n_threads, 1, pool.size()), cb != nullptr, a);
        return st != TSR_STATUS_SUCCESS ? st : run_analyzed(pool, a, cb, cb_data);
    } catch (...) {
        return TSR_STATUS_FAILED; // nothing is expected to throw here; never let it cross the C ABI
    }
}

tsr_status graph_compute(thread_pool & pool, const graph_analysis & a, tsr_abort_callback cb, void * cb_data) {
    if (a.n_threads > pool.size() || (cb != nullptr) != a.with_cb) return TSR_STATUS_FAILED;
    try {
        return run_analyzed(pool, a, cb, cb_data);
    } catch (...) {
        return TSR_STATUS_FAILED; // nothing is expected to throw here; never let it cross the C ABI
    }
}

tsr_status graph_compute(const tsr_graph_view & g, int n_threads, tsr_abort_callback cb, void * cb_data) {
    try {
        thread_pool pool(std::clamp(n_threads, 1, thread_pool::max_threads));
        return graph_compute(pool, g, n_threads, cb, cb_data);
    } catch (const std::exception &) {
        return TSR_STATUS_FAILED;
    }
}

} // namespace tessera::cpu

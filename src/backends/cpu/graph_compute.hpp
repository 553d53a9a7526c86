// backends/cpu/graph_compute.hpp — computing a graph's nodes on the CPU:
// all threads walk the nodes in order, each node split between them
// (compute.hpp), with a barrier before every node that depends on the
// nodes since the previous barrier. Internal to the CPU backend.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/cpu/thread_pool.hpp"
#include "tessera/tensor.h"

namespace tessera::cpu {

// Bytes [lo, hi) of memory (empty: lo == hi).
struct byte_span {
    uintptr_t lo = 0, hi = 0;
    bool overlaps(const byte_span & o) const { return lo < o.hi && o.lo < hi; }
    bool operator==(const byte_span &) const = default;
};

// Computes g's nodes in order on n_threads threads of `pool` (clamped to
// 1..pool.size(); the calling thread is thread 0).
//   - Before anything is computed, every node is checked: a null node, an
//     op/type combination supports_op() rejects, or a null data pointer on
//     a node or one of its sources => TSR_STATUS_FAILED, nothing computed.
//     View ops (VIEW, RESHAPE, PERMUTE, TRANSPOSE) and leafs compute nothing
//     and are skipped.
//   - Per-thread scratch is the largest node_work_size() of the graph, the
//     shared scratch the largest node_scratch::shared; if either cannot be
//     allocated => TSR_STATUS_ALLOC_FAILED. A node with shared scratch is
//     computed in two calls per thread with a barrier between them (see
//     compute_params) and always waits at a barrier first.
//   - cb (optional) is called on the calling thread before each computed
//     node, after every thread has finished the previous one; when it
//     returns true, no further node starts and the result is
//     TSR_STATUS_ABORTED (nodes already computed keep their results).
//   - Without cb, on more than one thread, a node that neither reads nor
//     writes memory written since the last barrier, nor writes memory read
//     since then, starts without a barrier (e.g. the Q, K and V products
//     of one token share one).
//   - On more than one thread, a small node of a cheap op
//     (computed_by_thread_0) is computed by thread 0 alone.
//   - A data error in a node (e.g. an index out of range) => the nodes after
//     the next barrier are skipped and the result is TSR_STATUS_FAILED.
// The pool stays usable after any outcome. Results are bit-identical for
// any n_threads. Not reentrant on one pool (calls are serialized).
tsr_status graph_compute(thread_pool & pool, const tsr_graph_view & g, int n_threads,
                         tsr_abort_callback cb = nullptr, void * cb_data = nullptr);

// What graph_compute works out about a graph before computing anything:
// the nodes that compute something (checked as graph_compute describes),
// the scratch they need, and for n_threads threads, with or without an
// abort callback, the barriers, prepare calls and read-ahead of the walk.
// It holds pointers to the graph's tensors and depends only on their ops,
// types, shapes, strides, sources and data pointers (not on the values):
// it stays valid while those are unchanged, the contract of a graph plan
// (backend.h). A plan keeps it, so that computing a decoded token's graph
// again does not check its some 600 nodes again (on synth 135M Q4_0 on 2
// threads that analysis was 4% of a token's time; cpu_backend.cpp).
struct graph_analysis {
    std::vector<tsr_tensor *> nodes; // the nodes that compute something, in order
    std::vector<char> sync;          // per node: wait at a barrier first
    std::vector<char> prepare;       // per node: a prepare call first (shared scratch, see compute_params)
    std::vector<char> serial;        // per node: thread 0 computes it alone (computed_by_thread_0; several threads)
    // Per node with a barrier: the bytes of the weights a thread that
    // arrives early prefetches (its own share, split as the kernels split
    // rows), or an empty range.
    std::vector<byte_span> prefetch;
    std::vector<std::array<byte_span, 2>> attn_prefetch; // per node: attention_prefetch of every key (empty when attn_masked)
    // Some FLASH_ATTN_EXT node has a mask that is a leaf (an input, e.g.
    // the causal mask of the decoded positions): each compute then plans
    // its read-ahead again from the mask's values (attention_prefetch with
    // visible_only).
    bool attn_masked = false;
    size_t work = 0;   // per-thread scratch bytes (the largest node_work_size)
    size_t shared = 0; // shared scratch bytes (the largest node_scratch::shared)
    int n_threads = 1; // the threads it was made for (>= 1)
    bool with_cb = false; // made for a compute with an abort callback (a barrier before every node)
};

// Fills `a` for graph g computed on n_threads threads (at least 1), with an
// abort callback when with_cb. TSR_STATUS_FAILED for a graph graph_compute
// refuses (null node, unsupported op, null data), ALLOC_FAILED when memory
// runs out; `a` is then unspecified.
tsr_status analyze_graph(const tsr_graph_view & g, int n_threads, bool with_cb, graph_analysis & a);

// Computes the graph `a` was made from, as graph_compute does, on
// a.n_threads threads of `pool`: TSR_STATUS_FAILED when the pool has fewer
// threads than that, or when cb is set and a was made without (or the
// other way round). The caller guarantees the graph is unchanged since.
tsr_status graph_compute(thread_pool & pool, const graph_analysis & a, tsr_abort_callback cb = nullptr,
                         void * cb_data = nullptr);

// The same on a pool of n_threads threads created for this call (for tests
// and one-off use; n_threads clamped to 1..thread_pool::max_threads).
// TSR_STATUS_FAILED when the threads cannot be started.
tsr_status graph_compute(const tsr_graph_view & g, int n_threads, tsr_abort_callback cb = nullptr,
                         void * cb_data = nullptr);

// For each node (nodes that compute something, in order): 1 when it must
// wait at a barrier for every thread to finish the nodes before it, 0 when
// it may start at once: it neither reads nor writes bytes written by a node
// since the last barrier, nor writes bytes such a node reads, and fewer
// than k_max_nodes_between_barriers nodes follow that barrier. The first
// node always waits. Used by graph_compute on more than one thread without
// an abort callback.
// serial (optional, per node): 1 for a node that thread 0 computes alone
// (computed_by_thread_0); two such nodes never need a barrier between them
// (one thread, in order), whatever bytes they share.
std::vector<char> barriers_before(const std::vector<tsr_tensor *> & nodes, const std::vector<char> & serial = {});

// Most bytes a node computed_by_thread_0 writes: 8 KiB, an RMS_NORM of
// 2048 floats takes some 0.2 us, about what a barrier costs (BM_barrier on
// Zen 5, 2 threads: 0.1-0.4 us, varying between sessions of the VM).
inline constexpr size_t k_thread_0_max_bytes = size_t{8} << 10;

// True when the graph walk on several threads computes `node` on thread 0
// alone rather than split between the threads: a cheap op per byte (ADD,
// MUL, SCALE, SILU, GELU, RMS_NORM, ROPE, GET_ROWS, SET_ROWS, CPY) writing
// at most k_thread_0_max_bytes (for SET_ROWS the rows it stores). A decoded
// token's chain of such ops (rope of K and Q, the stores into the cache,
// the residual ADD, RMS_NORM and weight MUL) then needs no barrier inside:
// synth 135M has 9 barriers a layer instead of 10. The results are the
// same bits (kernels do not depend on the split).
bool computed_by_thread_0(const tsr_tensor * node);

// Most nodes barriers_before lets follow one barrier: after that many a
// node waits anyway, so that finding the barriers takes time linear in the
// nodes (a graph of 1,400 independent products spent 10% of its compute
// time there, BM_mul_mat_repack; by the same rate, one of 100,000 would
// have spent some 10 s before computing anything).
// A barrier costs under a microsecond (BM_barrier), one per 64 nodes.
inline constexpr size_t k_max_nodes_between_barriers = 64;

// For each node (nodes that compute something, in order): 1 when it has
// shared scratch (has_shared) but need not fill it, because the last node
// before it with shared scratch filled it with the same bytes (same_prepared
// in compute.hpp) from sources no node since then, that one included, has
// written (byte ranges of src[1], the activations a float GEMM packs or a
// K-quant GEMM quantizes).
// graph_compute then skips that node's prepare call and the barrier the
// call needs (a 1B F16 prompt: the k and v products reuse q's packed
// activations, up reuses gate's).
std::vector<char> prepared_before(const std::vector<tsr_tensor *> & nodes, const std::vector<char> & has_shared);

// Most bytes of each of an attention's K and V read ahead (L2 of 1 MiB on
// Zen 4: room for both and the streaming weights).
inline constexpr size_t k_attn_prefetch_bytes = size_t{256} << 10;

// Keys and values read ahead of attention. For each node (nodes that
// compute something, in order): the spans every thread software-prefetches
// into L2 just before computing it. Each FLASH_ATTN_EXT node's K and V
// (src[1], src[2]: cache views, whose bytes were mostly written many tokens
// ago and left the caches while the weights streamed) are read ahead: the
// first k_attn_prefetch_bytes of each view's byte range (at most), cut into
// equal shares of whole 64-byte lines in address order, spread over the
// nodes after the previous FLASH_ATTN_EXT node up to the one before it
// (node itself when there are none); [0] keys, [1] values. A view whose
// range does not fit in an address gets none. Prefetching never faults, so
// the spans need not be mapped. (On Zen 4, synth 135M Q4_0 tg32 after 512
// tokens: 1.28x on 1 thread, 1.06x on 2; graph_compute.cpp.)
// visible_only: a node whose mask is a leaf reads ahead only the keys
// [0, flash_attn_ext_visible_keys) of its views (reading the mask's
// values, so only when they are set, i.e. at compute time; should a node
// of the graph write into the mask, only what is read ahead changes, never
// a result), and nothing when every key is masked: a decoded token's views
// are the cache rounded up to 256 positions, most of them masked (synth
// 135M tg128 read 5.9 MB ahead a token, 1.5 MB on average clipped). (Zen
// 5, 135M Q4_0, clipped against whole views computed alternately in one
// process: tg128 1.015 and 1.020 on 1 thread, 1.003 and 1.005 on 2; after
// 300 tokens 1.000 and 1.010.)
std::vector<std::array<byte_span, 2>> attention_prefetch(const std::vector<tsr_tensor *> & nodes, bool visible_only);

} // namespace tessera::cpu

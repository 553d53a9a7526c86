// backends/cpu/compute.hpp — the CPU backend's per-node kernels and graph
// walk. Internal to the CPU backend (not a public header).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "tessera/tensor.h"

namespace tessera::cpu {

// One thread's remaining work items in a node, [front, back) packed as
// front | back << 32 | 1 << 63 once set up, zero before; on its own cache
// line (ops/work_queue.hpp).
struct alignas(64) work_slot {
    std::atomic<uint64_t> range{0};
};

// What a thread's scratch (compute_params::wdata) holds for the next node:
// activation columns a MUL_MAT kernel quantized there, so that the next
// MUL_MAT over the same activations tensor (a layer's q, k and v products
// of one normalized vector; gate and up) takes them instead of quantizing
// again. The graph walk keeps one per thread for the whole walk; every
// field is defined by the kernel that wrote it (memo_holds, memo_record).
struct scratch_memo {
    const tsr_tensor * node = nullptr; // the node whose kernel wrote the scratch last
    const tsr_tensor * src = nullptr;  // the activations tensor quantized
    int layout = 0;                    // the kernel's format tag
    int64_t batch = -1, n0 = 0, n1 = 0; // which of src's columns (kernel-defined)
};

// What one thread sees while computing one node.
struct compute_params {
    int ith = 0;            // this thread's index, 0..nth-1
    int nth = 1;            // threads working on this node
    void * wdata = nullptr; // this thread's scratch, wsize bytes, 64-byte aligned
    size_t wsize = 0;
    // nth slots shared by the node's threads, thread v's at
    // slots[v * slot_stride], all zero when the node starts: the work items
    // each thread has left (ops/work_queue.hpp; a kernel makes at most one
    // work_queue per node). Null: each thread computes a fixed share.
    work_slot * slots = nullptr;
    size_t slot_stride = 1;
    // Scratch shared by the node's threads (shared_size bytes, 64-byte
    // aligned), for a node with node_scratch::shared > 0. Such a node is
    // computed in two calls per thread: first with prepare true (each
    // thread fills its part of the shared scratch, e.g. packed activations),
    // then, after a barrier, with prepare false (every thread reads all of
    // it). Other nodes are called once, with prepare false.
    void * shared = nullptr;
    size_t shared_size = 0;
    bool prepare = false;
    // This thread's scratch memo and the node it computed just before this
    // one (graph walk); null elsewhere, and then nothing is reused.
    scratch_memo * memo = nullptr;
    const tsr_tensor * prev = nullptr;
};

// True when p's scratch holds columns [n0, n1) of batch `batch` of src in
// format `layout`, written by the node computed just before on this thread:
// with no other node between, src's bytes (read by both nodes) and the
// scratch are as that node left them.
inline bool memo_holds(const compute_params & p, const tsr_tensor * src, int layout, int64_t batch, int64_t n0, int64_t n1) {
    const scratch_memo * m = p.memo;
    return m != nullptr && p.prev != nullptr && m->node == p.prev && m->src == src && m->layout == layout &&
           m->batch == batch && m->n0 == n0 && m->n1 == n1;
}

// Records that `node` left columns [n0, n1) of batch `batch` of src, in
// format `layout`, in p's scratch.
inline void memo_record(const compute_params & p, const tsr_tensor * node, const tsr_tensor * src, int layout, int64_t batch,
                        int64_t n0, int64_t n1) {
    if (p.memo != nullptr) *p.memo = scratch_memo{node, src, layout, batch, n0, n1};
}

// Scratch bytes a node needs: per_thread for each thread (compute_params::
// wdata), shared once for all of them (compute_params::shared; 0 for a
// node computed in one call). Both independent of the number of threads.
struct node_scratch {
    size_t per_thread = 0;
    size_t shared = 0;
};

// True for ops that compute nothing: NONE (leafs) and the views VIEW,
// RESHAPE, PERMUTE, TRANSPOSE (their data aliases the source).
bool op_is_noop(int32_t op);

// True for ops whose kernels split the rows of dst statically: thread ith
// computes rows split_items(count_rows(dst), ith, nth) (ops/
// tensor_access.hpp) and, from a source of dst's shape, reads only the rows
// it computes (ADD, MUL, SCALE, SILU, GELU, RMS_NORM). The graph walk lets
// such a node read the output of another such node of the same shape
// without a barrier between them: each thread reads only what it wrote.
bool op_splits_rows(int32_t op);

// True when `prev` and `node` both have shared scratch (node_scratch::
// shared) and node's prepare call would write there what prev's wrote,
// provided the sources prev's prepare read are unchanged in between (two
// float or K-quant GEMMs over the same activations: ops/ops.hpp
// mul_mat_same_prepared).
// The graph walk then skips node's prepare call and its barrier.
bool same_prepared(const tsr_tensor * prev, const tsr_tensor * node);

// True when compute_forward can compute `node` (op and type combination,
// shapes consistent with the op's definition in core/ops.hpp); never throws,
// never crashes on odd input (null node, null sources, invalid type ids).
// True for the no-op ops. Does not look at data pointers.
bool supports_op(const tsr_tensor * node);

// Scratch bytes each thread needs for `node` (0 for most ops, and for nodes
// supports_op rejects). Independent of the number of threads.
size_t node_work_size(const tsr_tensor * node);

// Both scratch sizes of `node`; false (sizes 0) when supports_op rejects
// the node or its scratch sizes cannot be computed.
bool checked_scratch(const tsr_tensor * node, node_scratch & s);

// Computes this thread's share of `node` (row range ith of nth). All nth
// threads call it for the same node (twice, prepare true then false, for a
// node with shared scratch: see compute_params); the caller puts a barrier
// between calls. Returns false on a data error found while computing (e.g.
// an index out of range in GET_ROWS/SET_ROWS), for an unsupported node, a
// null data pointer (node or source), scratch (per thread or shared)
// smaller than checked_scratch gives, or prepare set for a node that has no
// shared scratch; the graph compute
// then reports FAILED. Never throws. The split of work between threads never
// changes the result: every output element is computed by the same
// arithmetic in the same order for any nth (bit-identical results).
bool compute_forward(const compute_params & p, tsr_tensor * node);

// compute_forward without its checks, for a node that has passed them
// already (graph_compute checks every node once, before the threads start,
// instead of once per thread): supports_op, data of the node and its
// sources set, p.wsize and p.shared_size at least checked_scratch's sizes,
// p.prepare only with shared scratch, not a no-op.
bool compute_checked_node(const compute_params & p, tsr_tensor * node);

} // namespace tessera::cpu

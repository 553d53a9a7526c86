// backends/cpu/compute.hpp — the CPU backend's per-node kernels and graph
// walk. Internal to the CPU backend (not a public header).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tessera/tensor.h"

namespace tessera::cpu {

// What one thread sees while computing one node.
struct compute_params {
    int ith = 0;            // this thread's index, 0..nth-1
    int nth = 1;            // threads working on this node
    void * wdata = nullptr; // this thread's scratch, wsize bytes, 64-byte aligned
    size_t wsize = 0;
};

// True when compute_forward can compute `node` (op and type combination);
// never throws, never crashes on odd input.
bool supports_op(const tsr_tensor * node);

// Scratch bytes each thread needs for `node` (0 for most ops).
size_t node_work_size(const tsr_tensor * node);

// Computes this thread's share of `node` (row range ith of nth). All nth
// threads call it for the same node; the caller puts a barrier between nodes.
// Returns false on a data error found while computing (e.g. an index out of
// range in GET_ROWS/SET_ROWS); the graph compute then reports FAILED.
bool compute_forward(const compute_params & p, tsr_tensor * node);

} // namespace tessera::cpu

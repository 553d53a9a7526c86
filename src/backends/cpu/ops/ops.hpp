// backends/cpu/ops/ops.hpp — the per-op entry points behind compute.hpp's
// dispatch. Each op has three functions:
//   <op>_supported(node)      op/type/shape combination this kernel handles
//                             (node and its sources are non-null and have
//                             valid types and positive ne when called)
//   <op>_work_size(node)      per-thread scratch bytes (only where non-zero)
//   compute_<op>(p, node)     this thread's share; false on a data error
// Semantics and op_params layouts are those of include/tessera/core/ops.hpp.
// Internal to the CPU backend.
#pragma once

#include <cstddef>

#include "backends/cpu/compute.hpp"
#include "tessera/tensor.h"

namespace tessera::cpu {

// ADD, MUL (binary.cpp)
bool binary_supported(const tsr_tensor * node);
bool compute_add(const compute_params & p, tsr_tensor * node);
bool compute_mul(const compute_params & p, tsr_tensor * node);

// SCALE, SILU, GELU (unary.cpp)
bool unary_supported(const tsr_tensor * node);
bool compute_scale(const compute_params & p, tsr_tensor * node);
bool compute_silu(const compute_params & p, tsr_tensor * node);
bool compute_gelu(const compute_params & p, tsr_tensor * node);

// RMS_NORM (rms_norm.cpp)
bool rms_norm_supported(const tsr_tensor * node);
bool compute_rms_norm(const compute_params & p, tsr_tensor * node);

// ROPE (rope.cpp)
bool rope_supported(const tsr_tensor * node);
bool compute_rope(const compute_params & p, tsr_tensor * node);

// SOFT_MAX (soft_max.cpp)
bool soft_max_supported(const tsr_tensor * node);
size_t soft_max_work_size(const tsr_tensor * node);
bool compute_soft_max(const compute_params & p, tsr_tensor * node);

// GET_ROWS (get_rows.cpp)
bool get_rows_supported(const tsr_tensor * node);
size_t get_rows_work_size(const tsr_tensor * node);
bool compute_get_rows(const compute_params & p, tsr_tensor * node);

// SET_ROWS (set_rows.cpp)
bool set_rows_supported(const tsr_tensor * node);
size_t set_rows_work_size(const tsr_tensor * node);
bool compute_set_rows(const compute_params & p, tsr_tensor * node);

// CPY, CONT (copy.cpp)
bool cpy_supported(const tsr_tensor * node);
size_t cpy_work_size(const tsr_tensor * node);
bool compute_cpy(const compute_params & p, tsr_tensor * node);
bool cont_supported(const tsr_tensor * node);
bool compute_cont(const compute_params & p, tsr_tensor * node);

// ARGMAX (argmax.cpp)
bool argmax_supported(const tsr_tensor * node);
bool compute_argmax(const compute_params & p, tsr_tensor * node);

// MUL_MAT (mul_mat.cpp)
bool mul_mat_supported(const tsr_tensor * node);
size_t mul_mat_work_size(const tsr_tensor * node);
// Shared scratch (compute_params::shared): nonzero for the float GEMM path,
// whose prepare call packs the activations once for all threads, and for
// the quantized GEMM paths of K-quant and repacked weights, whose prepare
// call quantizes them once.
size_t mul_mat_shared_size(const tsr_tensor * node);
// For two MUL_MAT nodes: true when both have shared scratch and node's
// prepare call would write what prev's wrote, provided prev's b was not
// written in between: the same path and the same b (address, type, shape,
// strides) packed or quantized in the same layout (a layer's q, k and v products of one normalized prompt;
// gate and up).
bool mul_mat_same_prepared(const tsr_tensor * prev, const tsr_tensor * node);
bool compute_mul_mat(const compute_params & p, tsr_tensor * node);

// FLASH_ATTN_EXT (flash_attn.cpp)
bool flash_attn_ext_supported(const tsr_tensor * node);
size_t flash_attn_ext_work_size(const tsr_tensor * node);
// Shared scratch (compute_params::shared): the keys transposed per block
// by the prepare call, read by every thread's scores; 0 on portable builds.
size_t flash_attn_ext_shared_size(const tsr_tensor * node);
// One past the last key (row of src[1] and src[2]) that any query row of
// the node can see: the last entry of a mask row that is not -inf, the
// largest over the mask rows the node uses; n_kv without a mask, 0 when
// every key is masked. Reads the mask's values (a causal mask's masked tail
// is skipped by the kernels, so none of those keys is read).
int64_t flash_attn_ext_visible_keys(const tsr_tensor * node);
bool compute_flash_attn_ext(const compute_params & p, tsr_tensor * node);

} // namespace tessera::cpu

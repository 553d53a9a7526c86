// backends/cpu/ops/mul_mat_repack.hpp — MUL_MAT whose weights (src[0]) are
// repacked (row-interleaved, ops/repack.hpp): both token generation (few
// columns) and prompt processing (GEMM) read the interleaved groups of 8
// rows (Q4_0 in AVX512-VNNI builds: 16) directly; the GEMM on AMX tiles
// where the build and the processor have them. mul_mat.cpp dispatches here exactly when is_repacked(a).
// Internal to the CPU kernels.
#pragma once

#include <cstddef>

#include "backends/cpu/ops/mul_mat_impl.hpp"

namespace tessera::cpu {

// Extra conditions of this path on a MUL_MAT node whose src[0] is
// repacked (mul_mat_supported has checked the rest): dst packed along m
// (nb[0] = 4) with 4-byte aligned data and strides.
bool mul_mat_repack_supported(const tsr_tensor * node);

// Per-thread scratch bytes (independent of the thread count).
size_t mul_mat_repack_work_size(const mm_dims & d);

// A GEMM (N >= k_gemm_min_n) quantizes its columns once for all threads
// into the node's shared scratch (mul_mat_repack_shared_size bytes; 0 for
// fewer columns): each thread a share of the micro-tiles in
// mul_mat_repack_prepare (false: no GEMM, or no shared scratch), then
// mul_mat_repack reads all of them. Two GEMMs over the same b with the
// same mul_mat_repack_prepared_layout (tile width and sum shift) quantize
// the same bytes (mul_mat_same_prepared). The size throws
// std::length_error when it overflows.
size_t mul_mat_repack_shared_size(const mm_dims & d);
bool mul_mat_repack_prepare(const compute_params & p, const mm_dims & d);
int mul_mat_repack_prepared_layout(const mm_dims & d);

// Thread p.ith's share of dst = a^T b for repacked a (Q8_0, Q4_0 or Q5_0).
// Activations are quantized to Q8_0 (q8_act.hpp); per output element the
// block terms float(isum_b) * (d_w * d_x) are added in block order into one
// F32 accumulator, the same arithmetic for any split of the work, any
// number of columns and every instruction set. Returns false for another
// weight type, or for a GEMM without mul_mat_repack_prepare's columns. With N >= k_gemm_min_n columns in builds with AMX
// (TSR_CPU_AMX, where Linux grants the tile state and tuning().amx) the
// integer block products are computed on AMX tiles: the same bits.
bool mul_mat_repack(const compute_params & p, const mm_dims & d);

// Whether mul_mat_repack computes GEMMs (N >= k_gemm_min_n) of Q8_0/Q4_0/
// Q5_0/Q5_1 on AMX tiles in this process (the build, the OS grant,
// tuning().amx); the K-quant GEMMs (gemm_k.cpp) follow the same switch.
bool mul_mat_repack_uses_amx();

// Whether the GEMMs (N >= k_gemm_min_n) of repacked F16 and BF16 weights
// run on AMX-BF16 tiles in this process (gemm_f_amx.cpp: TSR_CPU_AMX_BF16
// builds, then as mul_mat_repack_uses_amx). Their results then differ from the
// one-column kernel's in the last bits (see there); defined in
// gemm_f_amx.cpp.
bool mul_mat_repack_float_uses_amx();

// The format of the quantized activation columns these kernels leave in a
// thread's scratch for weights of type `type` (scratch_memo::layout, so
// the next product over the same activations may take them): equal for
// the types whose column sums are stored shifted alike; 0 for a type these
// kernels do not take.
int repack_act_layout(int32_t type);

} // namespace tessera::cpu

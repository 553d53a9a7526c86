// backends/cpu/ops/set_rows.cpp — SET_ROWS: writes rows of src into dst at
// the row indices in idx (how a KV cache is filled).
//   node: a view of dst (same ne/nb); src[0] = dst, src[1] = src, src[2] = idx
//   dst:  [E, R, D2, D3] of F32/F16/BF16 (any strides) or a block type with
//         from_float (row-contiguous)
//   src:  F32 [E, n, D2, D3], any strides; idx: I32 or I64 [n, D2, D3]
// dst row (idx[i, i2, i3], i2, i3) = src row (i, i2, i3), converted with the
// core's conversions (round to nearest even / reference quantizers).
// Every index is checked before anything is written: one outside 0..R-1
// makes the compute return false with dst untouched. Each dst row is written
// by one thread only (rows are dealt out by destination), so duplicate
// indices are race-free and the last one in logical order wins.
#include <cstring>

#include "backends/cpu/ops/ops.hpp"
#include "backends/cpu/ops/simd.hpp"
#include "backends/cpu/ops/tensor_access.hpp"

namespace tessera::cpu {

bool set_rows_supported(const tsr_tensor * node) {
    const tsr_tensor * dst = node->src[0];
    const tsr_tensor * src = node->src[1];
    const tsr_tensor * idx = node->src[2];
    if (node->type != dst->type || src->type != TSR_TYPE_F32) return false;
    if (idx->type != TSR_TYPE_I32 && idx->type != TSR_TYPE_I64) return false;
    const type_traits & tr = get_type_traits(node->type);
    if (!is_float_type(node->type) && (tr.from_float == nullptr || node->nb[0] != tr.type_size)) return false;
    for (int i = 0; i < TSR_MAX_DIMS; ++i) {
        if (node->ne[i] != dst->ne[i]) return false;
    }
    return src->ne[0] == node->ne[0] && src->ne[2] == node->ne[2] && src->ne[3] == node->ne[3] &&
           idx->ne[0] == src->ne[1] && idx->ne[1] == node->ne[2] && idx->ne[2] == node->ne[3] && idx->ne[3] == 1;
}

// For block types: the source row as F32 and its quantized bytes.
size_t set_rows_work_size(const tsr_tensor * node) {
    if (is_float_type(node->type)) return 0;
    return align64(static_cast<size_t>(node->ne[0]) * sizeof(float)) +
           align64(row_size(static_cast<type>(node->type), node->ne[0]));
}

bool compute_set_rows(const compute_params & p, tsr_tensor * dst) {
    const tsr_tensor * src = dst->src[1];
    const tsr_tensor * idx = dst->src[2];
    const int64_t ne0 = dst->ne[0];
    const int64_t n_dst_rows = dst->ne[1];
    const int64_t n_src_rows = count_rows(src);

    for (int64_t r = 0; r < n_src_rows; ++r) {
        const row_index ri = unravel_row(src, r);
        const int64_t target = read_index(idx, ri.i1, ri.i2, ri.i3);
        if (target < 0 || target >= n_dst_rows) return false;
    }

    const bool block_type = !is_float_type(dst->type);
    const type_traits & tr = get_type_traits(dst->type);
    auto * row_f32 = static_cast<float *>(p.wdata);
    char * row_q = static_cast<char *>(p.wdata) + align64(static_cast<size_t>(ne0) * sizeof(float));
    const size_t q_bytes = block_type ? row_size(static_cast<type>(dst->type), ne0) : 0;

    for (int64_t r = 0; r < n_src_rows; ++r) {
        const row_index ri = unravel_row(src, r);
        const int64_t target = read_index(idx, ri.i1, ri.i2, ri.i3);
        const int64_t owner_key = target + n_dst_rows * (ri.i2 + dst->ne[2] * ri.i3);
        if (owner_key % p.nth != p.ith) continue;
        const char * s = row_ptr(src, ri);
        char * d = row_ptr(dst, target, ri.i2, ri.i3);
        if (block_type) {
            for (int64_t i = 0; i < ne0; ++i) row_f32[i] = read_f32(s + static_cast<size_t>(i) * src->nb[0]);
            tr.from_float(row_f32, row_q, ne0);
            std::memcpy(d, row_q, q_bytes);
        } else {
            int64_t i = 0;
#ifdef TSR_CPU_AVX2
            // F32 -> F16 eight at a time (vcvtps2ph, round to nearest even:
            // the same bits as the core's f32_to_f16, NaNs quieted alike).
            if (dst->type == TSR_TYPE_F16 && dst->nb[0] == 2 && src->nb[0] == 4) {
                for (; i + 8 <= ne0; i += 8) {
                    __m256 v;
                    std::memcpy(&v, s + static_cast<size_t>(i) * 4, sizeof v);
                    const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                    std::memcpy(d + static_cast<size_t>(i) * 2, &h, sizeof h);
                }
            }
#endif
            for (; i < ne0; ++i) {
                store_from_f32(dst->type, d + static_cast<size_t>(i) * dst->nb[0],
                               read_f32(s + static_cast<size_t>(i) * src->nb[0]));
            }
        }
    }
    return true;
}

} // namespace tessera::cpu

// backends/cpu/ops/get_rows.cpp — GET_ROWS: rows of a picked by index,
// converted to F32 (embedding lookup).
//   a:   [E, R, A2, A3] any type with to_float (block types row-contiguous)
//   idx: I32 or I64 [n, A2, A3], values in 0..R-1
//   dst: F32 [E, n, A2, A3]; dst row (i, i2, i3) = a row (idx[i, i2, i3], i2, i3)
// An index outside 0..R-1 makes the compute return false (no crash).
#include <cstring>

#include "backends/cpu/ops/ops.hpp"
#include "backends/cpu/ops/tensor_access.hpp"

namespace tessera::cpu {

bool get_rows_supported(const tsr_tensor * node) {
    const tsr_tensor * a = node->src[0];
    const tsr_tensor * idx = node->src[1];
    if (node->type != TSR_TYPE_F32) return false;
    if (idx->type != TSR_TYPE_I32 && idx->type != TSR_TYPE_I64) return false;
    const type_traits & tr = get_type_traits(a->type);
    if (tr.to_float == nullptr) return false;
    if (!is_float_type(a->type) && a->nb[0] != tr.type_size) return false; // block rows must be packed
    return node->ne[0] == a->ne[0] && node->ne[1] == idx->ne[0] && node->ne[2] == idx->ne[1] &&
           node->ne[3] == idx->ne[2] && idx->ne[3] == 1 && a->ne[2] == node->ne[2] && a->ne[3] == node->ne[3];
}

// A converted row (E floats) and a copy of one source row (for block rows
// whose address is not aligned for the block struct).
size_t get_rows_work_size(const tsr_tensor * node) {
    const tsr_tensor * a = node->src[0];
    const size_t row_f32 = align64(static_cast<size_t>(node->ne[0]) * sizeof(float));
    if (is_float_type(a->type)) return row_f32;
    return row_f32 + align64(row_size(static_cast<type>(a->type), a->ne[0]));
}

bool compute_get_rows(const compute_params & p, tsr_tensor * dst) {
    const tsr_tensor * a = dst->src[0];
    const tsr_tensor * idx = dst->src[1];
    const int64_t ne0 = dst->ne[0];
    const type_traits & tr = get_type_traits(a->type);
    const bool dst_packed = packed_aligned_rows(dst, 4, alignof(float));
    const bool a_float = is_float_type(a->type);
    const size_t a_elem = a_float ? float_type_size(a->type) : 0;
    const bool a_packed = !a_float || packed_aligned_rows(a, a_elem, 2);
    const size_t a_row_bytes = row_size(static_cast<type>(a->type), ne0);
    auto * row_f32 = static_cast<float *>(p.wdata);
    char * row_copy = static_cast<char *>(p.wdata) + align64(static_cast<size_t>(ne0) * sizeof(float));

    const item_range rows = split_items(count_rows(dst), p.ith, p.nth);
    for (int64_t r = rows.begin; r < rows.end; ++r) {
        const row_index ri = unravel_row(dst, r);
        const int64_t src_row = read_index(idx, ri.i1, ri.i2, ri.i3);
        if (src_row < 0 || src_row >= a->ne[1]) return false;
        const char * src = row_ptr(a, src_row, ri.i2, ri.i3);
        char * d = row_ptr(dst, ri);
        if (a_packed) {
            if (!a_float && reinterpret_cast<uintptr_t>(src) % 2 != 0) { // block structs hold an f16 scale
                std::memcpy(row_copy, src, a_row_bytes);
                src = row_copy;
            }
            if (dst_packed) {
                tr.to_float(src, reinterpret_cast<float *>(d), ne0);
            } else {
                tr.to_float(src, row_f32, ne0);
                for (int64_t i = 0; i < ne0; ++i) write_f32(d + static_cast<size_t>(i) * dst->nb[0], row_f32[i]);
            }
        } else {
            for (int64_t i = 0; i < ne0; ++i) {
                write_f32(d + static_cast<size_t>(i) * dst->nb[0],
                          load_as_f32(a->type, src + static_cast<size_t>(i) * a->nb[0]));
            }
        }
    }
    return true;
}

} // namespace tessera::cpu

// backends/cpu/ops/binary.cpp — element-wise ADD and MUL with b repeated
// (broadcast) to a's shape: dst[i] = a[i] op b[i mod b.ne] per dimension.
#include "backends/cpu/ops/ops.hpp"
#include "backends/cpu/ops/tensor_access.hpp"

namespace tessera::cpu {

namespace {

bool same_ne(const tsr_tensor * x, const tsr_tensor * y) {
    for (int i = 0; i < TSR_MAX_DIMS; ++i) {
        if (x->ne[i] != y->ne[i]) return false;
    }
    return true;
}

struct op_add {
    static float apply(float x, float y) { return x + y; }
};
struct op_mul {
    static float apply(float x, float y) { return x * y; }
};

template <class Op>
bool compute_binary(const compute_params & p, tsr_tensor * dst) {
    const tsr_tensor * a = dst->src[0];
    const tsr_tensor * b = dst->src[1];
    const int64_t ne0 = dst->ne[0];
    const int64_t bne0 = b->ne[0];
    const bool packed_rows = packed_aligned_rows(dst, 4, alignof(float)) &&
                             packed_aligned_rows(a, 4, alignof(float)) &&
                             packed_aligned_rows(b, 4, alignof(float));

    const item_range rows = split_items(count_rows(dst), p.ith, p.nth);
    for (int64_t r = rows.begin; r < rows.end; ++r) {
        const row_index ri = unravel_row(dst, r);
        char * d = row_ptr(dst, ri);
        const char * x = row_ptr(a, ri);
        const char * y = row_ptr(b, ri.i1 % b->ne[1], ri.i2 % b->ne[2], ri.i3 % b->ne[3]);
        if (packed_rows && bne0 == ne0) {
            auto * df = reinterpret_cast<float *>(d);
            const auto * xf = reinterpret_cast<const float *>(x);
            const auto * yf = reinterpret_cast<const float *>(y);
            for (int64_t i = 0; i < ne0; ++i) df[i] = Op::apply(xf[i], yf[i]);
        } else if (packed_rows && bne0 == 1) {
            auto * df = reinterpret_cast<float *>(d);
            const auto * xf = reinterpret_cast<const float *>(x);
            const float yv = read_f32(y);
            for (int64_t i = 0; i < ne0; ++i) df[i] = Op::apply(xf[i], yv);
        } else {
            for (int64_t i = 0; i < ne0; ++i) {
                const float xv = read_f32(x + static_cast<size_t>(i) * a->nb[0]);
                const float yv = read_f32(y + static_cast<size_t>(i % bne0) * b->nb[0]);
                write_f32(d + static_cast<size_t>(i) * dst->nb[0], Op::apply(xv, yv));
            }
        }
    }
    return true;
}

} // namespace

bool binary_supported(const tsr_tensor * node) {
    const tsr_tensor * a = node->src[0];
    const tsr_tensor * b = node->src[1];
    if (node->type != TSR_TYPE_F32 || a->type != TSR_TYPE_F32 || b->type != TSR_TYPE_F32) return false;
    if (!same_ne(node, a)) return false;
    for (int i = 0; i < TSR_MAX_DIMS; ++i) {
        if (a->ne[i] % b->ne[i] != 0) return false;
    }
    return true;
}

bool compute_add(const compute_params & p, tsr_tensor * node) {
    return compute_binary<op_add>(p, node);
}

bool compute_mul(const compute_params & p, tsr_tensor * node) {
    return compute_binary<op_mul>(p, node);
}

} // namespace tessera::cpu

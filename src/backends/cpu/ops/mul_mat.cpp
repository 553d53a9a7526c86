// backends/cpu/ops/mul_mat.cpp — MUL_MAT: dst[m, n] = sum_k a[k, m] * b[k, n]
//   a:   weights [K, M, A2, A3] of F32, F16, BF16 (any strides) or Q8_0,
//        Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K (row-contiguous)
//   b:   activations F32 [K, N, B2, B3], any strides
//   dst: F32 [M, N, B2, B3]; batch (i2, i3) uses a's (i2 / (B2/A2), i3 / (B3/A3))
//
// Chooses the path for a node (mul_mat_impl.hpp): Q8_0/Q4_0/Q5_0 weights
// repacked by the CPU_REPACK buffer type (repack.hpp) always take
// mul_mat_repack.cpp, repacked F16/BF16 weights matvec_f or gemm_f,
// repacked Q4_K/Q5_K/Q6_K weights mul_mat_k_repack.cpp or gemm_k; else
// with AVX2/FMA/F16C the vector paths when dst is packed along m, else the
// portable kernel (K-quants: mul_mat_k.cpp / gemm_k.cpp with AVX2, else
// the portable kernel, all with the operations of vec_dot_k.hpp). The
// choice depends only on the node.
#include <algorithm>
#include <cstdint>

#include "backends/cpu/ops/mul_mat_impl.hpp"
#include "backends/cpu/ops/mul_mat_repack.hpp"
#include "backends/cpu/ops/repack.hpp"
#include "backends/cpu/ops/ops.hpp"
#include "backends/cpu/ops/simd.hpp"
#include "backends/cpu/ops/vec_dot_k.hpp"
#include "tessera/core/tensor.hpp"
#include "tessera/core/types.hpp"

namespace tessera::cpu {

namespace {

enum class mm_path { generic, matvec_f, matvec_q, gemm_f, gemm_q, repack, matvec_k, gemm_k, matvec_k_repack };

bool is_quant_weight(int32_t t) {
    return t == TSR_TYPE_Q8_0 || t == TSR_TYPE_Q4_0 || t == TSR_TYPE_Q5_0 || t == TSR_TYPE_Q5_1;
}

mm_path choose_path(const tsr_tensor * node) {
    const tsr_tensor * a = node->src[0];
    const tsr_tensor * b = node->src[1];
    if (is_repacked(a)) { // row-interleaved weights (repack.hpp; mul_mat_supported checked dst)
        // Q8_0/Q4_0/Q5_0: every variant; float and K-quants: only builds with AVX2/F16C repack them.
        if (is_k_quant(a->type)) return b->ne[1] >= k_gemm_min_n ? mm_path::gemm_k : mm_path::matvec_k_repack;
        if (!is_float_type(a->type)) return mm_path::repack;
        return b->ne[1] >= k_gemm_min_n ? mm_path::gemm_f : mm_path::matvec_f;
    }
#ifdef TSR_CPU_AVX2
    // dst packed along m (as MUL_MAT creates it); 4-byte aligned columns.
    if (node->nb[0] != sizeof(float) || reinterpret_cast<uintptr_t>(node->data) % alignof(float) != 0 ||
        node->nb[1] % alignof(float) != 0 || node->nb[2] % alignof(float) != 0 || node->nb[3] % alignof(float) != 0) {
        return mm_path::generic;
    }
    const bool gemm = b->ne[1] >= k_gemm_min_n;
    if (is_k_quant(a->type)) return gemm ? mm_path::gemm_k : mm_path::matvec_k;
    if (is_quant_weight(a->type)) {
        // matvec_q addresses 8 rows by int32 byte offsets.
        if (a->nb[1] > static_cast<uint64_t>(INT32_MAX / 8)) return mm_path::generic;
        return gemm ? mm_path::gemm_q : mm_path::matvec_q;
    }
    if (is_float_type(a->type)) return gemm ? mm_path::gemm_f : mm_path::matvec_f;
#endif
    return mm_path::generic;
}

} // namespace

bool mul_mat_supported(const tsr_tensor * node) {
    const tsr_tensor * a = node->src[0];
    const tsr_tensor * b = node->src[1];
    if (node->type != TSR_TYPE_F32 || b->type != TSR_TYPE_F32) return false;
    const bool quant = is_quant_weight(a->type) || is_k_quant(a->type);
    if (!is_float_type(a->type) && !quant) return false;
    if (quant && a->nb[0] != get_type_traits(a->type).type_size) return false;
    if (a->ne[0] != b->ne[0]) return false;
    if (is_repacked(a) && !mul_mat_repack_supported(node)) return false;
    if (b->ne[2] % a->ne[2] != 0 || b->ne[3] % a->ne[3] != 0) return false;
    return node->ne[0] == a->ne[1] && node->ne[1] == b->ne[1] && node->ne[2] == b->ne[2] && node->ne[3] == b->ne[3];
}

size_t mul_mat_work_size(const tsr_tensor * node) {
    auto * dst = const_cast<tsr_tensor *>(node); // mm_dims_of only reads
    switch (choose_path(node)) {
    case mm_path::matvec_f: return matvec_f_work_size(mm_dims_of(dst));
    case mm_path::matvec_q: return matvec_q_work_size(mm_dims_of(dst));
    case mm_path::gemm_f: return gemm_f_work_size(mm_dims_of(dst));
    case mm_path::gemm_q: return gemm_q_work_size(mm_dims_of(dst));
    case mm_path::repack: return mul_mat_repack_work_size(mm_dims_of(dst));
    case mm_path::matvec_k: return mul_mat_k_work_size(mm_dims_of(dst));
    case mm_path::gemm_k: return gemm_k_work_size(mm_dims_of(dst));
    case mm_path::matvec_k_repack: return mul_mat_k_repack_work_size(mm_dims_of(dst));
    case mm_path::generic: break;
    }
    return mul_mat_generic_work_size(node);
}

size_t mul_mat_shared_size(const tsr_tensor * node) {
    auto * dst = const_cast<tsr_tensor *>(node); // mm_dims_of only reads
    switch (choose_path(node)) {
    case mm_path::gemm_f: return gemm_f_shared_size(mm_dims_of(dst));
    case mm_path::gemm_k: return gemm_k_shared_size(mm_dims_of(dst));
    case mm_path::repack: return mul_mat_repack_shared_size(mm_dims_of(dst));
    default: return 0;
    }
}

bool mul_mat_same_prepared(const tsr_tensor * prev, const tsr_tensor * node) {
    const mm_path path = choose_path(node);
    if (choose_path(prev) != path || (path != mm_path::gemm_f && path != mm_path::gemm_k && path != mm_path::repack)) return false;
    const tsr_tensor * b0 = prev->src[1];
    const tsr_tensor * b1 = node->src[1];
    if (b0->data != b1->data || b0->type != b1->type || !same_shape(b0, b1) ||
        !std::equal(b0->nb, b0->nb + TSR_MAX_DIMS, b1->nb)) {
        return false;
    }
    auto * p0 = const_cast<tsr_tensor *>(prev); // mm_dims_of only reads
    auto * p1 = const_cast<tsr_tensor *>(node);
    if (path == mm_path::gemm_k) return gemm_k_prepared_layout(mm_dims_of(p0)) == gemm_k_prepared_layout(mm_dims_of(p1));
    if (path == mm_path::repack) {
        // (Only GEMMs have shared scratch: both nodes' columns alike.)
        return b0->ne[1] >= k_gemm_min_n && mul_mat_repack_prepared_layout(mm_dims_of(p0)) == mul_mat_repack_prepared_layout(mm_dims_of(p1));
    }
    return gemm_f_prepared_layout(mm_dims_of(p0)) == gemm_f_prepared_layout(mm_dims_of(p1));
}

bool compute_mul_mat(const compute_params & p, tsr_tensor * dst) {
    if (p.prepare) {
        switch (choose_path(dst)) {
        case mm_path::gemm_f: return gemm_f_prepare(p, mm_dims_of(dst));
        case mm_path::gemm_k: return gemm_k_prepare(p, mm_dims_of(dst));
        case mm_path::repack: return mul_mat_repack_prepare(p, mm_dims_of(dst));
        default: return false;
        }
    }
    switch (choose_path(dst)) {
    case mm_path::matvec_f: return matvec_f(p, mm_dims_of(dst));
    case mm_path::matvec_q: return matvec_q(p, mm_dims_of(dst));
    case mm_path::gemm_f: return gemm_f(p, mm_dims_of(dst));
    case mm_path::gemm_q: return gemm_q(p, mm_dims_of(dst));
    case mm_path::repack: return mul_mat_repack(p, mm_dims_of(dst));
    case mm_path::matvec_k: return mul_mat_k(p, mm_dims_of(dst));
    case mm_path::gemm_k: return gemm_k(p, mm_dims_of(dst));
    case mm_path::matvec_k_repack: return mul_mat_k_repack(p, mm_dims_of(dst));
    case mm_path::generic: break;
    }
    return compute_mul_mat_generic(p, dst);
}

mm_grid make_mm_grid(const mm_dims & d, int nth, int64_t row_granule, int64_t rows_max, int64_t col_granule,
                     int64_t cols_max) {
    auto round_up = [](int64_t v, int64_t g) { return (v + g - 1) / g * g; };
    auto ceil_div = [](int64_t v, int64_t g) { return (v + g - 1) / g; };
    const int64_t want = 4 * static_cast<int64_t>(std::max(nth, 1));
    mm_grid g{};
    if (d.M <= 0 || d.N <= 0 || d.n_batch <= 0) return g; // nothing to compute: no items

    g.rows_per_item = std::min(round_up(rows_max, row_granule), round_up(d.M, row_granule));
    g.cols_per_item = std::min(round_up(cols_max, col_granule), round_up(d.N, col_granule));
    // Fewer items than wanted: shrink the row blocks first, then the column blocks.
    if (d.n_batch * ceil_div(d.M, g.rows_per_item) * ceil_div(d.N, g.cols_per_item) < want) {
        const int64_t per_batch = ceil_div(want, d.n_batch);
        g.rows_per_item = std::max(row_granule, round_up(ceil_div(d.M, per_batch), row_granule));
        const int64_t have = d.n_batch * ceil_div(d.M, g.rows_per_item);
        if (have < want) {
            const int64_t splits = ceil_div(want, have);
            g.cols_per_item = std::max(col_granule, round_up(ceil_div(d.N, splits), col_granule));
        }
    }
    g.n_cblocks = ceil_div(d.N, g.cols_per_item);
    // Row blocks of as equal a number of granules as the count allows, and
    // a count that gives every thread as many items (when nth more blocks
    // at most do): with blocks of rows_max, 1B's 2048-row products had 7
    // blocks of 288 rows and one of 32 (AVX-512 F16 GEMM), so one thread
    // computed 1152 rows and the other 896 (work stealing moves whole items).
    g.row_granules = ceil_div(d.M, row_granule);
    g.row_granule = row_granule;
    int64_t n_r = ceil_div(d.M, g.rows_per_item);
    const int64_t others = d.n_batch * g.n_cblocks;
    for (int64_t extra = 0; extra < nth && n_r + extra <= g.row_granules; ++extra) {
        if (others * (n_r + extra) % nth == 0) {
            n_r += extra;
            break;
        }
    }
    g.n_rblocks = n_r;
    g.rows_per_item = n_r > 0 ? ceil_div(g.row_granules, n_r) * row_granule : 0;
    g.n_items = others * g.n_rblocks;
    return g;
}

} // namespace tessera::cpu

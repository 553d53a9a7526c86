// backends/cpu/compute.cpp — dispatch from a node's op to its kernel
// (ops/*.cpp), with the checks every op shares.
#include "backends/cpu/compute.hpp"

#include "backends/cpu/ops/ops.hpp"
#include "backends/cpu/ops/repack.hpp"
#include "tessera/core/types.hpp"

namespace tessera::cpu {

namespace {

// A tensor whose metadata the kernels may read: valid type, positive
// dimensions, and for block types a whole number of blocks per row.
bool tensor_ok(const tsr_tensor * t) {
    if (t == nullptr || !type_is_valid(t->type)) return false;
    for (int i = 0; i < TSR_MAX_DIMS; ++i) {
        if (t->ne[i] < 1) return false;
    }
    const type_traits & tr = get_type_traits(t->type);
    return tr.block_size >= 1 && t->ne[0] % tr.block_size == 0;
}

// Sources each op requires (optional ones, like SOFT_MAX's mask, not counted).
int required_sources(int32_t op) {
    switch (op) {
    case TSR_OP_SET_ROWS: return 3; // dst, src, idx
    case TSR_OP_FLASH_ATTN_EXT: return 3; // q, k, v (mask optional)
    case TSR_OP_ADD:
    case TSR_OP_MUL:
    case TSR_OP_MUL_MAT:
    case TSR_OP_GET_ROWS:
    case TSR_OP_ROPE:
    case TSR_OP_CPY: return 2;
    default: return 1;
    }
}

bool supports_op_checked(const tsr_tensor * node) {
    if (!tensor_ok(node)) return false;
    const int n_src = required_sources(node->op);
    for (int i = 0; i < TSR_MAX_SRC; ++i) {
        if (node->src[i] == nullptr) {
            if (i < n_src) return false;
            continue;
        }
        if (!tensor_ok(node->src[i])) return false;
    }
    switch (node->op) {
    case TSR_OP_ADD:
    case TSR_OP_MUL: return binary_supported(node);
    case TSR_OP_SCALE:
    case TSR_OP_SILU:
    case TSR_OP_GELU: return unary_supported(node);
    case TSR_OP_RMS_NORM: return rms_norm_supported(node);
    case TSR_OP_MUL_MAT: return mul_mat_supported(node);
    case TSR_OP_GET_ROWS: return get_rows_supported(node);
    case TSR_OP_SET_ROWS: return set_rows_supported(node);
    case TSR_OP_ROPE: return rope_supported(node);
    case TSR_OP_SOFT_MAX: return soft_max_supported(node);
    case TSR_OP_CPY: return cpy_supported(node);
    case TSR_OP_CONT: return cont_supported(node);
    case TSR_OP_ARGMAX: return argmax_supported(node);
    case TSR_OP_FLASH_ATTN_EXT: return flash_attn_ext_supported(node);
    default: return false;
    }
}

// Scratch sizes of a supported node; false if they cannot be computed
// (nothing here is expected to throw once supports_op holds).
bool scratch_of(const tsr_tensor * node, node_scratch & out) noexcept {
    out = node_scratch{};
    try {
        switch (node->op) {
        case TSR_OP_MUL_MAT:
            out.per_thread = mul_mat_work_size(node);
            out.shared = mul_mat_shared_size(node);
            break;
        case TSR_OP_GET_ROWS: out.per_thread = get_rows_work_size(node); break;
        case TSR_OP_SET_ROWS: out.per_thread = set_rows_work_size(node); break;
        case TSR_OP_SOFT_MAX: out.per_thread = soft_max_work_size(node); break;
        case TSR_OP_CPY: out.per_thread = cpy_work_size(node); break;
        case TSR_OP_FLASH_ATTN_EXT:
            out.per_thread = flash_attn_ext_work_size(node);
            out.shared = flash_attn_ext_shared_size(node);
            break;
        default: break;
        }
        return true;
    } catch (...) {
        out = node_scratch{};
        return false;
    }
}

} // namespace

bool same_prepared(const tsr_tensor * prev, const tsr_tensor * node) {
    try {
        return prev->op == TSR_OP_MUL_MAT && node->op == TSR_OP_MUL_MAT && mul_mat_same_prepared(prev, node);
    } catch (...) {
        return false;
    }
}

bool op_is_noop(int32_t op) {
    return op == TSR_OP_NONE || op == TSR_OP_VIEW || op == TSR_OP_RESHAPE ||
           op == TSR_OP_PERMUTE || op == TSR_OP_TRANSPOSE;
}

bool op_splits_rows(int32_t op) {
    switch (op) {
    case TSR_OP_ADD:
    case TSR_OP_MUL:
    case TSR_OP_SCALE:
    case TSR_OP_SILU:
    case TSR_OP_GELU:
    case TSR_OP_RMS_NORM: return true;
    default: return false;
    }
}

bool supports_op(const tsr_tensor * node) {
    if (node == nullptr || node->op < 0 || node->op >= TSR_OP_COUNT) return false;
    if (op_is_noop(node->op)) return true;
    if (!repacked_sources_ok(node)) return false; // row-interleaved weights: MUL_MAT src[0] only
    try {
        return supports_op_checked(node);
    } catch (...) {
        return false;
    }
}

size_t node_work_size(const tsr_tensor * node) {
    node_scratch s;
    return checked_scratch(node, s) ? s.per_thread : 0;
}

bool checked_scratch(const tsr_tensor * node, node_scratch & s) {
    s = node_scratch{};
    return supports_op(node) && scratch_of(node, s);
}

bool compute_forward(const compute_params & p, tsr_tensor * node) {
    if (node == nullptr || p.nth < 1 || p.ith < 0 || p.ith >= p.nth) return false;
    if (op_is_noop(node->op)) return !p.prepare;
    if (!supports_op(node) || node->data == nullptr) return false;
    for (int i = 0; i < TSR_MAX_SRC; ++i) {
        if (node->src[i] != nullptr && node->src[i]->data == nullptr) return false;
    }
    node_scratch need;
    if (!scratch_of(node, need) || p.wsize < need.per_thread || (need.per_thread > 0 && p.wdata == nullptr)) return false;
    if (p.shared_size < need.shared || (need.shared > 0 && p.shared == nullptr)) return false;
    if (p.prepare && need.shared == 0) return false;
    return compute_checked_node(p, node);
}

bool compute_checked_node(const compute_params & p, tsr_tensor * node) {
    try {
        switch (node->op) {
        case TSR_OP_ADD: return compute_add(p, node);
        case TSR_OP_MUL: return compute_mul(p, node);
        case TSR_OP_SCALE: return compute_scale(p, node);
        case TSR_OP_SILU: return compute_silu(p, node);
        case TSR_OP_GELU: return compute_gelu(p, node);
        case TSR_OP_RMS_NORM: return compute_rms_norm(p, node);
        case TSR_OP_MUL_MAT: return compute_mul_mat(p, node);
        case TSR_OP_GET_ROWS: return compute_get_rows(p, node);
        case TSR_OP_SET_ROWS: return compute_set_rows(p, node);
        case TSR_OP_ROPE: return compute_rope(p, node);
        case TSR_OP_SOFT_MAX: return compute_soft_max(p, node);
        case TSR_OP_CPY: return compute_cpy(p, node);
        case TSR_OP_CONT: return compute_cont(p, node);
        case TSR_OP_ARGMAX: return compute_argmax(p, node);
        case TSR_OP_FLASH_ATTN_EXT: return compute_flash_attn_ext(p, node);
        default: return false;
        }
    } catch (...) {
        return false; // e.g. a core conversion rejecting its input: a data error, not a crash
    }
}

} // namespace tessera::cpu

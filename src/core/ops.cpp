// core/ops.cpp — graph-building operations: shape/type checks and result
// metadata. Semantics are documented in include/tessera/core/ops.hpp.
#include "tessera/core/ops.hpp"

#include <array>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tessera/core/error.hpp"

namespace tessera {

namespace {

using ne_t = std::array<int64_t, TSR_MAX_DIMS>;

[[noreturn]] void fail(int32_t op, const std::string & msg) {
    throw error(fmt::format("{}: {}", op_name(op), msg));
}

const type_traits & traits_of(int32_t op, const char * what, const tensor * t) {
    if (t == nullptr) fail(op, fmt::format("{} is null", what));
    if (!type_is_valid(t->type)) {
        fail(op, fmt::format("{} {} has unknown type id {}", what, shape_str(t), t->type));
    }
    for (int i = 0; i < TSR_MAX_DIMS; ++i) {
        if (t->ne[i] < 1) fail(op, fmt::format("{} {} has ne[{}] = {} < 1", what, shape_str(t), i, t->ne[i]));
    }
    return get_type_traits(t->type);
}

void need_type(int32_t op, const char * what, const tensor * t, tsr_type ty) {
    traits_of(op, what, t);
    if (t->type != ty) {
        fail(op, fmt::format("{} {} must be {}, got {}", what, shape_str(t), type_name(ty),
                             type_name(t->type)));
    }
}

void need_to_float(int32_t op, const char * what, const tensor * t) {
    const type_traits & tr = traits_of(op, what, t);
    if (tr.to_float == nullptr) {
        fail(op, fmt::format("{} {} has type {}, which has no to_float conversion", what, shape_str(t),
                             tr.name));
    }
}

// a.ne[ia] must equal b.ne[ib].
void need_dim_eq(int32_t op, const char * an, const tensor * a, int ia, const char * bn,
                 const tensor * b, int ib) {
    if (a->ne[ia] == b->ne[ib]) return;
    if (ia == ib) {
        fail(op, fmt::format("{} {} and {} {} disagree in ne[{}] ({} vs {})", an, shape_str(a), bn,
                             shape_str(b), ia, a->ne[ia], b->ne[ib]));
    }
    fail(op, fmt::format("{} {} and {} {} disagree: {}.ne[{}] = {} vs {}.ne[{}] = {}", an, shape_str(a),
                         bn, shape_str(b), an, ia, a->ne[ia], bn, ib, b->ne[ib]));
}

// a.ne[i] must be a multiple of b.ne[i] (b broadcast over a).
void need_dim_multiple(int32_t op, const char * an, const tensor * a, const char * bn, const tensor * b,
                       int i) {
    if (b->ne[i] > 0 && a->ne[i] % b->ne[i] == 0) return;
    fail(op, fmt::format("{} {} and {} {} disagree in ne[{}]: {} is not a multiple of {} (broadcast)",
                         an, shape_str(a), bn, shape_str(b), i, a->ne[i], b->ne[i]));
}

void need_dim_one(int32_t op, const char * what, const tensor * t, int i) {
    if (t->ne[i] == 1) return;
    fail(op, fmt::format("{} {} must have ne[{}] == 1, got {}", what, shape_str(t), i, t->ne[i]));
}

void need_row_contiguous(int32_t op, const char * what, const tensor * t) {
    const type_traits & tr = get_type_traits(t->type);
    if (tr.block_size > 1 && !is_row_contiguous(t)) {
        fail(op, fmt::format("{} {} of block type {} must have packed rows (nb[0] = {}, expected {})", what,
                             shape_str(t), tr.name, t->nb[0], tr.type_size));
    }
}

// A new (non-view) result tensor; gets data in alloc_data contexts.
tensor * new_result(context & ctx, int32_t op, tsr_type ty, const ne_t & ne) {
    tensor * r = ctx.new_tensor(ty, std::span<const int64_t>(ne.data(), ne.size()));
    r->op = op;
    return r;
}

ne_t ne_of(const tensor * t) {
    return {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
}

void name_derived(tensor * r, const tensor * a, const char * suffix) {
    if (a->name[0] != '\0') context::set_name(r, fmt::format("{} ({})", a->name, suffix));
}

// Bytes spanned by ne/nb (like nbytes) with overflow checks.
uint64_t checked_span(int32_t op, const type_traits & tr, const int64_t * ne, const uint64_t * nb) {
    uint64_t bytes = 0;
    bool ovf = false;
    if (tr.block_size == 1) {
        uint64_t first = 0;
        ovf |= __builtin_mul_overflow(static_cast<uint64_t>(ne[0] - 1), nb[0], &first);
        ovf |= __builtin_add_overflow(first, static_cast<uint64_t>(tr.type_size), &bytes);
    } else {
        ovf |= __builtin_mul_overflow(static_cast<uint64_t>(ne[0] / tr.block_size), nb[0], &bytes);
    }
    for (int i = 1; i < TSR_MAX_DIMS; ++i) {
        uint64_t part = 0;
        ovf |= __builtin_mul_overflow(static_cast<uint64_t>(ne[i] - 1), nb[i], &part);
        ovf |= __builtin_add_overflow(bytes, part, &bytes);
    }
    if (ovf) fail(op, "byte size of the view overflows");
    return bytes;
}

// A view of `a` with explicit metadata: view_src = a's root, view_offs =
// a's own offset + offs, src[0] = a. Does not allocate data.
tensor * make_view(context & ctx, int32_t op, tensor * a, const ne_t & ne, const uint64_t (&nb)[TSR_MAX_DIMS],
                   uint64_t offs) {
    // Created as one block, then given the view's metadata: a transposed
    // block-quantized view need not have ne[0] % block_size == 0.
    const int64_t one_block[1] = {get_type_traits(a->type).block_size};
    tensor * r = ctx.new_tensor_no_data(static_cast<type>(a->type), one_block);
    tensor * root = a->view_src != nullptr ? a->view_src : a;
    uint64_t total = 0;
    if (__builtin_add_overflow(a->view_src != nullptr ? a->view_offs : 0, offs, &total)) {
        fail(op, "view offset overflows");
    }
    for (int i = 0; i < TSR_MAX_DIMS; ++i) {
        r->ne[i] = ne[i];
        r->nb[i] = nb[i];
    }
    r->op = op;
    r->src[0] = a;
    r->view_src = root;
    r->view_offs = total;
    r->buffer = root->buffer;
    r->data = root->data != nullptr ? static_cast<char *>(root->data) + total : nullptr;
    return r;
}

} // namespace

// --- arithmetic ops ----------------------------------------------------------

tensor * mul_mat(context & ctx, tensor * a, tensor * b) {
    const int32_t op = TSR_OP_MUL_MAT;
    need_to_float(op, "a", a);
    need_type(op, "b", b, TSR_TYPE_F32);
    need_dim_eq(op, "a", a, 0, "b", b, 0);
    for (int i = 2; i < 4; ++i) {
        if (b->ne[i] % a->ne[i] != 0) {
            fail(op, fmt::format("a {} and b {} disagree in ne[{}]: b's {} is not a multiple of a's {} "
                                 "(broadcast)",
                                 shape_str(a), shape_str(b), i, b->ne[i], a->ne[i]));
        }
    }
    need_row_contiguous(op, "a", a);
    tensor * r = new_result(ctx, op, TSR_TYPE_F32, {a->ne[1], b->ne[1], b->ne[2], b->ne[3]});
    r->src[0] = a;
    r->src[1] = b;
    return r;
}

namespace {
tensor * binary_broadcast(context & ctx, int32_t op, tensor * a, tensor * b) {
    need_type(op, "a", a, TSR_TYPE_F32);
    need_type(op, "b", b, TSR_TYPE_F32);
    for (int i = 0; i < TSR_MAX_DIMS; ++i) need_dim_multiple(op, "a", a, "b", b, i);
    tensor * r = new_result(ctx, op, TSR_TYPE_F32, ne_of(a));
    r->src[0] = a;
    r->src[1] = b;
    return r;
}

tensor * unary_f32(context & ctx, int32_t op, tensor * a) {
    need_type(op, "a", a, TSR_TYPE_F32);
    tensor * r = new_result(ctx, op, TSR_TYPE_F32, ne_of(a));
    r->src[0] = a;
    return r;
}
} // namespace

tensor * add(context & ctx, tensor * a, tensor * b) {
    return binary_broadcast(ctx, TSR_OP_ADD, a, b);
}

tensor * mul(context & ctx, tensor * a, tensor * b) {
    return binary_broadcast(ctx, TSR_OP_MUL, a, b);
}

tensor * scale(context & ctx, tensor * a, float s, float bias) {
    tensor * r = unary_f32(ctx, TSR_OP_SCALE, a);
    set_op_param_f32(r, 0, s);
    set_op_param_f32(r, 1, bias);
    return r;
}

tensor * rms_norm(context & ctx, tensor * a, float eps) {
    tensor * r = unary_f32(ctx, TSR_OP_RMS_NORM, a);
    set_op_param_f32(r, 0, eps);
    return r;
}

tensor * silu(context & ctx, tensor * a) {
    return unary_f32(ctx, TSR_OP_SILU, a);
}

tensor * gelu(context & ctx, tensor * a) {
    return unary_f32(ctx, TSR_OP_GELU, a);
}

tensor * get_rows(context & ctx, tensor * a, tensor * idx) {
    const int32_t op = TSR_OP_GET_ROWS;
    need_to_float(op, "a", a);
    need_type(op, "idx", idx, TSR_TYPE_I32);
    need_dim_eq(op, "idx", idx, 1, "a", a, 2);
    need_dim_eq(op, "idx", idx, 2, "a", a, 3);
    need_dim_one(op, "idx", idx, 3);
    need_row_contiguous(op, "a", a);
    tensor * r = new_result(ctx, op, TSR_TYPE_F32, {a->ne[0], idx->ne[0], a->ne[2], a->ne[3]});
    r->src[0] = a;
    r->src[1] = idx;
    return r;
}

tensor * set_rows(context & ctx, tensor * dst, tensor * src, tensor * idx) {
    const int32_t op = TSR_OP_SET_ROWS;
    const type_traits & dtr = traits_of(op, "dst", dst);
    if (dtr.from_float == nullptr) {
        fail(op, fmt::format("dst {} has type {}, which has no from_float conversion", shape_str(dst),
                             dtr.name));
    }
    need_type(op, "src", src, TSR_TYPE_F32);
    traits_of(op, "idx", idx);
    if (idx->type != TSR_TYPE_I32 && idx->type != TSR_TYPE_I64) {
        fail(op, fmt::format("idx {} must be I32 or I64, got {}", shape_str(idx), type_name(idx->type)));
    }
    need_dim_eq(op, "src", src, 0, "dst", dst, 0);
    need_dim_eq(op, "src", src, 2, "dst", dst, 2);
    need_dim_eq(op, "src", src, 3, "dst", dst, 3);
    need_dim_eq(op, "idx", idx, 0, "src", src, 1);
    need_dim_eq(op, "idx", idx, 1, "dst", dst, 2);
    need_dim_eq(op, "idx", idx, 2, "dst", dst, 3);
    need_dim_one(op, "idx", idx, 3);
    need_row_contiguous(op, "dst", dst);
    tensor * r = make_view(ctx, op, dst, ne_of(dst), {dst->nb[0], dst->nb[1], dst->nb[2], dst->nb[3]}, 0);
    r->src[0] = dst;
    r->src[1] = src;
    r->src[2] = idx;
    name_derived(r, dst, "set_rows");
    return r;
}

tensor * rope(context & ctx, tensor * x, tensor * pos, int n_dims, rope_mode mode, float freq_base,
              float freq_scale, tensor * freq_factors) {
    const int32_t op = TSR_OP_ROPE;
    need_type(op, "x", x, TSR_TYPE_F32);
    need_type(op, "pos", pos, TSR_TYPE_I32);
    need_dim_one(op, "x", x, 3);
    need_dim_eq(op, "pos", pos, 0, "x", x, 2);
    for (int i = 1; i < 4; ++i) need_dim_one(op, "pos", pos, i);
    if (n_dims <= 0 || n_dims % 2 != 0 || n_dims > x->ne[0]) {
        fail(op, fmt::format("n_dims = {} must be even, > 0 and <= x.ne[0] = {} (x {})", n_dims, x->ne[0],
                             shape_str(x)));
    }
    if (mode != ROPE_NORMAL && mode != ROPE_NEOX) {
        fail(op, fmt::format("unknown mode {} (expected {} NORMAL or {} NEOX)", static_cast<int>(mode),
                             static_cast<int>(ROPE_NORMAL), static_cast<int>(ROPE_NEOX)));
    }
    if (freq_factors != nullptr) {
        need_type(op, "freq_factors", freq_factors, TSR_TYPE_F32);
        for (int i = 1; i < 4; ++i) need_dim_one(op, "freq_factors", freq_factors, i);
        if (freq_factors->ne[0] < n_dims / 2 || freq_factors->nb[0] != sizeof(float)) {
            fail(op, fmt::format("freq_factors {} must hold n_dims / 2 = {} contiguous values", shape_str(freq_factors),
                                 n_dims / 2));
        }
    }
    tensor * r = new_result(ctx, op, TSR_TYPE_F32, ne_of(x));
    r->src[0] = x;
    r->src[1] = pos;
    r->src[2] = freq_factors;
    r->op_params[0] = n_dims;
    r->op_params[1] = mode;
    set_op_param_f32(r, 2, freq_base);
    set_op_param_f32(r, 3, freq_scale);
    return r;
}

tensor * soft_max(context & ctx, tensor * a, tensor * mask, float scale) {
    const int32_t op = TSR_OP_SOFT_MAX;
    need_type(op, "a", a, TSR_TYPE_F32);
    if (mask != nullptr) {
        need_type(op, "mask", mask, TSR_TYPE_F32);
        need_dim_eq(op, "mask", mask, 0, "a", a, 0);
        if (mask->ne[1] < a->ne[1]) {
            fail(op, fmt::format("mask {} and a {} disagree in ne[1]: mask has {} rows, fewer than a's {}",
                                 shape_str(mask), shape_str(a), mask->ne[1], a->ne[1]));
        }
        need_dim_multiple(op, "a", a, "mask", mask, 2);
        need_dim_multiple(op, "a", a, "mask", mask, 3);
    }
    tensor * r = new_result(ctx, op, TSR_TYPE_F32, ne_of(a));
    r->src[0] = a;
    r->src[1] = mask;
    set_op_param_f32(r, 0, scale);
    return r;
}

tensor * flash_attn_ext(context & ctx, tensor * q, tensor * k, tensor * v, tensor * mask, float scale) {
    const int32_t op = TSR_OP_FLASH_ATTN_EXT;
    need_type(op, "q", q, TSR_TYPE_F32);
    for (const auto & [what, t] : {std::pair<const char *, tensor *>{"k", k}, {"v", v}}) {
        traits_of(op, what, t);
        if (t->type != TSR_TYPE_F32 && t->type != TSR_TYPE_F16) {
            fail(op, fmt::format("{} {} must be F32 or F16, got {}", what, shape_str(t), type_name(t->type)));
        }
        if (t->nb[0] != get_type_traits(t->type).type_size) {
            fail(op, fmt::format("{} {} must be packed along ne[0] (nb[0] = {}, expected {})", what, shape_str(t),
                                 t->nb[0], get_type_traits(t->type).type_size));
        }
        need_dim_one(op, what, t, 3);
    }
    need_dim_one(op, "q", q, 3);
    need_dim_eq(op, "q", q, 0, "k", k, 0);
    need_dim_eq(op, "q", q, 0, "v", v, 0);
    need_dim_eq(op, "k", k, 1, "v", v, 1);
    need_dim_eq(op, "k", k, 2, "v", v, 2);
    if (q->ne[2] % k->ne[2] != 0) {
        fail(op, fmt::format("q {} and k {} disagree in ne[2]: q's {} heads are not a multiple of k's {} "
                             "(grouped-query attention)",
                             shape_str(q), shape_str(k), q->ne[2], k->ne[2]));
    }
    if (mask != nullptr) {
        need_type(op, "mask", mask, TSR_TYPE_F32);
        need_dim_eq(op, "mask", mask, 0, "k", k, 1);
        if (mask->ne[1] < q->ne[1]) {
            fail(op, fmt::format("mask {} and q {} disagree: mask.ne[1] = {} rows, fewer than q.ne[1] = {} queries",
                                 shape_str(mask), shape_str(q), mask->ne[1], q->ne[1]));
        }
        need_dim_multiple(op, "q", q, "mask", mask, 2);
        need_dim_one(op, "mask", mask, 3);
    }
    tensor * r = new_result(ctx, op, TSR_TYPE_F32, {q->ne[0], q->ne[2], q->ne[1], 1});
    r->src[0] = q;
    r->src[1] = k;
    r->src[2] = v;
    r->src[3] = mask;
    set_op_param_f32(r, 0, scale);
    return r;
}

tensor * cpy(context & ctx, tensor * a, tensor * b) {
    const int32_t op = TSR_OP_CPY;
    const type_traits & atr = traits_of(op, "a", a);
    const type_traits & btr = traits_of(op, "b", b);
    if (nelements(a) != nelements(b)) {
        fail(op, fmt::format("a {} and b {} differ in element count ({} vs {})", shape_str(a), shape_str(b),
                             nelements(a), nelements(b)));
    }
    if (a->type != b->type) {
        if (atr.to_float == nullptr || btr.from_float == nullptr) {
            fail(op, fmt::format("cannot convert a {} of type {} to b {} of type {}", shape_str(a), atr.name,
                                 shape_str(b), btr.name));
        }
    }
    need_row_contiguous(op, "a", a);
    need_row_contiguous(op, "b", b);
    tensor * r = make_view(ctx, op, b, ne_of(b), {b->nb[0], b->nb[1], b->nb[2], b->nb[3]}, 0);
    r->src[0] = a;
    r->src[1] = b;
    name_derived(r, b, "copy");
    return r;
}

tensor * cont(context & ctx, tensor * a) {
    const int32_t op = TSR_OP_CONT;
    traits_of(op, "a", a);
    need_row_contiguous(op, "a", a);
    tensor * r = new_result(ctx, op, static_cast<tsr_type>(a->type), ne_of(a));
    r->src[0] = a;
    name_derived(r, a, "cont");
    return r;
}

tensor * argmax(context & ctx, tensor * a) {
    const int32_t op = TSR_OP_ARGMAX;
    need_type(op, "a", a, TSR_TYPE_F32);
    need_dim_one(op, "a", a, 2);
    need_dim_one(op, "a", a, 3);
    tensor * r = new_result(ctx, op, TSR_TYPE_I32, {a->ne[1], 1, 1, 1});
    r->src[0] = a;
    return r;
}

// --- views ---------------------------------------------------------------------

tensor * view(context & ctx, tensor * a, std::span<const int64_t> ne, std::span<const uint64_t> nb,
              uint64_t offset) {
    const int32_t op = TSR_OP_VIEW;
    const type_traits & tr = traits_of(op, "a", a);
    if (ne.empty() || ne.size() > TSR_MAX_DIMS) {
        fail(op, fmt::format("{} dimensions given, expected 1..{}", ne.size(), TSR_MAX_DIMS));
    }
    if (nb.size() != ne.size() && nb.size() + 1 != ne.size()) {
        fail(op, fmt::format("{} strides given for {} dimensions (expected {} or {})", nb.size(), ne.size(),
                             ne.size(), ne.size() - 1));
    }
    ne_t rne{1, 1, 1, 1};
    uint64_t rnb[TSR_MAX_DIMS] = {};
    const size_t nb_first = ne.size() - nb.size(); // 0: nb[0] given, 1: nb[0] = type size
    int64_t n = 1;
    for (size_t i = 0; i < ne.size(); ++i) {
        if (ne[i] < 1) fail(op, fmt::format("ne[{}] = {} must be >= 1 (view of a {})", i, ne[i], shape_str(a)));
        if (__builtin_mul_overflow(n, ne[i], &n)) fail(op, "element count of the view overflows int64");
        rne[i] = ne[i];
    }
    if (rne[0] % tr.block_size != 0) {
        fail(op, fmt::format("ne[0] = {} is not a multiple of the {} block size {} (view of a {})", rne[0],
                             tr.name, tr.block_size, shape_str(a)));
    }
    rnb[0] = nb_first == 0 ? nb[0] : tr.type_size;
    for (size_t i = 1; i < TSR_MAX_DIMS; ++i) {
        if (i < ne.size()) {
            rnb[i] = nb[i - nb_first];
            continue;
        }
        // Trailing dims: continue packed after the last given dimension.
        uint64_t prev_extent = i == 1 ? static_cast<uint64_t>(rne[0] / tr.block_size) : static_cast<uint64_t>(rne[i - 1]);
        if (__builtin_mul_overflow(rnb[i - 1], prev_extent, &rnb[i])) fail(op, "view stride overflows");
    }
    const uint64_t span = checked_span(op, tr, rne.data(), rnb);
    uint64_t end = 0;
    if (__builtin_add_overflow(offset, span, &end) || end > nbytes(a)) {
        fail(op, fmt::format("view [{},{},{},{}] at offset {} spans {} bytes, beyond a {} of {} bytes", rne[0],
                             rne[1], rne[2], rne[3], offset, span, shape_str(a), nbytes(a)));
    }
    tensor * r = make_view(ctx, op, a, rne, rnb, offset);
    name_derived(r, a, "view");
    return r;
}

tensor * view_1d(context & ctx, tensor * a, int64_t ne0, uint64_t offset) {
    const int64_t ne[] = {ne0};
    return view(ctx, a, ne, std::span<const uint64_t>(), offset);
}

tensor * view_2d(context & ctx, tensor * a, int64_t ne0, int64_t ne1, uint64_t nb1, uint64_t offset) {
    const int64_t ne[] = {ne0, ne1};
    const uint64_t nb[] = {nb1};
    return view(ctx, a, ne, nb, offset);
}

tensor * view_3d(context & ctx, tensor * a, int64_t ne0, int64_t ne1, int64_t ne2, uint64_t nb1, uint64_t nb2,
                 uint64_t offset) {
    const int64_t ne[] = {ne0, ne1, ne2};
    const uint64_t nb[] = {nb1, nb2};
    return view(ctx, a, ne, nb, offset);
}

tensor * reshape(context & ctx, tensor * a, std::span<const int64_t> ne) {
    const int32_t op = TSR_OP_RESHAPE;
    traits_of(op, "a", a);
    if (!is_contiguous(a)) {
        fail(op, fmt::format("a {} must be contiguous (nb = [{},{},{},{}])", shape_str(a), a->nb[0], a->nb[1],
                             a->nb[2], a->nb[3]));
    }
    if (ne.empty() || ne.size() > TSR_MAX_DIMS) {
        fail(op, fmt::format("new shape of a {} has {} dimensions (1 to {})", shape_str(a), ne.size(), TSR_MAX_DIMS));
    }
    const int64_t block = get_type_traits(a->type).block_size;
    if (ne[0] % block != 0) {
        fail(op, fmt::format("new shape of a {} has ne[0] = {}, not a multiple of the {} block size {}", shape_str(a), ne[0],
                             type_name(a->type), block));
    }
    int64_t n = 1;
    for (int64_t v : ne) {
        if (v < 1 || __builtin_mul_overflow(n, v, &n)) {
            fail(op, fmt::format("new shape of a {} has ne = {} (must be >= 1, product must fit int64)",
                                 shape_str(a), v));
        }
    }
    if (n != nelements(a)) {
        fail(op, fmt::format("a {} has {} elements, the new shape [{}] has {}", shape_str(a), nelements(a),
                             fmt::join(ne, ","), n));
    }
    // The packed layout (and the remaining shape checks) of the new shape.
    tensor * r = ctx.new_tensor_no_data(static_cast<type>(a->type), ne);
    tensor * root = a->view_src != nullptr ? a->view_src : a;
    r->op = op;
    r->src[0] = a;
    r->view_src = root;
    r->view_offs = a->view_src != nullptr ? a->view_offs : 0;
    r->buffer = root->buffer;
    r->data = root->data != nullptr ? static_cast<char *>(root->data) + r->view_offs : nullptr;
    name_derived(r, a, "reshaped");
    return r;
}

tensor * reshape(context & ctx, tensor * a, std::initializer_list<int64_t> ne) {
    return reshape(ctx, a, std::span<const int64_t>(ne.begin(), ne.size()));
}

namespace {
tensor * permute_impl(context & ctx, int32_t op, tensor * a, const int (&perm)[4]) {
    traits_of(op, "a", a);
    bool seen[4] = {false, false, false, false};
    for (int p : perm) {
        if (p < 0 || p > 3 || seen[p]) {
            fail(op, fmt::format("axes ({},{},{},{}) are not a permutation of 0..3 (a {})", perm[0], perm[1],
                                 perm[2], perm[3], shape_str(a)));
        }
        seen[p] = true;
    }
    ne_t ne{};
    uint64_t nb[TSR_MAX_DIMS] = {};
    for (int i = 0; i < 4; ++i) {
        ne[perm[i]] = a->ne[i];
        nb[perm[i]] = a->nb[i];
    }
    return make_view(ctx, op, a, ne, nb, 0);
}
} // namespace

tensor * permute(context & ctx, tensor * a, int p0, int p1, int p2, int p3) {
    const int perm[4] = {p0, p1, p2, p3};
    tensor * r = permute_impl(ctx, TSR_OP_PERMUTE, a, perm);
    for (int i = 0; i < 4; ++i) r->op_params[i] = perm[i];
    name_derived(r, a, "permuted");
    return r;
}

tensor * transpose(context & ctx, tensor * a) {
    const int perm[4] = {1, 0, 2, 3};
    tensor * r = permute_impl(ctx, TSR_OP_TRANSPOSE, a, perm);
    name_derived(r, a, "transposed");
    return r;
}

const char * op_name(int32_t op) {
    static constexpr const char * k_names[TSR_OP_COUNT] = {
        "NONE",   "ADD",  "MUL",  "SCALE", "RMS_NORM", "MUL_MAT", "GET_ROWS", "SET_ROWS", "ROPE",     "SOFT_MAX",
        "SILU",   "GELU", "CPY",  "CONT",  "VIEW",     "RESHAPE", "PERMUTE",  "TRANSPOSE", "ARGMAX",
        "FLASH_ATTN_EXT",
    };
    static_assert(TSR_OP_COUNT == 20, "update k_names when adding an op");
    if (op < 0 || op >= TSR_OP_COUNT) return "UNKNOWN";
    return k_names[op];
}

} // namespace tessera

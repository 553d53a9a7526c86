// Graph-building ops: result metadata, shape/type checks and their messages.
#include <gtest/gtest.h>

#include <string>

#include "tessera/core/error.hpp"
#include "tessera/core/ops.hpp"
#include "support/error_of.hpp"

using namespace tessera;

namespace {

using tessera::test::error_of; // support/error_of.hpp

#define EXPECT_ERROR_HAS(stmt, ...)                                                   \
    do {                                                                              \
        const std::string msg_ = error_of([&] { stmt; });                             \
        for (const char * s_ : {__VA_ARGS__}) {                                       \
            EXPECT_NE(msg_.find(s_), std::string::npos) << "'" << s_ << "' not in: " << msg_; \
        }                                                                             \
    } while (0)

} // namespace

TEST(MulMat, ResultShapeAndSources) {
    context ctx;
    tensor * a = ctx.new_tensor(TSR_TYPE_Q8_0, {64, 16, 2});
    tensor * b = ctx.new_tensor(TSR_TYPE_F32, {64, 5, 6, 3});
    tensor * r = mul_mat(ctx, a, b);
    EXPECT_EQ(r->op, TSR_OP_MUL_MAT);
    EXPECT_EQ(r->type, TSR_TYPE_F32);
    EXPECT_EQ(shape_str(r), "[16,5,6,3]");
    EXPECT_EQ(r->src[0], a);
    EXPECT_EQ(r->src[1], b);
    EXPECT_EQ(r->src[2], nullptr);
    EXPECT_EQ(r->view_src, nullptr);
    EXPECT_TRUE(is_contiguous(r));
}

TEST(MulMat, ShapeErrorsNameOpShapesAndDim) {
    context ctx;
    tensor * a = ctx.new_tensor(TSR_TYPE_F32, {4096, 32});
    tensor * b = ctx.new_tensor(TSR_TYPE_F32, {4000, 7});
    EXPECT_ERROR_HAS(mul_mat(ctx, a, b), "MUL_MAT", "[4096,32,1,1]", "[4000,7,1,1]", "ne[0]", "4096 vs 4000");

    tensor * a3 = ctx.new_tensor(TSR_TYPE_F32, {8, 4, 3});
    tensor * b3 = ctx.new_tensor(TSR_TYPE_F32, {8, 2, 4});
    EXPECT_ERROR_HAS(mul_mat(ctx, a3, b3), "MUL_MAT", "ne[2]", "[8,4,3,1]", "[8,2,4,1]");

    tensor * bf16 = ctx.new_tensor(TSR_TYPE_F16, {4096, 7});
    EXPECT_ERROR_HAS(mul_mat(ctx, a, bf16), "MUL_MAT", "b", "F32", "F16");
    tensor * qk = ctx.new_tensor(TSR_TYPE_Q3_K, {256, 2});
    tensor * bk = ctx.new_tensor(TSR_TYPE_F32, {256, 2});
    EXPECT_ERROR_HAS(mul_mat(ctx, qk, bk), "MUL_MAT", "Q3_K", "to_float");
    EXPECT_ERROR_HAS(mul_mat(ctx, nullptr, bk), "MUL_MAT", "a is null");

    // a quantized weight whose rows are not packed
    tensor * q = ctx.new_tensor(TSR_TYPE_Q8_0, {64, 4});
    tensor * qt = transpose(ctx, q);
    tensor * b64 = ctx.new_tensor(TSR_TYPE_F32, {4, 3});
    EXPECT_ERROR_HAS(mul_mat(ctx, qt, b64), "MUL_MAT", "packed rows");
}

TEST(Elementwise, BroadcastRules) {
    context ctx;
    tensor * a = ctx.new_tensor(TSR_TYPE_F32, {8, 6, 4});
    tensor * b = ctx.new_tensor(TSR_TYPE_F32, {8, 3});
    tensor * r = add(ctx, a, b);
    EXPECT_EQ(r->op, TSR_OP_ADD);
    EXPECT_TRUE(same_shape(r, a));
    EXPECT_EQ(mul(ctx, a, b)->op, TSR_OP_MUL);
    tensor * bad = ctx.new_tensor(TSR_TYPE_F32, {8, 4});
    EXPECT_ERROR_HAS(add(ctx, a, bad), "ADD", "ne[1]", "[8,6,4,1]", "[8,4,1,1]");
    tensor * h = ctx.new_tensor(TSR_TYPE_F16, {8});
    EXPECT_ERROR_HAS(mul(ctx, a, h), "MUL", "F16");
}

TEST(Unary, ParamsAndTypes) {
    context ctx;
    tensor * a = ctx.new_tensor(TSR_TYPE_F32, {8, 2});
    tensor * s = scale(ctx, a, 0.125f, -1.0f);
    EXPECT_EQ(s->op, TSR_OP_SCALE);
    EXPECT_EQ(op_param_f32(s, 0), 0.125f);
    EXPECT_EQ(op_param_f32(s, 1), -1.0f);
    tensor * n = rms_norm(ctx, a, 1e-5f);
    EXPECT_EQ(n->op, TSR_OP_RMS_NORM);
    EXPECT_EQ(op_param_f32(n, 0), 1e-5f);
    EXPECT_EQ(silu(ctx, a)->op, TSR_OP_SILU);
    EXPECT_EQ(gelu(ctx, a)->op, TSR_OP_GELU);
    tensor * q = ctx.new_tensor(TSR_TYPE_Q8_0, {32});
    EXPECT_ERROR_HAS(silu(ctx, q), "SILU", "F32", "Q8_0");
    EXPECT_ERROR_HAS(rms_norm(ctx, q, 1e-5f), "RMS_NORM");
}

TEST(GetRows, ShapesAndIndexType) {
    context ctx;
    tensor * a = ctx.new_tensor(TSR_TYPE_Q4_0, {64, 100});
    tensor * idx = ctx.new_tensor(TSR_TYPE_I32, {7});
    tensor * r = get_rows(ctx, a, idx);
    EXPECT_EQ(r->op, TSR_OP_GET_ROWS);
    EXPECT_EQ(r->type, TSR_TYPE_F32);
    EXPECT_EQ(shape_str(r), "[64,7,1,1]");
    EXPECT_EQ(r->src[1], idx);
    tensor * i64 = ctx.new_tensor(TSR_TYPE_I64, {7});
    EXPECT_ERROR_HAS(get_rows(ctx, a, i64), "GET_ROWS", "idx", "I32", "I64");
    tensor * a3 = ctx.new_tensor(TSR_TYPE_F32, {4, 10, 3});
    tensor * idx2 = ctx.new_tensor(TSR_TYPE_I32, {5, 2});
    EXPECT_ERROR_HAS(get_rows(ctx, a3, idx2), "GET_ROWS", "idx.ne[1] = 2", "a.ne[2] = 3");
}

TEST(SetRows, ReturnsViewOfDst) {
    context ctx(context::params{.max_tensors = 64, .alloc_data = true});
    tensor * cache = ctx.new_tensor(TSR_TYPE_F16, {8, 32, 2});
    tensor * src = ctx.new_tensor(TSR_TYPE_F32, {8, 3, 2});
    tensor * idx = ctx.new_tensor(TSR_TYPE_I64, {3, 2});
    tensor * r = set_rows(ctx, cache, src, idx);
    EXPECT_EQ(r->op, TSR_OP_SET_ROWS);
    EXPECT_EQ(r->src[0], cache);
    EXPECT_EQ(r->src[1], src);
    EXPECT_EQ(r->src[2], idx);
    EXPECT_EQ(r->view_src, cache);
    EXPECT_EQ(r->view_offs, 0u);
    EXPECT_EQ(r->data, cache->data);
    EXPECT_TRUE(same_shape(r, cache));
    for (int i = 0; i < 4; ++i) EXPECT_EQ(r->nb[i], cache->nb[i]);

    // into a view of the cache: view_src is the root, offsets add up
    tensor * v = view_2d(ctx, cache, 8, 16, cache->nb[1], cache->nb[1] * 16);
    tensor * src1 = ctx.new_tensor(TSR_TYPE_F32, {8, 3});
    tensor * idx1 = ctx.new_tensor(TSR_TYPE_I32, {3});
    tensor * r2 = set_rows(ctx, v, src1, idx1);
    EXPECT_EQ(r2->view_src, cache);
    EXPECT_EQ(r2->view_offs, cache->nb[1] * 16);
    EXPECT_EQ(r2->data, static_cast<char *>(cache->data) + cache->nb[1] * 16);

    tensor * i16 = ctx.new_tensor(TSR_TYPE_I16, {3, 2});
    EXPECT_ERROR_HAS(set_rows(ctx, cache, src, i16), "SET_ROWS", "I32 or I64", "I16");
    tensor * bad = ctx.new_tensor(TSR_TYPE_F32, {7, 3, 2});
    EXPECT_ERROR_HAS(set_rows(ctx, cache, bad, idx), "SET_ROWS", "ne[0]", "7 vs 8");
    tensor * idxn = ctx.new_tensor(TSR_TYPE_I32, {4, 2});
    EXPECT_ERROR_HAS(set_rows(ctx, cache, src, idxn), "SET_ROWS", "idx.ne[0] = 4", "src.ne[1] = 3");
    tensor * qk = ctx.new_tensor(TSR_TYPE_Q3_K, {256, 2});
    tensor * srck = ctx.new_tensor(TSR_TYPE_F32, {256, 1});
    tensor * idxk = ctx.new_tensor(TSR_TYPE_I32, {1});
    EXPECT_ERROR_HAS(set_rows(ctx, qk, srck, idxk), "SET_ROWS", "Q3_K", "from_float");
}

TEST(Rope, ParamsAndChecks) {
    context ctx;
    tensor * x = ctx.new_tensor(TSR_TYPE_F32, {64, 4, 5});
    tensor * pos = ctx.new_tensor(TSR_TYPE_I32, {5});
    tensor * r = rope(ctx, x, pos, 32, ROPE_NEOX, 10000.0f, 0.5f);
    EXPECT_EQ(r->op, TSR_OP_ROPE);
    EXPECT_TRUE(same_shape(r, x));
    EXPECT_EQ(r->op_params[0], 32);
    EXPECT_EQ(r->op_params[1], 2);
    EXPECT_EQ(op_param_f32(r, 2), 10000.0f);
    EXPECT_EQ(op_param_f32(r, 3), 0.5f);
    EXPECT_EQ(r->src[1], pos);
    tensor * pos4 = ctx.new_tensor(TSR_TYPE_I32, {4});
    EXPECT_ERROR_HAS(rope(ctx, x, pos4, 32, ROPE_NORMAL, 1e4f, 1.0f), "ROPE", "pos.ne[0] = 4", "x.ne[2] = 5");
    EXPECT_ERROR_HAS(rope(ctx, x, pos, 33, ROPE_NORMAL, 1e4f, 1.0f), "ROPE", "n_dims = 33");
    EXPECT_ERROR_HAS(rope(ctx, x, pos, 66, ROPE_NORMAL, 1e4f, 1.0f), "ROPE", "n_dims = 66");
    EXPECT_ERROR_HAS(rope(ctx, x, pos, 0, ROPE_NORMAL, 1e4f, 1.0f), "ROPE", "n_dims = 0");
    EXPECT_ERROR_HAS(rope(ctx, x, pos, 32, static_cast<rope_mode>(1), 1e4f, 1.0f), "ROPE", "mode 1");
    tensor * posf = ctx.new_tensor(TSR_TYPE_F32, {5});
    EXPECT_ERROR_HAS(rope(ctx, x, posf, 32, ROPE_NORMAL, 1e4f, 1.0f), "ROPE", "pos", "I32");
    // freq_factors: F32, at least n_dims / 2 contiguous values, as src[2].
    EXPECT_EQ(r->src[2], nullptr);
    tensor * ff = ctx.new_tensor(TSR_TYPE_F32, {16});
    EXPECT_EQ(rope(ctx, x, pos, 32, ROPE_NORMAL, 1e4f, 1.0f, ff)->src[2], ff);
    tensor * ff15 = ctx.new_tensor(TSR_TYPE_F32, {15});
    EXPECT_ERROR_HAS(rope(ctx, x, pos, 32, ROPE_NORMAL, 1e4f, 1.0f, ff15), "ROPE", "freq_factors [15,1,1,1]",
                     "n_dims / 2 = 16");
    tensor * ff16 = ctx.new_tensor(TSR_TYPE_F16, {16});
    EXPECT_ERROR_HAS(rope(ctx, x, pos, 32, ROPE_NORMAL, 1e4f, 1.0f, ff16), "ROPE", "freq_factors", "F32");
    tensor * ff2d = ctx.new_tensor(TSR_TYPE_F32, {16, 2});
    EXPECT_ERROR_HAS(rope(ctx, x, pos, 32, ROPE_NORMAL, 1e4f, 1.0f, ff2d), "ROPE", "freq_factors");
}

TEST(SoftMax, MaskBroadcast) {
    context ctx;
    tensor * a = ctx.new_tensor(TSR_TYPE_F32, {10, 4, 8});
    tensor * mask = ctx.new_tensor(TSR_TYPE_F32, {10, 6});
    tensor * r = soft_max(ctx, a, mask, 0.25f);
    EXPECT_EQ(r->op, TSR_OP_SOFT_MAX);
    EXPECT_EQ(r->src[1], mask);
    EXPECT_EQ(op_param_f32(r, 0), 0.25f);
    tensor * r0 = soft_max(ctx, a, nullptr, 1.0f);
    EXPECT_EQ(r0->src[1], nullptr);
    tensor * m2 = ctx.new_tensor(TSR_TYPE_F32, {10, 4, 3});
    EXPECT_ERROR_HAS(soft_max(ctx, a, m2, 1.0f), "SOFT_MAX", "ne[2]", "8 is not a multiple of 3");
    tensor * m3 = ctx.new_tensor(TSR_TYPE_F32, {10, 3});
    EXPECT_ERROR_HAS(soft_max(ctx, a, m3, 1.0f), "SOFT_MAX", "ne[1]");
    tensor * m4 = ctx.new_tensor(TSR_TYPE_F32, {9, 4});
    EXPECT_ERROR_HAS(soft_max(ctx, a, m4, 1.0f), "SOFT_MAX", "ne[0]", "9 vs 10");
}

TEST(Argmax, Shape) {
    context ctx;
    tensor * a = ctx.new_tensor(TSR_TYPE_F32, {32000, 3});
    tensor * r = argmax(ctx, a);
    EXPECT_EQ(r->type, TSR_TYPE_I32);
    EXPECT_EQ(shape_str(r), "[3,1,1,1]");
    tensor * a3 = ctx.new_tensor(TSR_TYPE_F32, {4, 3, 2});
    EXPECT_ERROR_HAS(argmax(ctx, a3), "ARGMAX", "ne[2]");
}

TEST(CpyCont, Semantics) {
    context ctx;
    tensor * a = ctx.new_tensor(TSR_TYPE_F32, {64, 2});
    tensor * b = ctx.new_tensor(TSR_TYPE_Q8_0, {128});
    tensor * r = cpy(ctx, a, b);
    EXPECT_EQ(r->op, TSR_OP_CPY);
    EXPECT_EQ(r->src[0], a);
    EXPECT_EQ(r->src[1], b);
    EXPECT_EQ(r->view_src, b);
    EXPECT_TRUE(same_shape(r, b));
    EXPECT_EQ(r->type, TSR_TYPE_Q8_0);
    tensor * c = ctx.new_tensor(TSR_TYPE_F32, {100});
    EXPECT_ERROR_HAS(cpy(ctx, a, c), "CPY", "element count", "128 vs 100");
    tensor * k = ctx.new_tensor(TSR_TYPE_Q3_K, {256});
    tensor * f = ctx.new_tensor(TSR_TYPE_F32, {256});
    EXPECT_ERROR_HAS(cpy(ctx, f, k), "CPY", "Q3_K");
    EXPECT_EQ(cpy(ctx, k, k)->op, TSR_OP_CPY); // same type: a plain byte copy

    tensor * t = transpose(ctx, a);
    tensor * ct = cont(ctx, t);
    EXPECT_EQ(ct->op, TSR_OP_CONT);
    EXPECT_EQ(shape_str(ct), "[2,64,1,1]");
    EXPECT_TRUE(is_contiguous(ct));
    EXPECT_EQ(ct->view_src, nullptr);
}

TEST(Views, View2dOffsetsAndData) {
    context ctx(context::params{.max_tensors = 64, .alloc_data = true});
    tensor * a = context::set_name(ctx.new_tensor(TSR_TYPE_F32, {16, 8}), "a");
    tensor * v = view_2d(ctx, a, 4, 3, a->nb[1], 2 * a->nb[1] + 8);
    EXPECT_EQ(v->op, TSR_OP_VIEW);
    EXPECT_EQ(v->src[0], a);
    EXPECT_EQ(v->view_src, a);
    EXPECT_EQ(v->view_offs, 2 * 64u + 8);
    EXPECT_EQ(v->data, static_cast<char *>(a->data) + 136);
    EXPECT_EQ(v->nb[0], 4u);
    EXPECT_EQ(v->nb[1], 64u);
    EXPECT_EQ(v->nb[2], 192u);
    EXPECT_EQ(shape_str(v), "[4,3,1,1]");
    EXPECT_FALSE(is_contiguous(v));
    EXPECT_STREQ(v->name, "a (view)");

    // view of a view: root owner, offsets add
    tensor * vv = view_1d(ctx, v, 2, 4);
    EXPECT_EQ(vv->src[0], v);
    EXPECT_EQ(vv->view_src, a);
    EXPECT_EQ(vv->view_offs, 140u);
    EXPECT_EQ(vv->data, static_cast<char *>(a->data) + 140);

    // out of bounds
    EXPECT_ERROR_HAS(view_2d(ctx, a, 16, 8, a->nb[1], 4), "VIEW", "beyond");
    EXPECT_ERROR_HAS(view_1d(ctx, a, 129, 0), "VIEW", "beyond");
    EXPECT_NO_THROW(view_1d(ctx, a, 128, 0));
    EXPECT_ERROR_HAS(view_1d(ctx, a, 1, UINT64_MAX), "VIEW");
    EXPECT_ERROR_HAS(view_2d(ctx, a, 1, INT64_MAX, UINT64_MAX / 2, 0), "VIEW", "overflow");

    // explicit form with nb[0] given
    const int64_t ne[] = {8, 2};
    const uint64_t nb[] = {8, 64};
    tensor * s = view(ctx, a, ne, nb, 0);
    EXPECT_EQ(s->nb[0], 8u);
    EXPECT_EQ(s->nb[1], 64u);
    EXPECT_EQ(s->nb[2], 128u);
    EXPECT_FALSE(is_row_contiguous(s));
    const uint64_t nb_bad[] = {1, 2, 3};
    EXPECT_ERROR_HAS(view(ctx, a, ne, nb_bad, 0), "VIEW", "3 strides");
}

TEST(Views, ViewWithoutDataStaysNull) {
    context ctx;
    tensor * a = ctx.new_tensor(TSR_TYPE_F32, {16, 8});
    tensor * v = view_1d(ctx, a, 16, 64);
    EXPECT_EQ(v->data, nullptr);
    EXPECT_EQ(v->view_src, a);
    EXPECT_EQ(v->view_offs, 64u);
}

TEST(Views, QuantizedViewNeedsWholeBlocks) {
    context ctx;
    tensor * q = ctx.new_tensor(TSR_TYPE_Q4_0, {64, 4});
    tensor * row = view_1d(ctx, q, 32, q->nb[1]);
    EXPECT_EQ(row->nb[0], 18u);
    EXPECT_EQ(row->nb[1], 18u);
    EXPECT_EQ(nbytes(row), 18u);
    EXPECT_ERROR_HAS(view_1d(ctx, q, 16, 0), "VIEW", "block size 32");
}

TEST(Views, PermuteAndTranspose) {
    context ctx(context::params{.max_tensors = 64, .alloc_data = true});
    tensor * a = ctx.new_tensor(TSR_TYPE_F32, {2, 3, 4, 5});
    tensor * p = permute(ctx, a, 0, 2, 1, 3);
    EXPECT_EQ(p->op, TSR_OP_PERMUTE);
    EXPECT_EQ(shape_str(p), "[2,4,3,5]");
    EXPECT_EQ(p->nb[0], 4u);
    EXPECT_EQ(p->nb[1], 24u);
    EXPECT_EQ(p->nb[2], 8u);
    EXPECT_EQ(p->nb[3], 96u);
    EXPECT_EQ(p->op_params[1], 2);
    EXPECT_EQ(p->view_src, a);
    EXPECT_EQ(p->data, a->data);
    EXPECT_FALSE(is_contiguous(p));
    EXPECT_EQ(nbytes(p), nbytes(a));

    // axis i of a goes to axis perm[i]
    tensor * p2 = permute(ctx, a, 3, 0, 1, 2);
    EXPECT_EQ(shape_str(p2), "[3,4,5,2]");
    EXPECT_EQ(p2->nb[3], 4u);
    EXPECT_EQ(p2->nb[0], 8u);

    tensor * t = transpose(ctx, a);
    EXPECT_EQ(t->op, TSR_OP_TRANSPOSE);
    EXPECT_EQ(shape_str(t), "[3,2,4,5]");
    EXPECT_EQ(t->nb[0], 8u);
    EXPECT_EQ(t->nb[1], 4u);
    tensor * tt = transpose(ctx, t);
    EXPECT_TRUE(is_contiguous(tt));
    EXPECT_EQ(tt->view_src, a);

    EXPECT_ERROR_HAS(permute(ctx, a, 0, 1, 1, 3), "PERMUTE", "(0,1,1,3)", "permutation");
    EXPECT_ERROR_HAS(permute(ctx, a, 0, 1, 2, 4), "PERMUTE");
}

TEST(Views, Reshape) {
    context ctx(context::params{.max_tensors = 64, .alloc_data = true});
    tensor * a = ctx.new_tensor(TSR_TYPE_F32, {6, 4});
    tensor * r = reshape(ctx, a, {3, 2, 4});
    EXPECT_EQ(r->op, TSR_OP_RESHAPE);
    EXPECT_EQ(shape_str(r), "[3,2,4,1]");
    EXPECT_EQ(r->nb[1], 12u);
    EXPECT_EQ(r->nb[2], 24u);
    EXPECT_EQ(r->view_src, a);
    EXPECT_EQ(r->data, a->data);
    EXPECT_EQ(r->src[0], a);

    // reshape of a contiguous view keeps the root and its offset
    tensor * v = view_1d(ctx, a, 12, 48);
    tensor * rv = reshape(ctx, v, {3, 4});
    EXPECT_EQ(rv->view_src, a);
    EXPECT_EQ(rv->view_offs, 48u);
    EXPECT_EQ(rv->data, static_cast<char *>(a->data) + 48);

    EXPECT_ERROR_HAS(reshape(ctx, a, {5, 5}), "RESHAPE", "24 elements", "25");
    EXPECT_ERROR_HAS(reshape(ctx, transpose(ctx, a), {24}), "RESHAPE", "contiguous");
    tensor * q = ctx.new_tensor(TSR_TYPE_Q8_0, {64, 2});
    EXPECT_EQ(shape_str(reshape(ctx, q, {128})), "[128,1,1,1]");
    // Named as RESHAPE's errors with a's shape (new_tensor's own words
    // named neither).
    EXPECT_ERROR_HAS(reshape(ctx, q, {16, 8}), "RESHAPE", "[64,2,1,1]", "ne[0] = 16", "Q8_0 block size 32");
    const int64_t five[5] = {2, 2, 2, 2, 3};
    EXPECT_ERROR_HAS(reshape(ctx, a, std::span<const int64_t>(five)), "RESHAPE", "[6,4,1,1]", "5 dimensions (1 to 4)");
}

TEST(Ops, ResultsGetDataInAllocDataContexts) {
    context ctx(context::params{.max_tensors = 64, .alloc_data = true});
    tensor * a = ctx.new_tensor(TSR_TYPE_F32, {8, 2});
    tensor * b = ctx.new_tensor(TSR_TYPE_F32, {8, 3});
    tensor * r = mul_mat(ctx, a, b);
    ASSERT_NE(r->data, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(r->data) % 64, 0u);
    EXPECT_NE(add(ctx, a, a)->data, nullptr);
    tensor * t = transpose(ctx, a);
    EXPECT_EQ(t->data, a->data); // views alias, no new memory
}

TEST(Ops, OpNames) {
    EXPECT_STREQ(op_name(TSR_OP_NONE), "NONE");
    EXPECT_STREQ(op_name(TSR_OP_MUL_MAT), "MUL_MAT");
    EXPECT_STREQ(op_name(TSR_OP_SOFT_MAX), "SOFT_MAX");
    EXPECT_STREQ(op_name(TSR_OP_ARGMAX), "ARGMAX");
    EXPECT_STREQ(op_name(TSR_OP_COUNT), "UNKNOWN");
    EXPECT_STREQ(op_name(-1), "UNKNOWN");
}

TEST(Ops, FailedBuildLeavesNoResult) {
    context ctx;
    tensor * a = ctx.new_tensor(TSR_TYPE_F32, {4, 2});
    tensor * b = ctx.new_tensor(TSR_TYPE_F32, {5, 2});
    const size_t n = ctx.n_tensors();
    EXPECT_THROW(mul_mat(ctx, a, b), tessera::error);
    EXPECT_THROW(reshape(ctx, a, {3}), tessera::error);
    EXPECT_THROW(view_1d(ctx, a, 9, 0), tessera::error);
    EXPECT_EQ(ctx.n_tensors(), n);
}

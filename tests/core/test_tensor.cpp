// Tensor metadata helpers and the context arena.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "tessera/core/error.hpp"
#include "tessera/core/tensor.hpp"
#include "support/error_of.hpp"

using namespace tessera;

namespace {
using tessera::test::error_of; // support/error_of.hpp
} // namespace

TEST(Context, PackedStridesAndSizes) {
    context ctx;
    tensor * t = ctx.new_tensor(TSR_TYPE_F32, {5, 3, 2});
    EXPECT_EQ(t->op, TSR_OP_NONE);
    EXPECT_EQ(t->ne[0], 5);
    EXPECT_EQ(t->ne[3], 1);
    EXPECT_EQ(t->nb[0], 4u);
    EXPECT_EQ(t->nb[1], 20u);
    EXPECT_EQ(t->nb[2], 60u);
    EXPECT_EQ(t->nb[3], 120u);
    EXPECT_EQ(nelements(t), 30);
    EXPECT_EQ(nrows(t), 6);
    EXPECT_EQ(nbytes(t), 120u);
    EXPECT_TRUE(is_contiguous(t));
    EXPECT_TRUE(is_row_contiguous(t));
    EXPECT_EQ(shape_str(t), "[5,3,2,1]");
    EXPECT_EQ(t->data, nullptr); // no alloc_data

    tensor * q = ctx.new_tensor(TSR_TYPE_Q4_0, {64, 3});
    EXPECT_EQ(q->nb[0], 18u);
    EXPECT_EQ(q->nb[1], 36u);
    EXPECT_EQ(q->nb[2], 108u);
    EXPECT_EQ(nbytes(q), 108u);

    tensor * like = ctx.new_tensor_like(q);
    EXPECT_TRUE(same_shape(like, q));
    EXPECT_EQ(like->type, TSR_TYPE_Q4_0);
    EXPECT_FALSE(same_shape(like, t));
    EXPECT_EQ(ctx.n_tensors(), 3u);
    EXPECT_EQ(ctx.tensor_at(1), q);
    EXPECT_THROW(ctx.tensor_at(3), tessera::error);
}

TEST(Context, StridedHelpers) {
    context ctx;
    tensor * t = ctx.new_tensor(TSR_TYPE_F32, {4, 3});
    t->nb[1] = 32; // rows padded to 8 floats
    EXPECT_FALSE(is_contiguous(t));
    EXPECT_TRUE(is_row_contiguous(t));
    EXPECT_EQ(nbytes(t), 32u * 2 + 16);
    // transposed layout
    t->nb[0] = 12;
    t->nb[1] = 4;
    EXPECT_FALSE(is_row_contiguous(t));
    EXPECT_EQ(nbytes(t), 4u + 3 * 12 + 2 * 4);
    // a dimension of extent 1 may have any stride
    tensor * u = ctx.new_tensor(TSR_TYPE_F32, {4, 1, 3});
    u->nb[1] = 999;
    EXPECT_TRUE(is_contiguous(u));
}

TEST(Context, ShapeErrors) {
    context ctx;
    EXPECT_NE(error_of([&] { ctx.new_tensor(TSR_TYPE_F32, {4, 0}); }).find("ne[1]"), std::string::npos);
    EXPECT_NE(error_of([&] { ctx.new_tensor(TSR_TYPE_Q8_0, {33}); }).find("block size 32"), std::string::npos);
    EXPECT_THROW(ctx.new_tensor(TSR_TYPE_F32, {1, 2, 3, 4, 5}), tessera::error);
    EXPECT_THROW(ctx.new_tensor(TSR_TYPE_F32, std::span<const int64_t>()), tessera::error);
    EXPECT_THROW(ctx.new_tensor(static_cast<type>(5), {4}), tessera::error);
    EXPECT_EQ(ctx.n_tensors(), 0u); // failed creations leave nothing behind
}

TEST(Context, SizeOverflowThrows) {
    context ctx;
    const int64_t big = int64_t{1} << 40;
    // element count overflows int64
    EXPECT_NE(error_of([&] { ctx.new_tensor(TSR_TYPE_F32, {big, big}); }).find("overflow"), std::string::npos);
    // element count fits (2^62) but the byte size does not
    const int64_t b31 = int64_t{1} << 31;
    EXPECT_NE(error_of([&] { ctx.new_tensor(TSR_TYPE_F32, {b31, b31}); }).find("overflow"), std::string::npos);
    EXPECT_THROW(ctx.new_tensor(TSR_TYPE_F64, {INT64_MAX}), tessera::error);
    EXPECT_EQ(ctx.n_tensors(), 0u);
}

TEST(Context, MaxTensorsLimit) {
    context ctx(context::params{.max_tensors = 3});
    for (int i = 0; i < 3; ++i) ctx.new_tensor(TSR_TYPE_F32, {4});
    const std::string msg = error_of([&] { ctx.new_tensor(TSR_TYPE_F32, {4}); });
    EXPECT_NE(msg.find("3 tensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("max_tensors"), std::string::npos) << msg;
    EXPECT_THROW(ctx.new_tensor_no_data(TSR_TYPE_F32, std::span<const int64_t>()), tessera::error);
    EXPECT_EQ(ctx.n_tensors(), 3u);
}

TEST(Context, AllocDataIsAlignedZeroedAndOwned) {
    context ctx(context::params{.max_tensors = 16, .alloc_data = true});
    EXPECT_TRUE(ctx.alloc_data());
    for (int64_t n : {1, 3, 17, 64, 1000}) {
        tensor * t = ctx.new_tensor(TSR_TYPE_F32, {n, 2});
        ASSERT_NE(t->data, nullptr);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % 64, 0u);
        const auto * f = static_cast<const float *>(t->data);
        for (int64_t i = 0; i < 2 * n; ++i) ASSERT_EQ(f[i], 0.0f);
        static_cast<float *>(t->data)[2 * n - 1] = 1.0f; // whole span writable (ASan checks)
    }
    const int64_t ne[] = {8};
    EXPECT_EQ(ctx.new_tensor_no_data(TSR_TYPE_F32, ne)->data, nullptr);
}

TEST(Context, NamesAndFind) {
    context ctx;
    tensor * a = context::set_name(ctx.new_tensor(TSR_TYPE_F32, {2}), "blk.0.attn_q.weight");
    tensor * b = context::set_name(ctx.new_tensor(TSR_TYPE_F32, {2}), std::string(200, 'x'));
    EXPECT_STREQ(a->name, "blk.0.attn_q.weight");
    EXPECT_EQ(std::string(b->name), std::string(TSR_MAX_NAME - 1, 'x'));
    EXPECT_EQ(ctx.find("blk.0.attn_q.weight"), a);
    EXPECT_EQ(ctx.find(std::string(TSR_MAX_NAME - 1, 'x')), b);
    EXPECT_EQ(ctx.find("nope"), nullptr);
    // A null tensor is an error, as for the ops (these dereferenced it).
    EXPECT_EQ(error_of([] { context::set_name(nullptr, "w"); }), "set_name('w'): the tensor is null");
    EXPECT_EQ(error_of([&] { ctx.new_tensor_like(nullptr); }),
              "new_tensor_like: the tensor to copy the type and shape of is null");
}

TEST(Tensor, OpParamsAreBitCast) {
    context ctx;
    tensor * t = ctx.new_tensor(TSR_TYPE_F32, {1});
    set_op_param_f32(t, 2, 1.5f);
    EXPECT_EQ(t->op_params[2], 0x3fc00000);
    EXPECT_EQ(op_param_f32(t, 2), 1.5f);
    EXPECT_THROW(op_param_f32(t, TSR_MAX_OP_PARAMS), tessera::error);
    EXPECT_THROW(set_op_param_f32(t, -1, 0.0f), tessera::error);
}

// GET_ROWS and SET_ROWS: every supported type, I32/I64 indices, batches,
// out-of-range indices (FAILED, never a crash; SET_ROWS writes nothing).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backends/cpu/ref_util.hpp"

namespace tessera::cpu::test {
namespace {

const int32_t k_weight_types[] = {TSR_TYPE_F32, TSR_TYPE_F16, TSR_TYPE_BF16, TSR_TYPE_Q8_0, TSR_TYPE_Q4_0};

// GET_ROWS output is the exact decoded value for every type: F16/BF16 widen
// exactly, and d * q of a quantized block (11-bit d times an integer of at
// most 8 bits) is exact in F32.
TEST(GetRows, PicksRowsOfEveryTypeExactly) {
    for (int32_t ty : k_weight_types) {
        const int64_t E = 64, R = 9, A2 = 2, n = 5;
        context ctx(data_ctx());
        std::mt19937 rng(static_cast<unsigned>(ty));
        tsr_tensor * a = ctx.new_tensor(static_cast<type>(ty), {E, R, A2});
        fill_weights(a, rng);
        tsr_tensor * idx = ctx.new_tensor(TSR_TYPE_I32, {n, A2});
        const int32_t rows[A2][n] = {{8, 0, 3, 3, 7}, {1, 2, 8, 0, 0}};
        for (int64_t j = 0; j < A2; ++j) {
            for (int64_t i = 0; i < n; ++i) set_i32(idx, rows[j][i], i, j);
        }
        tsr_tensor * out = get_rows(ctx, a, idx);
        for (int nth : thread_counts()) {
            ASSERT_EQ(compute(out, nth), TSR_STATUS_SUCCESS);
            for (int64_t j = 0; j < A2; ++j) {
                for (int64_t i = 0; i < n; ++i) {
                    for (int64_t e = 0; e < E; ++e) {
                        ASSERT_EQ(get(out, e, i, j), get(a, e, rows[j][i], j)) << type_name(ty) << " e=" << e;
                    }
                }
            }
        }
    }
}

TEST(GetRows, NonContiguousSource) {
    context ctx(data_ctx());
    std::mt19937 rng(4);
    tsr_tensor * base = ctx.new_tensor(TSR_TYPE_F16, {7, 33});
    fill_weights(base, rng);
    tsr_tensor * a = transpose(ctx, base); // [33, 7], nb[0] = 14
    tsr_tensor * idx = ctx.new_tensor(TSR_TYPE_I32, {3});
    const int32_t rows[3] = {6, 0, 6};
    for (int i = 0; i < 3; ++i) set_i32(idx, rows[i], i);
    tsr_tensor * out = get_rows(ctx, a, idx);
    ASSERT_EQ(compute(out, 2), TSR_STATUS_SUCCESS);
    for (int64_t i = 0; i < 3; ++i) {
        for (int64_t e = 0; e < 33; ++e) ASSERT_EQ(get(out, e, i), get(a, e, rows[i]));
    }
}

TEST(GetRows, IndexOutOfRangeFails) {
    for (int32_t bad : {9, -1, 1 << 30}) {
        for (int nth : {1, 4}) {
            context ctx(data_ctx());
            tsr_tensor * a = ctx.new_tensor(TSR_TYPE_Q8_0, {32, 9});
            tsr_tensor * idx = ctx.new_tensor(TSR_TYPE_I32, {6});
            set_i32(idx, bad, 4);
            EXPECT_EQ(compute(get_rows(ctx, a, idx), nth), TSR_STATUS_FAILED) << "index " << bad;
        }
    }
}

// Largest allowed |decoded - x| when storing x into a dst row of `ty`, with
// amax/max of the 32-element block around it (see the format definitions):
//   F32 exact; F16 round to nearest: 2^-11 relative (normal range);
//   BF16: 2^-8 relative; Q8_0: d/2 + 127 |d - f16(d)| <= 0.6 amax/127;
//   Q4_0: step |d| = amax/8, the element at -max clamps one step away:
//   1.1 amax/8.
double store_tol(int32_t ty, double x, double amax) {
    switch (ty) {
    case TSR_TYPE_F32: return 0.0;
    case TSR_TYPE_F16: return std::ldexp(std::fabs(x), -11);
    case TSR_TYPE_BF16: return std::ldexp(std::fabs(x), -8);
    case TSR_TYPE_Q8_0: return 0.6 * amax / 127.0;
    default: return 1.1 * amax / 8.0;
    }
}

TEST(SetRows, WritesRowsOfEveryTypeWithI32AndI64Indices) {
    for (int32_t ty : k_weight_types) {
        for (int32_t idx_type : {TSR_TYPE_I32, TSR_TYPE_I64}) {
            for (int nth : {1, 3}) {
                const int64_t E = 64, R = 7, D2 = 2, n = 3;
                context ctx(data_ctx());
                std::mt19937 rng(static_cast<unsigned>(ty * 10 + idx_type));
                tsr_tensor * dst = ctx.new_tensor(static_cast<type>(ty), {E, R, D2});
                fill_weights(dst, rng);
                const std::vector<char> before(static_cast<char *>(dst->data),
                                               static_cast<char *>(dst->data) + nbytes(dst));
                tsr_tensor * src = ctx.new_tensor(TSR_TYPE_F32, {E, n, D2});
                fill_uniform(src, rng, -3.0f, 3.0f);
                tsr_tensor * idx = ctx.new_tensor(static_cast<type>(idx_type), {n, D2});
                const int64_t rows[D2][n] = {{6, 0, 2}, {3, 4, 5}};
                for (int64_t j = 0; j < D2; ++j) {
                    for (int64_t i = 0; i < n; ++i) {
                        if (idx_type == TSR_TYPE_I32) set_i32(idx, static_cast<int32_t>(rows[j][i]), i, j);
                        else set_i64(idx, rows[j][i], i, j);
                    }
                }
                tsr_tensor * out = set_rows(ctx, dst, src, idx);
                ASSERT_EQ(compute(out, nth), TSR_STATUS_SUCCESS);
                const size_t row_bytes = dst->nb[1];
                for (int64_t j = 0; j < D2; ++j) {
                    for (int64_t r = 0; r < R; ++r) {
                        int64_t from = -1;
                        for (int64_t i = 0; i < n; ++i) from = rows[j][i] == r ? i : from;
                        const char * now = static_cast<const char *>(dst->data) + r * row_bytes + j * dst->nb[2];
                        if (from < 0) { // untouched row: bytes unchanged
                            ASSERT_EQ(std::memcmp(now, before.data() + (now - static_cast<char *>(dst->data)), row_bytes), 0);
                            continue;
                        }
                        for (int64_t e = 0; e < E; ++e) {
                            const double x = get(src, e, from, j);
                            double amax = 0;
                            for (int64_t k = e / 32 * 32; k < e / 32 * 32 + 32; ++k) {
                                amax = std::max(amax, std::fabs(get(src, k, from, j)));
                            }
                            ASSERT_NEAR(get(dst, e, r, j), x, store_tol(ty, x, amax) + 1e-30)
                                << type_name(ty) << " row " << r << " e=" << e;
                        }
                    }
                }
            }
        }
    }
}

TEST(SetRows, DuplicateIndexLastWinsForAnyThreadCount) {
    for (int nth : {1, 2, 5}) {
        context ctx(data_ctx());
        tsr_tensor * dst = ctx.new_tensor(TSR_TYPE_F32, {4, 3});
        tsr_tensor * src = ctx.new_tensor(TSR_TYPE_F32, {4, 3});
        for (int64_t i = 0; i < 3; ++i) {
            for (int64_t e = 0; e < 4; ++e) set_f32(src, static_cast<float>(10 * i + e), e, i);
        }
        tsr_tensor * idx = ctx.new_tensor(TSR_TYPE_I32, {3});
        set_i32(idx, 1, 0);
        set_i32(idx, 2, 1);
        set_i32(idx, 1, 2);
        ASSERT_EQ(compute(set_rows(ctx, dst, src, idx), nth), TSR_STATUS_SUCCESS);
        for (int64_t e = 0; e < 4; ++e) {
            EXPECT_EQ(get(dst, e, 1), 20.0 + e);
            EXPECT_EQ(get(dst, e, 2), 10.0 + e);
            EXPECT_EQ(get(dst, e, 0), 0.0);
        }
    }
}

TEST(SetRows, IndexOutOfRangeFailsAndWritesNothing) {
    for (int32_t idx_type : {TSR_TYPE_I32, TSR_TYPE_I64}) {
        const int64_t huge = idx_type == TSR_TYPE_I32 ? int64_t{INT32_MAX} : int64_t{1} << 40;
        for (int64_t bad : {int64_t{5}, int64_t{-1}, huge}) {
            for (int nth : {1, 3}) {
                context ctx(data_ctx());
                tsr_tensor * dst = ctx.new_tensor(TSR_TYPE_F16, {8, 5});
                tsr_tensor * src = ctx.new_tensor(TSR_TYPE_F32, {8, 4});
                std::mt19937 rng(1);
                fill_uniform(src, rng);
                tsr_tensor * idx = ctx.new_tensor(static_cast<type>(idx_type), {4});
                for (int64_t i = 0; i < 4; ++i) {
                    const int64_t v = i == 2 ? bad : i;
                    if (idx_type == TSR_TYPE_I32) set_i32(idx, static_cast<int32_t>(v), i);
                    else set_i64(idx, v, i);
                }
                EXPECT_EQ(compute(set_rows(ctx, dst, src, idx), nth), TSR_STATUS_FAILED) << "index " << bad;
                for (int64_t r = 0; r < 5; ++r) {
                    for (int64_t e = 0; e < 8; ++e) ASSERT_EQ(get(dst, e, r), 0.0);
                }
            }
        }
    }
}

} // namespace
} // namespace tessera::cpu::test

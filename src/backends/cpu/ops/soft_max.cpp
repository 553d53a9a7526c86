// backends/cpu/ops/soft_max.cpp — row-wise soft-max of (scale * a + mask).
//   a:    F32 [n, rows, A2, A3], any strides
//   mask: null or F32 [n, >= rows, M2, M3], A2 % M2 == 0, A3 % M3 == 0
//         (row i1 of batch (i2, i3) uses mask row (i1, i2 % M2, i3 % M3))
// op_params [0] = scale. The maximum is subtracted before exponentiating
// (exp(v - max) / sum exp(v - max), mathematically equal, never overflows);
// a row whose entries are all -inf gives zeros, a row with a NaN NaNs.
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/ops/ops.hpp"
#include "backends/cpu/ops/tensor_access.hpp"
#include "backends/cpu/ops/vec_math.hpp"

namespace tessera::cpu {

namespace {

// exp(v[i] - max) in place for i < n; returns their sum (in double).
// With AVX2 eight lanes at a time (simd::exp8, within 2 ulp of std::exp).
double exp_shifted_sum(float * v, int64_t n, float max) {
    double sum = 0.0;
    int64_t i = 0;
#ifdef TSR_CPU_AVX2
    const __m256 mv = _mm256_set1_ps(max);
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    for (; i + 8 <= n; i += 8) {
        const __m256 e = simd::exp8(_mm256_sub_ps(_mm256_loadu_ps(v + i), mv));
        _mm256_storeu_ps(v + i, e);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    alignas(32) double part[4];
    _mm256_store_pd(part, _mm256_add_pd(s0, s1));
    sum = (part[0] + part[1]) + (part[2] + part[3]);
#endif
    for (; i < n; ++i) {
        v[i] = std::exp(v[i] - max);
        sum += v[i];
    }
    return sum;
}

} // namespace

bool soft_max_supported(const tsr_tensor * node) {
    const tsr_tensor * a = node->src[0];
    const tsr_tensor * mask = node->src[1];
    if (node->type != TSR_TYPE_F32 || a->type != TSR_TYPE_F32) return false;
    for (int i = 0; i < TSR_MAX_DIMS; ++i) {
        if (node->ne[i] != a->ne[i]) return false;
    }
    if (mask != nullptr) {
        if (mask->type != TSR_TYPE_F32 || mask->ne[0] != a->ne[0] || mask->ne[1] < a->ne[1]) return false;
        if (a->ne[2] % mask->ne[2] != 0 || a->ne[3] % mask->ne[3] != 0) return false;
    }
    return true;
}

// One row of values (v = scale * a + mask), n floats.
size_t soft_max_work_size(const tsr_tensor * node) {
    return align64(static_cast<size_t>(node->ne[0]) * sizeof(float));
}

bool compute_soft_max(const compute_params & p, tsr_tensor * dst) {
    const tsr_tensor * a = dst->src[0];
    const tsr_tensor * mask = dst->src[1];
    float scale;
    std::memcpy(&scale, &dst->op_params[0], sizeof scale);
    const int64_t n = dst->ne[0];
    auto * v = static_cast<float *>(p.wdata);

    const item_range rows = split_items(count_rows(dst), p.ith, p.nth);
    for (int64_t r = rows.begin; r < rows.end; ++r) {
        const row_index ri = unravel_row(dst, r);
        const char * x = row_ptr(a, ri);
        const char * m = mask != nullptr ? row_ptr(mask, ri.i1, ri.i2 % mask->ne[2], ri.i3 % mask->ne[3]) : nullptr;
        float max = -std::numeric_limits<float>::infinity();
        for (int64_t i = 0; i < n; ++i) {
            float val = scale * read_f32(x + static_cast<size_t>(i) * a->nb[0]);
            if (m != nullptr) val += read_f32(m + static_cast<size_t>(i) * mask->nb[0]);
            v[i] = val;
            max = simd::max_keep_nan(max, val); // the row is NaN, not zeros
        }
        char * d = row_ptr(dst, ri);
        if (max == -std::numeric_limits<float>::infinity()) {
            for (int64_t i = 0; i < n; ++i) write_f32(d + static_cast<size_t>(i) * dst->nb[0], 0.0f);
            continue;
        }
        const double sum = exp_shifted_sum(v, n, max);
        const auto inv = static_cast<float>(1.0 / sum);
        for (int64_t i = 0; i < n; ++i) write_f32(d + static_cast<size_t>(i) * dst->nb[0], v[i] * inv);
    }
    return true;
}

} // namespace tessera::cpu

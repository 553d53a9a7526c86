// backends/cpu/ops/rms_norm.cpp — RMS normalization over ne[0]
// (Zhang & Sennrich 2019, "Root Mean Square Layer Normalization", eq. 4
// without the gain): y = x / sqrt(mean(x^2) + eps). op_params [0] = eps.
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/ops/ops.hpp"
#include "backends/cpu/ops/tensor_access.hpp"

namespace tessera::cpu {

namespace {

// Sum of squares of n packed floats in double, in a fixed order: 8 lanes
// (element i goes to lane i % 8), then a fixed pairwise reduction.
double sum_squares(const float * x, int64_t n) {
    constexpr int lanes = 8;
    double acc[lanes] = {};
    int64_t i = 0;
    for (; i + lanes <= n; i += lanes) {
        for (int j = 0; j < lanes; ++j) acc[j] += static_cast<double>(x[i + j]) * x[i + j];
    }
    for (int j = 0; i < n; ++i, ++j) acc[j] += static_cast<double>(x[i]) * x[i];
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

} // namespace

bool rms_norm_supported(const tsr_tensor * node) {
    const tsr_tensor * a = node->src[0];
    if (node->type != TSR_TYPE_F32 || a->type != TSR_TYPE_F32) return false;
    for (int i = 0; i < TSR_MAX_DIMS; ++i) {
        if (node->ne[i] != a->ne[i]) return false;
    }
    return true;
}

bool compute_rms_norm(const compute_params & p, tsr_tensor * dst) {
    const tsr_tensor * a = dst->src[0];
    float eps;
    std::memcpy(&eps, &dst->op_params[0], sizeof eps);
    const int64_t ne0 = dst->ne[0];
    const bool packed = packed_aligned_rows(dst, 4, alignof(float)) && packed_aligned_rows(a, 4, alignof(float));

    const item_range rows = split_items(count_rows(dst), p.ith, p.nth);
    for (int64_t r = rows.begin; r < rows.end; ++r) {
        const row_index ri = unravel_row(dst, r);
        char * d = row_ptr(dst, ri);
        const char * x = row_ptr(a, ri);
        double sum = 0.0;
        if (packed) {
            sum = sum_squares(reinterpret_cast<const float *>(x), ne0);
        } else {
            for (int64_t i = 0; i < ne0; ++i) {
                const double v = read_f32(x + static_cast<size_t>(i) * a->nb[0]);
                sum += v * v;
            }
        }
        const double scale = 1.0 / std::sqrt(sum / static_cast<double>(ne0) + static_cast<double>(eps));
        // A row whose RMS is below ~2.9e-39 (subnormal values, eps 0) has a
        // scale past FLT_MAX: it is applied in double, so y stays finite.
        // Other rows multiply by the scale rounded to float.
        const bool wide = scale > double(std::numeric_limits<float>::max());
        const auto s = static_cast<float>(scale);
        if (packed) {
            const auto * xf = reinterpret_cast<const float *>(x);
            auto * df = reinterpret_cast<float *>(d);
            if (wide) {
                for (int64_t i = 0; i < ne0; ++i) df[i] = static_cast<float>(static_cast<double>(xf[i]) * scale);
            } else {
                for (int64_t i = 0; i < ne0; ++i) df[i] = xf[i] * s;
            }
        } else {
            for (int64_t i = 0; i < ne0; ++i) {
                const float v = read_f32(x + static_cast<size_t>(i) * a->nb[0]);
                write_f32(d + static_cast<size_t>(i) * dst->nb[0],
                          wide ? static_cast<float>(static_cast<double>(v) * scale) : v * s);
            }
        }
    }
    return true;
}

} // namespace tessera::cpu

// backends/cpu/ops/unary.cpp — element-wise SCALE, SILU and GELU on F32
// tensors of any strides (result has the source's shape).
#include <cmath>
#include <cstring>

#include "backends/cpu/ops/ops.hpp"
#include "backends/cpu/ops/tensor_access.hpp"
#include "backends/cpu/ops/vec_math.hpp"

namespace tessera::cpu {

namespace {

float op_param_float(const tsr_tensor * t, int i) {
    float v;
    std::memcpy(&v, &t->op_params[i], sizeof v);
    return v;
}

// Applies f to every element of src[0], writing dst; rows split between threads.
template <class F>
bool compute_unary(const compute_params & p, tsr_tensor * dst, F f) {
    const tsr_tensor * a = dst->src[0];
    const int64_t ne0 = dst->ne[0];
    const bool packed = packed_aligned_rows(dst, 4, alignof(float)) && packed_aligned_rows(a, 4, alignof(float));
    const item_range rows = split_items(count_rows(dst), p.ith, p.nth);
    for (int64_t r = rows.begin; r < rows.end; ++r) {
        const row_index ri = unravel_row(dst, r);
        char * d = row_ptr(dst, ri);
        const char * x = row_ptr(a, ri);
        if (packed) {
            auto * df = reinterpret_cast<float *>(d);
            const auto * xf = reinterpret_cast<const float *>(x);
            for (int64_t i = 0; i < ne0; ++i) df[i] = f(xf[i]);
        } else {
            for (int64_t i = 0; i < ne0; ++i) {
                write_f32(d + static_cast<size_t>(i) * dst->nb[0], f(read_f32(x + static_cast<size_t>(i) * a->nb[0])));
            }
        }
    }
    return true;
}

} // namespace

bool unary_supported(const tsr_tensor * node) {
    const tsr_tensor * a = node->src[0];
    if (node->type != TSR_TYPE_F32 || a->type != TSR_TYPE_F32) return false;
    for (int i = 0; i < TSR_MAX_DIMS; ++i) {
        if (node->ne[i] != a->ne[i]) return false;
    }
    return true;
}

// y = s * x + bias; op_params [0] = s, [1] = bias.
bool compute_scale(const compute_params & p, tsr_tensor * node) {
    const float s = op_param_float(node, 0);
    const float bias = op_param_float(node, 1);
    return compute_unary(p, node, [s, bias](float x) { return s * x + bias; });
}

// SiLU(x) = x * sigmoid(x) = x / (1 + e^-x) (Elfwing et al. 2017). With
// AVX2, packed rows go eight at a time through simd::exp8 (within 2 ulp of
// std::exp); with AVX-512 sixteen at a time through simd::exp16 (the same
// bits).
bool compute_silu(const compute_params & p, tsr_tensor * node) {
    auto silu = [](float x) { return x / (1.0f + std::exp(-x)); };
#ifdef TSR_CPU_AVX2
    const tsr_tensor * a = node->src[0];
    if (packed_aligned_rows(node, 4, alignof(float)) && packed_aligned_rows(a, 4, alignof(float))) {
        const int64_t ne0 = node->ne[0];
        const item_range rows = split_items(count_rows(node), p.ith, p.nth);
        for (int64_t r = rows.begin; r < rows.end; ++r) {
            const row_index ri = unravel_row(node, r);
            auto * d = reinterpret_cast<float *>(row_ptr(node, ri));
            const auto * x = reinterpret_cast<const float *>(row_ptr(a, ri));
            int64_t i = 0;
#ifdef TSR_CPU_AVX512
            for (; i + 16 <= ne0; i += 16) {
                const __m512 v = _mm512_loadu_ps(x + i);
                const __m512 e = simd::exp16(_mm512_sub_ps(_mm512_setzero_ps(), v));
                _mm512_storeu_ps(d + i, _mm512_div_ps(v, _mm512_add_ps(_mm512_set1_ps(1.0f), e)));
            }
#endif
            for (; i + 8 <= ne0; i += 8) {
                const __m256 v = _mm256_loadu_ps(x + i);
                const __m256 e = simd::exp8(_mm256_sub_ps(_mm256_setzero_ps(), v));
                _mm256_storeu_ps(d + i, _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0f), e)));
            }
            for (; i < ne0; ++i) d[i] = silu(x[i]);
        }
        return true;
    }
#endif
    return compute_unary(p, node, silu);
}

// GELU, tanh approximation (Hendrycks & Gimpel 2016, section 2):
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
bool compute_gelu(const compute_params & p, tsr_tensor * node) {
    constexpr float sqrt_2_over_pi = 0.7978845608028654f;
    return compute_unary(p, node, [](float x) {
        return 0.5f * x * (1.0f + std::tanh(sqrt_2_over_pi * (x + 0.044715f * x * x * x)));
    });
}

} // namespace tessera::cpu

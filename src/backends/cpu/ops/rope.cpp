// backends/cpu/ops/rope.cpp — rotary position embedding (Su et al. 2021,
// "RoFormer", eq. 34).
//   x:   F32 [head_dim, n_head, n_tokens, ne3], any strides
//   pos: I32 [n_tokens]
// op_params: [0] n_dims, [1] mode, [2] freq_base (f32), [3] freq_scale (f32).
// Pair i (0 <= i < n_dims/2) of each head is rotated by
//   theta_i = pos * freq_scale * freq_base^(-2i/n_dims);
// ROPE_NORMAL pairs (x[2i], x[2i+1]), ROPE_NEOX pairs (x[i], x[i + n_dims/2]).
// Elements n_dims..head_dim-1 are copied.
#include <cmath>
#include <cstring>

#include "backends/cpu/ops/ops.hpp"
#include "backends/cpu/ops/tensor_access.hpp"

namespace tessera::cpu {

namespace {

constexpr int32_t mode_normal = 0; // tessera::ROPE_NORMAL
constexpr int32_t mode_neox = 2;   // tessera::ROPE_NEOX

float param_f32(const tsr_tensor * t, int i) {
    float v;
    std::memcpy(&v, &t->op_params[i], sizeof v);
    return v;
}

} // namespace

bool rope_supported(const tsr_tensor * node) {
    const tsr_tensor * x = node->src[0];
    const tsr_tensor * pos = node->src[1];
    if (node->type != TSR_TYPE_F32 || x->type != TSR_TYPE_F32 || pos->type != TSR_TYPE_I32) return false;
    for (int i = 0; i < TSR_MAX_DIMS; ++i) {
        if (node->ne[i] != x->ne[i]) return false;
    }
    if (pos->ne[0] != x->ne[2]) return false;
    const int32_t n_dims = node->op_params[0];
    const int32_t mode = node->op_params[1];
    if (n_dims < 0 || n_dims % 2 != 0 || n_dims > x->ne[0]) return false;
    return mode == mode_normal || mode == mode_neox;
}

// cos and sin of theta_i for one token, n_dims/2 of each.
size_t rope_work_size(const tsr_tensor * node) {
    return align64(static_cast<size_t>(node->op_params[0]) * sizeof(float));
}

bool compute_rope(const compute_params & p, tsr_tensor * dst) {
    const tsr_tensor * x = dst->src[0];
    const tsr_tensor * pos = dst->src[1];
    const int64_t head_dim = dst->ne[0];
    const int64_t n_dims = dst->op_params[0];
    const int64_t half = n_dims / 2;
    const bool neox = dst->op_params[1] == mode_neox;
    const double freq_base = param_f32(dst, 2);
    const double freq_scale = param_f32(dst, 3);

    auto * cos_t = static_cast<float *>(p.wdata);
    float * sin_t = cos_t + half;
    int64_t cached_token = -1;

    const item_range rows = split_items(count_rows(dst), p.ith, p.nth);
    for (int64_t r = rows.begin; r < rows.end; ++r) {
        const row_index ri = unravel_row(dst, r);
        if (ri.i2 != cached_token) {
            int32_t position;
            std::memcpy(&position, static_cast<const char *>(pos->data) + static_cast<size_t>(ri.i2) * pos->nb[0],
                        sizeof position);
            for (int64_t i = 0; i < half; ++i) {
                const double theta = position * freq_scale *
                                     std::pow(freq_base, -2.0 * static_cast<double>(i) / static_cast<double>(n_dims));
                cos_t[i] = static_cast<float>(std::cos(theta));
                sin_t[i] = static_cast<float>(std::sin(theta));
            }
            cached_token = ri.i2;
        }
        const char * src = row_ptr(x, ri);
        char * d = row_ptr(dst, ri);
        const size_t sx = x->nb[0];
        const size_t sd = dst->nb[0];
        const int64_t stride = neox ? 1 : 2;    // distance between pairs' first elements
        const int64_t partner = neox ? half : 1; // distance from first to second element
        for (int64_t i = 0; i < half; ++i) {
            const int64_t j0 = i * stride;
            const int64_t j1 = j0 + partner;
            const float x0 = read_f32(src + static_cast<size_t>(j0) * sx);
            const float x1 = read_f32(src + static_cast<size_t>(j1) * sx);
            write_f32(d + static_cast<size_t>(j0) * sd, x0 * cos_t[i] - x1 * sin_t[i]);
            write_f32(d + static_cast<size_t>(j1) * sd, x0 * sin_t[i] + x1 * cos_t[i]);
        }
        for (int64_t j = n_dims; j < head_dim; ++j) {
            write_f32(d + static_cast<size_t>(j) * sd, read_f32(src + static_cast<size_t>(j) * sx));
        }
    }
    return true;
}

} // namespace tessera::cpu

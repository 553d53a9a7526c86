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
#include <new>
#include <vector>

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

namespace {

// The last table of cos and sin this thread computed, with what it was
// computed for: a decode graph ropes Q and K of every layer at the same
// position, so each thread computes the table once per graph instead of
// once per node (135M: 60 nodes a token).
struct rope_table {
    int32_t position = 0;
    int64_t n_dims = -1;
    double freq_base = 0, freq_scale = 0;
    std::vector<float> cs; // cos_0 .. cos_{half-1}, sin_0 .. sin_{half-1}

    // Parameters compared bit for bit (+0 and -0 give tables that differ
    // in the sign of sin 0).
    bool matches(int32_t pos, int64_t nd, double base, double scale) const {
        return n_dims == nd && position == pos && std::memcmp(&freq_base, &base, sizeof base) == 0 &&
               std::memcmp(&freq_scale, &scale, sizeof scale) == 0;
    }
};

// cos theta_i (i < n_dims / 2) followed by sin theta_i, theta_i as in the
// header; nullptr when the table cannot be allocated.
const float * rope_cos_sin(int32_t position, int64_t n_dims, double freq_base, double freq_scale) {
    thread_local rope_table t;
    if (!t.matches(position, n_dims, freq_base, freq_scale)) {
        const int64_t half = n_dims / 2;
        t.n_dims = -1; // invalid until filled
        try {
            t.cs.resize(static_cast<size_t>(n_dims));
        } catch (const std::bad_alloc &) {
            return nullptr;
        }
        for (int64_t i = 0; i < half; ++i) {
            const double theta = position * freq_scale *
                                 std::pow(freq_base, -2.0 * static_cast<double>(i) / static_cast<double>(n_dims));
            t.cs[static_cast<size_t>(i)] = static_cast<float>(std::cos(theta));
            t.cs[static_cast<size_t>(half + i)] = static_cast<float>(std::sin(theta));
        }
        t.position = position;
        t.n_dims = n_dims;
        t.freq_base = freq_base;
        t.freq_scale = freq_scale;
    }
    return t.cs.data();
}

} // namespace

bool compute_rope(const compute_params & p, tsr_tensor * dst) {
    const tsr_tensor * x = dst->src[0];
    const tsr_tensor * pos = dst->src[1];
    const int64_t head_dim = dst->ne[0];
    const int64_t n_dims = dst->op_params[0];
    const int64_t half = n_dims / 2;
    const bool neox = dst->op_params[1] == mode_neox;
    const double freq_base = param_f32(dst, 2);
    const double freq_scale = param_f32(dst, 3);

    const float * cos_t = nullptr;
    const float * sin_t = nullptr;
    int64_t cached_token = -1;

    const item_range rows = split_items(count_rows(dst), p.ith, p.nth);
    for (int64_t r = rows.begin; r < rows.end; ++r) {
        const row_index ri = unravel_row(dst, r);
        if (half > 0 && ri.i2 != cached_token) { // n_dims 0: nothing rotates, no table // n_dims 0: nothing rotates, no table
            int32_t position;
            std::memcpy(&position, static_cast<const char *>(pos->data) + static_cast<size_t>(ri.i2) * pos->nb[0],
                        sizeof position);
            cos_t = rope_cos_sin(position, n_dims, freq_base, freq_scale);
            if (cos_t == nullptr) return false;
            sin_t = cos_t + half;
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

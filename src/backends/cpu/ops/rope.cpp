// backends/cpu/ops/rope.cpp — rotary position embedding (Su et al. 2021,
// "RoFormer", eq. 34).
//   x:   F32 [head_dim, n_head, n_tokens, ne3], any strides
//   pos: I32 [n_tokens]
// op_params: [0] n_dims, [1] mode, [2] freq_base (f32), [3] freq_scale (f32);
// src[2]: null or F32 freq_factors [>= n_dims/2].
// Pair i (0 <= i < n_dims/2) of each head is rotated by
//   theta_i = pos * freq_scale * freq_base^(-2i/n_dims) / freq_factors[i];
// ROPE_NORMAL pairs (x[2i], x[2i+1]), ROPE_NEOX pairs (x[i], x[i + n_dims/2]).
// Elements n_dims..head_dim-1 are copied.
#include <algorithm>
#include <cmath>
#include <cstdint>
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
    const tsr_tensor * ff = node->src[2];
    if (ff != nullptr && (ff->type != TSR_TYPE_F32 || ff->ne[0] < n_dims / 2 || ff->nb[0] != sizeof(float))) {
        return false;
    }
    return mode == mode_normal || mode == mode_neox;
}

namespace {

// Bytes of cos/sin tables a thread keeps (rope_cos_sin): positions
// 0 .. k_table_bytes / (4 n_dims) - 1, 4096 positions at n_dims 64.
constexpr size_t k_table_bytes = size_t(1) << 20;

// cos theta_i (i < n_dims / 2) followed by sin theta_i, theta_i as in the
// header, into out[0 .. n_dims).
void fill_cos_sin(int32_t position, int64_t n_dims, double freq_base, double freq_scale, const float * factors,
                  float * out) {
    const int64_t half = n_dims / 2;
    for (int64_t i = 0; i < half; ++i) {
        double theta = position * freq_scale *
                       std::pow(freq_base, -2.0 * static_cast<double>(i) / static_cast<double>(n_dims));
        if (factors != nullptr) theta /= factors[i];
        out[i] = static_cast<float>(std::cos(theta));
        out[half + i] = static_cast<float>(std::sin(theta));
    }
}

// The cos/sin tables this thread computed, with the parameters they were
// computed for. Every layer ropes Q and K at the same positions, so each
// thread computes a position's table once per graph instead of once per
// node (135M: 60 nodes; a 512-token prompt spent 2% of its time in pow,
// cos and sin): positions below `cap` keep one table each (computed on
// first use), any other position the last one computed.
struct rope_tables {
    int64_t n_dims = -1; // -1: nothing valid
    double freq_base = 0, freq_scale = 0;
    bool has_factors = false;
    std::vector<float> factors; // a copy of the freq_factors the tables were computed with
    std::vector<float> cs;       // position p's table at p n_dims (p < have.size())
    std::vector<uint8_t> have;   // have[p]: cs holds p's table
    int32_t last_position = 0;   // the table in `last`, when last_valid
    bool last_valid = false;
    std::vector<float> last;

    // Parameters compared bit for bit (+0 and -0 give tables that differ
    // in the sign of sin 0).
    // The factors are compared by value: a graph may be run again after
    // its freq_factors tensor was given other values.
    bool matches(int64_t nd, double base, double scale, const float * ff) const {
        return n_dims == nd && std::memcmp(&freq_base, &base, sizeof base) == 0 &&
               std::memcmp(&freq_scale, &scale, sizeof scale) == 0 && has_factors == (ff != nullptr) &&
               (ff == nullptr || std::memcmp(factors.data(), ff, factors.size() * sizeof(float)) == 0);
    }
};

// Position `position`'s table (fill_cos_sin), valid until the next call on
// this thread; nullptr when memory for it cannot be allocated.
const float * rope_cos_sin(int32_t position, int64_t n_dims, double freq_base, double freq_scale,
                           const float * factors) {
    thread_local rope_tables t;
    try {
        if (!t.matches(n_dims, freq_base, freq_scale, factors)) {
            t.n_dims = -1; // invalid until the parameters are stored
            t.have.clear(); // cs's layout depends on n_dims: start it again
            t.cs.clear();
            t.last_valid = false;
            t.last.resize(static_cast<size_t>(n_dims));
            t.freq_base = freq_base;
            t.freq_scale = freq_scale;
            t.has_factors = factors != nullptr;
            t.factors.assign(factors, factors == nullptr ? factors : factors + n_dims / 2);
            t.n_dims = n_dims;
        }
        const auto nd = static_cast<size_t>(n_dims);
        const size_t cap = std::max<size_t>(1, k_table_bytes / (sizeof(float) * std::max<size_t>(nd, 1)));
        if (position >= 0 && static_cast<size_t>(position) < cap) {
            const auto p = static_cast<size_t>(position);
            if (p >= t.have.size()) { // grow geometrically, up to cap
                const size_t n = std::min(cap, std::max(p + 1, 2 * t.have.size()));
                t.cs.resize(n * nd);
                t.have.resize(n, 0);
            }
            float * out = t.cs.data() + p * nd;
            if (t.have[p] == 0) {
                fill_cos_sin(position, n_dims, freq_base, freq_scale, t.has_factors ? t.factors.data() : nullptr, out);
                t.have[p] = 1;
            }
            return out;
        }
        if (!t.last_valid || t.last_position != position) {
            fill_cos_sin(position, n_dims, freq_base, freq_scale, t.has_factors ? t.factors.data() : nullptr,
                         t.last.data());
            t.last_position = position;
            t.last_valid = true;
        }
        return t.last.data();
    } catch (const std::bad_alloc &) {
        t.n_dims = -1; // parameters stored, tables maybe not: start again next time
        return nullptr;
    }
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
    const float * factors = dst->src[2] != nullptr ? static_cast<const float *>(dst->src[2]->data) : nullptr;

    const float * cos_t = nullptr;
    const float * sin_t = nullptr;
    int64_t cached_token = -1;

    const item_range rows = split_items(count_rows(dst), p.ith, p.nth);
    for (int64_t r = rows.begin; r < rows.end; ++r) {
        const row_index ri = unravel_row(dst, r);
        if (half > 0 && ri.i2 != cached_token) { // n_dims 0: nothing rotates, no table
            int32_t position;
            std::memcpy(&position, static_cast<const char *>(pos->data) + static_cast<size_t>(ri.i2) * pos->nb[0],
                        sizeof position);
            cos_t = rope_cos_sin(position, n_dims, freq_base, freq_scale, factors);
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

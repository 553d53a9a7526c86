// backends/cpu/ops/mul_mat_generic.cpp — the portable MUL_MAT kernel:
// dst[m, n] = sum_k a[k, m] * b[k, n]. Used by the baseline builds and for
// layouts the vector paths (mul_mat.cpp) do not take.
//   a:   weights [K, M, A2, A3] of F32, F16, BF16 (any strides) or Q8_0,
//        Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K (row-contiguous)
//   b:   activations F32 [K, N, B2, B3], any strides
//   dst: F32 [M, N, B2, B3]; batch (i2, i3) uses a's (i2 / (B2/A2), i3 / (B3/A3))
//
// Work is cut into fixed tiles of k_tile_m weight rows x k_tile_n columns
// of one batch; threads take contiguous ranges of tiles (so a small M still
// spreads over threads through the column tiles). Tile boundaries do not
// depend on the thread count, and every output element is one dot product
// with a fixed order of operations (vec_dot.hpp): results are bit-identical
// for any number of threads.
//
// For each tile a thread prepares the activation columns once: F32 columns
// are used in place (or gathered when strided); for quantized weights they
// are quantized to Q8_0 (K-quants: Q8_K) in the thread's scratch with the
// core's reference quantizer. Then, per weight row, the row is brought to the kernel's input
// format (F16/BF16 widened to F32, Q4_0/Q5_0 expanded to Q8_0, Q5_1
// decoded to F32 (x = d q + m: one F32 rounding per element, no 8-bit form
// holds it), strided rows gathered; all lossless but Q5_1's rounding) and
// dotted with each column: dot_f32, the
// integer block dot product dot_q8_0, or dot_k_quant (vec_dot_k.hpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/ops/mul_mat_impl.hpp"
#include "backends/cpu/ops/q8_act.hpp"
#include "backends/cpu/ops/tensor_access.hpp"
#include "backends/cpu/ops/vec_dot.hpp"
#include "backends/cpu/ops/vec_dot_k.hpp"

namespace tessera::cpu {

namespace {

constexpr int64_t k_tile_m = 16; // weight rows per tile
constexpr int64_t k_tile_n = 32; // activation columns per tile

bool is_quant_weight(int32_t t) {
    return t == TSR_TYPE_Q8_0 || t == TSR_TYPE_Q4_0 || t == TSR_TYPE_Q5_0 || is_k_quant(t);
}

// Bytes of one quantized column (Q8_0, or Q8_K for K-quant weights).
size_t q8_row_bytes(int32_t weight_type, int64_t k) {
    if (is_k_quant(weight_type)) return static_cast<size_t>(k / k_qk_k) * k_q8_k_bytes;
    return static_cast<size_t>(k / k_qk) * k_q8_0_bytes;
}

struct mm_shape {
    int64_t K, M, N;
    int64_t B2, B3; // dst batch dims (= b's)
    int64_t r2, r3; // broadcast ratios B2/A2, B3/A3
    int64_t n_rtiles, n_ctiles, n_tasks;
};

mm_shape shape_of(const tsr_tensor * dst) {
    const tsr_tensor * a = dst->src[0];
    const tsr_tensor * b = dst->src[1];
    mm_shape s{};
    s.K = a->ne[0];
    s.M = a->ne[1];
    s.N = b->ne[1];
    s.B2 = b->ne[2];
    s.B3 = b->ne[3];
    s.r2 = b->ne[2] / a->ne[2];
    s.r3 = b->ne[3] / a->ne[3];
    s.n_rtiles = (s.M + k_tile_m - 1) / k_tile_m;
    s.n_ctiles = (s.N + k_tile_n - 1) / k_tile_n;
    s.n_tasks = s.B2 * s.B3 * s.n_ctiles * s.n_rtiles;
    return s;
}

// Bytes of one prepared column (Q8_0 or F32) and of one prepared weight row.
size_t column_bytes(const tsr_tensor * node) {
    const int64_t k = node->src[0]->ne[0];
    const int32_t t = node->src[0]->type;
    return is_quant_weight(t) ? q8_row_bytes(t, k) : static_cast<size_t>(k) * sizeof(float);
}

// Per-thread scratch: [column tile][one gathered F32 column][one weight row],
// each 64-byte aligned.
struct mm_scratch {
    char * b_tile;
    float * b_gather;
    char * a_row;
};

mm_scratch carve(const compute_params & p, const tsr_tensor * node) {
    const size_t k_f32 = align64(static_cast<size_t>(node->src[0]->ne[0]) * sizeof(float));
    char * base = static_cast<char *>(p.wdata);
    mm_scratch s{};
    s.b_tile = base;
    base += align64(column_bytes(node) * k_tile_n);
    s.b_gather = reinterpret_cast<float *>(base);
    base += k_f32;
    s.a_row = base;
    return s;
}

// Column n of b's batch (i2, i3) as packed F32: in place when b's layout
// allows, else copied into buf.
const float * column_f32(const tsr_tensor * b, bool in_place, int64_t n, int64_t i2, int64_t i3, float * buf) {
    const char * col = row_ptr(b, n, i2, i3);
    if (in_place) return reinterpret_cast<const float *>(col);
    for (int64_t i = 0; i < b->ne[0]; ++i) buf[i] = read_f32(col + static_cast<size_t>(i) * b->nb[0]);
    return buf;
}

// Weight row m of a's batch (j2, j3) in the kernel's format: packed F32 for
// float types, Q8_0 blocks for block types. In place when possible, else
// converted into buf (exact).
const char * weight_row(const tsr_tensor * a, bool packed, int64_t m, int64_t j2, int64_t j3, char * buf) {
    const char * row = row_ptr(a, m, j2, j3);
    const int64_t k = a->ne[0];
    switch (a->type) {
    case TSR_TYPE_Q8_0:
    case TSR_TYPE_Q4_K:
    case TSR_TYPE_Q5_K:
    case TSR_TYPE_Q6_K: return row;
    case TSR_TYPE_Q5_1: dequantize_row_q5_1(reinterpret_cast<const block_q5_1 *>(row), reinterpret_cast<float *>(buf), k); return buf;
    case TSR_TYPE_Q4_0: q4_0_row_to_q8_0(row, buf, k / k_qk); return buf;
    case TSR_TYPE_Q5_0: q5_0_row_to_q8_0(row, buf, k / k_qk); return buf;
    case TSR_TYPE_F32:
        if (packed) return row;
        break;
    case TSR_TYPE_F16:
        if (packed) {
            f16_row_to_f32(reinterpret_cast<const uint16_t *>(row), reinterpret_cast<float *>(buf), k);
            return buf;
        }
        break;
    case TSR_TYPE_BF16:
        if (packed) {
            bf16_row_to_f32(reinterpret_cast<const uint16_t *>(row), reinterpret_cast<float *>(buf), k);
            return buf;
        }
        break;
    default: break;
    }
    auto * out = reinterpret_cast<float *>(buf);
    for (int64_t i = 0; i < k; ++i) out[i] = load_as_f32(a->type, row + static_cast<size_t>(i) * a->nb[0]);
    return buf;
}

} // namespace

size_t mul_mat_generic_work_size(const tsr_tensor * node) {
    const int64_t k = node->src[0]->ne[0];
    const size_t k_f32 = align64(static_cast<size_t>(k) * sizeof(float));
    const size_t row = std::max(k_f32, align64(q8_row_bytes(TSR_TYPE_Q8_0, k)));
    return align64(column_bytes(node) * k_tile_n) + k_f32 + row;
}

bool compute_mul_mat_generic(const compute_params & p, tsr_tensor * dst) {
    const tsr_tensor * a = dst->src[0];
    const tsr_tensor * b = dst->src[1];
    const mm_shape s = shape_of(dst);
    const mm_scratch sc = carve(p, dst);
    const bool quant = is_quant_weight(a->type);
    const bool q5_1 = a->type == TSR_TYPE_Q5_1; // decoded to F32 rows, dotted as floats
    const size_t esize = quant || q5_1 ? 0 : float_type_size(a->type);
    const bool a_packed = quant || q5_1 || packed_aligned_rows(a, esize, esize);
    const bool b_in_place = packed_aligned_rows(b, sizeof(float), alignof(float));
    const bool k_quant = is_k_quant(a->type);
    const size_t q_bytes = q8_row_bytes(a->type, s.K);
    const int64_t n_blocks = s.K / k_qk;

    const void * cols[k_tile_n];
    int64_t prepared = -1; // (batch, column tile) whose columns are in `cols`
    const item_range tasks = split_items(s.n_tasks, p.ith, p.nth);
    for (int64_t t = tasks.begin; t < tasks.end; ++t) {
        const int64_t rt = t % s.n_rtiles;
        const int64_t bc = t / s.n_rtiles; // batch * n_ctiles + column tile
        const int64_t ct = bc % s.n_ctiles;
        const int64_t batch = bc / s.n_ctiles;
        const int64_t i2 = batch % s.B2;
        const int64_t i3 = batch / s.B2;
        const int64_t n0 = ct * k_tile_n;
        const int64_t n_cols = std::min(k_tile_n, s.N - n0);
        if (bc != prepared) {
            for (int64_t c = 0; c < n_cols; ++c) {
                if (quant) {
                    const float * x = column_f32(b, b_in_place, n0 + c, i2, i3, sc.b_gather);
                    char * q = sc.b_tile + static_cast<size_t>(c) * q_bytes;
                    if (k_quant) {
                        quantize_q8_k_act(x, s.K / 256, reinterpret_cast<block_q8_k *>(q)); // NaN: NaN scale (q8_act.hpp)
                    } else {
                        auto * blocks = reinterpret_cast<block_q8_0 *>(q);
                        quantize_row_q8_0_ref(x, blocks, s.K);
                        for (int64_t bi = 0; bi < s.K / 32; ++bi) { // a NaN value: NaN scale, zero quants, as q8_act.hpp
                            if (std::any_of(x + bi * 32, x + bi * 32 + 32, [](float v) { return std::isnan(v); })) {
                                blocks[bi] = block_q8_0{};
                                blocks[bi].d = f32_to_f16(std::numeric_limits<float>::quiet_NaN());
                            }
                        }
                    }
                    cols[c] = q;
                } else {
                    auto * tile = reinterpret_cast<float *>(sc.b_tile);
                    cols[c] = column_f32(b, b_in_place, n0 + c, i2, i3, tile + c * s.K);
                }
            }
            prepared = bc;
        }
        const int64_t m_end = std::min(s.M, (rt + 1) * k_tile_m);
        for (int64_t m = rt * k_tile_m; m < m_end; ++m) {
            const char * w = weight_row(a, a_packed, m, i2 / s.r2, i3 / s.r3, sc.a_row);
            char * out = row_ptr(dst, n0, i2, i3) + static_cast<size_t>(m) * dst->nb[0];
            for (int64_t c = 0; c < n_cols; ++c) {
                float v;
                if (k_quant) {
                    v = dot_k_quant(a->type, w, static_cast<const block_q8_k *>(cols[c]), s.K / k_qk_k);
                } else if (quant) {
                    v = dot_q8_0(w, static_cast<const char *>(cols[c]), n_blocks);
                } else {
                    v = dot_f32(reinterpret_cast<const float *>(w), static_cast<const float *>(cols[c]), s.K);
                }
                write_f32(out + static_cast<size_t>(c) * dst->nb[1], v);
            }
        }
    }
    return true;
}

} // namespace tessera::cpu

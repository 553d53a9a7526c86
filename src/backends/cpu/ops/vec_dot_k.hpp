// backends/cpu/ops/vec_dot_k.hpp — dot products of K-quant weight rows
// (Q4_K, Q5_K, Q6_K; layouts in core/types.hpp) with activations quantized to
// Q8_K (one F32 scale dx and 256 int8 quants per super-block, block sums
// of 16).
//
// Per super-block the weights' integer structure is kept apart from the
// scales, so the sums are exact in int32:
//   Q4_K: w = (d sc_j) q - (dmin m_j) over sub-blocks j of 32
//         isum = sum_j sc_j * sum_{i in j} q_i x_i
//         msum = sum_j m_j * sum_{i in j} x_i        (from the block sums)
//         acc = fma(d dx, isum, acc); acc = fma(-(dmin dx), msum, acc)
//   Q5_K: the same with the 5-bit quants q = 0..31
//   Q6_K: w = (d sc_j) (q - 32) over sub-blocks j of 16
//         isum = sum_j sc_j * (sum_{i in j} q_i x_i - 32 sum_{i in j} x_i)
//         acc = fma(d dx, isum, acc)
// with acc starting at 0 and the super-blocks taken in order. Every path
// (this scalar code, the AVX2 kernels in mul_mat_k.cpp) computes the same
// integers and the same F32 steps (std::fma), so a product has the same
// bits in every build and however the work is split.
// Bounds: |q x| sums stay below 2^31 (Q4_K: 8 * 63 * 32 * 15 * 127; Q5_K:
// 8 * 63 * 32 * 31 * 127;
// Q6_K: 16 * 128 * 16 * 63 * 127 and the 32 * block-sum term).
// Internal to the CPU kernels; blocks are read through byte pointers
// (rows need no alignment).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "backends/cpu/ops/tensor_access.hpp"
#include "tessera/core/types.hpp"

namespace tessera::cpu {

constexpr int64_t k_qk_k = 256;          // elements per super-block
constexpr size_t k_q4_k_bytes = 144;     // block_q4_k
constexpr size_t k_q5_k_bytes = 176;     // block_q5_k
constexpr size_t k_q6_k_bytes = 210;     // block_q6_k
constexpr size_t k_q8_k_bytes = sizeof(block_q8_k);

// Byte offsets inside the blocks (core/types.hpp).
constexpr size_t k_q4_k_d = 0, k_q4_k_dmin = 2, k_q4_k_scales = 4, k_q4_k_qs = 16;
constexpr size_t k_q5_k_qh = 16, k_q5_k_qs = 48; // d, dmin, scales as in Q4_K
constexpr size_t k_q6_k_ql = 0, k_q6_k_qh = 128, k_q6_k_scales = 192, k_q6_k_d = 208;

inline bool is_k_quant(int32_t t) {
    return t == TSR_TYPE_Q4_K || t == TSR_TYPE_Q5_K || t == TSR_TYPE_Q6_K;
}

// Q4_K and Q5_K: 8 sub-blocks with scales and mins (the same F32 steps).
inline constexpr bool has_k_mins(int32_t t) {
    return t == TSR_TYPE_Q4_K || t == TSR_TYPE_Q5_K;
}

inline constexpr size_t k_block_bytes(int32_t t) {
    return t == TSR_TYPE_Q4_K ? k_q4_k_bytes : t == TSR_TYPE_Q5_K ? k_q5_k_bytes : k_q6_k_bytes;
}

// The eight 6-bit scales (sc) and mins (m) of a Q4_K block, bytes 0..3 of
// each word for sub-blocks 0..3 and 4..7: the bit layout of
// q4_k_scale_min (core/types.hpp) done four bytes at a time.
struct q4_k_scales {
    uint32_t sc_lo, sc_hi, m_lo, m_hi;
};

inline q4_k_scales unpack_q4_k_scales(const char * scales) {
    uint32_t a, b, c;
    std::memcpy(&a, scales, 4);
    std::memcpy(&b, scales + 4, 4);
    std::memcpy(&c, scales + 8, 4);
    q4_k_scales s;
    s.sc_lo = a & 0x3f3f3f3fu;
    s.m_lo = b & 0x3f3f3f3fu;
    s.sc_hi = (c & 0x0f0f0f0fu) | ((a >> 2) & 0x30303030u);
    s.m_hi = ((c >> 4) & 0x0f0f0f0fu) | ((b >> 2) & 0x30303030u);
    return s;
}

// The F32 steps of one super-block (see the top of the file).
inline float q4_k_step(float acc, float d, float dmin, float dx, int32_t isum, int32_t msum) {
    acc = std::fma(d * dx, static_cast<float>(isum), acc);
    return std::fma(-(dmin * dx), static_cast<float>(msum), acc);
}

inline float q6_k_step(float acc, float d, float dx, int32_t isum) {
    return std::fma(d * dx, static_cast<float>(isum), acc);
}

// Scalar integer sums of one super-block: w, x point at a block_q4_k /
// block_q5_k / block_q6_k and a block_q8_k.
template <int32_t T = TSR_TYPE_Q4_K>
inline void q4_k_isums(const char * w, const block_q8_k & x, int32_t & isum, int32_t & msum) {
    constexpr bool five = T == TSR_TYPE_Q5_K;
    const q4_k_scales s = unpack_q4_k_scales(w + k_q4_k_scales);
    const auto * qs = reinterpret_cast<const uint8_t *>(w + (five ? k_q5_k_qs : k_q4_k_qs));
    const auto * qh = reinterpret_cast<const uint8_t *>(w + k_q5_k_qh);
    isum = 0;
    msum = 0;
    for (int j = 0; j < 8; ++j) {
        const uint32_t sw = j < 4 ? s.sc_lo : s.sc_hi, mw = j < 4 ? s.m_lo : s.m_hi;
        const auto sc = static_cast<int32_t>((sw >> (8 * (j % 4))) & 0xff);
        const auto m = static_cast<int32_t>((mw >> (8 * (j % 4))) & 0xff);
        const int shift = 4 * (j % 2);
        int32_t dot = 0;
        for (int l = 0; l < 32; ++l) {
            int q = (qs[32 * (j / 2) + l] >> shift) & 15;
            if constexpr (five) q |= ((qh[l] >> j) & 1) << 4;
            dot += q * x.qs[32 * j + l];
        }
        isum += sc * dot;
        msum += m * (x.bsums[2 * j] + x.bsums[2 * j + 1]);
    }
}

inline int32_t q6_k_isum(const char * w, const block_q8_k & x) {
    const auto * ql = reinterpret_cast<const uint8_t *>(w + k_q6_k_ql);
    const auto * qh = reinterpret_cast<const uint8_t *>(w + k_q6_k_qh);
    const auto * sc = reinterpret_cast<const int8_t *>(w + k_q6_k_scales);
    int32_t isum = 0;
    for (int j = 0; j < 16; ++j) {
        int32_t dot = 0;
        for (int l = 0; l < 16; ++l) {
            const int e = 16 * j + l;
            const int h = e / 128, r = e % 128, quarter = r / 32, i = r % 32;
            const int lo = (ql[64 * h + i + 32 * (quarter % 2)] >> (4 * (quarter / 2))) & 15;
            const int hi = (qh[32 * h + i] >> (2 * quarter)) & 3;
            dot += (lo | (hi << 4)) * x.qs[e];
        }
        isum += sc[j] * (dot - 32 * x.bsums[j]);
    }
    return isum;
}

// Dot product of a K-quant weight row (type t, n_super super-blocks) with a
// Q8_K column, in the order above.
inline float dot_k_quant(int32_t t, const char * w, const block_q8_k * x, int64_t n_super) {
    float acc = 0.0f;
    for (int64_t b = 0; b < n_super; ++b) {
        const char * wb = w + static_cast<size_t>(b) * k_block_bytes(t);
        if (has_k_mins(t)) {
            int32_t isum, msum;
            if (t == TSR_TYPE_Q5_K) {
                q4_k_isums<TSR_TYPE_Q5_K>(wb, x[b], isum, msum);
            } else {
                q4_k_isums(wb, x[b], isum, msum);
            }
            acc = q4_k_step(acc, f16_to_f32_inline(read_u16(wb + k_q4_k_d)), f16_to_f32_inline(read_u16(wb + k_q4_k_dmin)), x[b].d,
                            isum, msum);
        } else {
            acc = q6_k_step(acc, f16_to_f32_inline(read_u16(wb + k_q6_k_d)), x[b].d, q6_k_isum(wb, x[b]));
        }
    }
    return acc;
}

} // namespace tessera::cpu

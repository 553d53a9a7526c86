// backends/cpu/ops/vec_dot.hpp — the dot products behind MUL_MAT, written
// as plain loops the compiler vectorizes for the instruction set the file is
// built for (no intrinsics).
//
// Two kernels, each with a fixed order of operations (the same for any
// caller, so results never depend on how work is split between threads):
//   dot_f32   F32 x F32: element i goes to accumulator lane i % k_lanes
//             (F32 multiply-add), lanes are summed in a fixed pairwise tree.
//             F16/BF16 weight rows are first widened to F32 (exact).
//   dot_q8_0  Q8_0 x Q8_0 (block layouts in core/types.hpp): per block the
//             integer sum of q_w * q_x (exact in int32), scaled by d_w * d_x
//             in F32 and added to accumulator (block % 4); the accumulators
//             are summed as (0 + 1) + (2 + 3). Q4_0 and Q5_0 weight rows
//             are first expanded to Q8_0 (lossless).
#pragma once

#include <cstdint>
#include <cstring>

#include "backends/cpu/ops/tensor_access.hpp"

namespace tessera::cpu {

constexpr int k_lanes = 16;

// Sum of k_lanes values in a fixed pairwise order.
inline float reduce_lanes(const float * acc) {
    float t[k_lanes];
    for (int j = 0; j < k_lanes; ++j) t[j] = acc[j];
    for (int w = k_lanes / 2; w >= 1; w /= 2) {
        for (int j = 0; j < w; ++j) t[j] += t[j + w];
    }
    return t[0];
}

// Sum of w[i] * x[i] for i < k (packed F32 rows).
inline float dot_f32(const float * w, const float * x, int64_t k) {
    float acc[k_lanes] = {};
    int64_t i = 0;
    for (; i + k_lanes <= k; i += k_lanes) {
        for (int j = 0; j < k_lanes; ++j) acc[j] += w[i + j] * x[i + j];
    }
    for (int j = 0; j < k_lanes && i + j < k; ++j) acc[j] += w[i + j] * x[i + j];
    return reduce_lanes(acc);
}

// Row converters to packed F32 (exact).
inline void f16_row_to_f32(const uint16_t * h, float * y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = f16_to_f32_inline(h[i]);
}
inline void bf16_row_to_f32(const uint16_t * h, float * y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32_inline(h[i]);
}

// Q8_0 / Q4_0 blocks read through byte pointers (no alignment needed):
// bytes 0..1 the f16 scale d, then the quants.
constexpr int64_t k_qk = 32;        // elements per block
constexpr size_t k_q8_0_bytes = 34; // f16 d + 32 int8
constexpr size_t k_q4_0_bytes = 18; // f16 d + 16 bytes of nibbles
constexpr size_t k_q5_0_bytes = 22; // f16 d + 4 bytes of fifth bits + 16 bytes of nibbles

inline float block_scale(const char * blk) {
    return f16_to_f32_inline(read_u16(blk));
}

// Sum of 32 int8 products, exact in int32.
inline int32_t block_isum(const char * w_blk, const char * x_blk) {
    const auto * w = reinterpret_cast<const int8_t *>(w_blk + 2);
    const auto * x = reinterpret_cast<const int8_t *>(x_blk + 2);
    int32_t s = 0;
    for (int j = 0; j < k_qk; ++j) s += static_cast<int32_t>(w[j]) * static_cast<int32_t>(x[j]);
    return s;
}

// One block's term: isum * (d_w * d_x) in F32.
inline float block_term(const char * w_blk, const char * x_blk) {
    return static_cast<float>(block_isum(w_blk, x_blk)) * (block_scale(w_blk) * block_scale(x_blk));
}

// Dot product of two Q8_0 rows of n_blocks blocks: block b's term goes to
// accumulator b % 4; result (acc0 + acc1) + (acc2 + acc3).
inline float dot_q8_0(const char * w, const char * x, int64_t n_blocks) {
    float acc0 = 0.0f, acc1 = 0.0f, acc2 = 0.0f, acc3 = 0.0f;
    int64_t b = 0;
    for (; b + 4 <= n_blocks; b += 4) {
        const size_t o = static_cast<size_t>(b) * k_q8_0_bytes;
        acc0 += block_term(w + o, x + o);
        acc1 += block_term(w + o + k_q8_0_bytes, x + o + k_q8_0_bytes);
        acc2 += block_term(w + o + 2 * k_q8_0_bytes, x + o + 2 * k_q8_0_bytes);
        acc3 += block_term(w + o + 3 * k_q8_0_bytes, x + o + 3 * k_q8_0_bytes);
    }
    const size_t o = static_cast<size_t>(b) * k_q8_0_bytes;
    if (b < n_blocks) acc0 += block_term(w + o, x + o);
    if (b + 1 < n_blocks) acc1 += block_term(w + o + k_q8_0_bytes, x + o + k_q8_0_bytes);
    if (b + 2 < n_blocks) acc2 += block_term(w + o + 2 * k_q8_0_bytes, x + o + 2 * k_q8_0_bytes);
    return (acc0 + acc1) + (acc2 + acc3);
}

// One Q4_0 block's quants as int8 (element j: low nibble of byte j minus 8,
// element j + 16: high nibble minus 8), eight bytes at a time in 64-bit
// words (SWAR), which is fast with or without vector units: per byte,
// nibble - 8 = ((nibble | 0x80) - 0x08) ^ 0x80 never borrows across bytes.
inline void q4_0_quants(const char * qs, char * q) {
    constexpr uint64_t lo_mask = 0x0f0f0f0f0f0f0f0full;
    constexpr uint64_t high = 0x8080808080808080ull;
    constexpr uint64_t eight = 0x0808080808080808ull;
    for (int h = 0; h < 2; ++h) {
        uint64_t v;
        std::memcpy(&v, qs + 8 * h, 8);
        const uint64_t lo = (((v & lo_mask) | high) - eight) ^ high;
        const uint64_t hi = ((((v >> 4) & lo_mask) | high) - eight) ^ high;
        std::memcpy(q + 8 * h, &lo, 8);
        std::memcpy(q + k_qk / 2 + 8 * h, &hi, 8);
    }
}

// Expands a Q4_0 row (n_blocks blocks) into Q8_0 blocks with the same scale
// and the quants above: lossless, so dot_q8_0 on the result equals the Q4_0
// dot product. src and dst must not overlap.
inline void q4_0_row_to_q8_0(const char * src, char * dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const char * s = src + static_cast<size_t>(b) * k_q4_0_bytes;
        char * d = dst + static_cast<size_t>(b) * k_q8_0_bytes;
        std::memcpy(d, s, 2);
        q4_0_quants(s + 2, d + 2);
    }
}

// One Q5_0 block's quants (block at blk: d, qh, qs; core/types.hpp) as
// int8 q - 16 in -16..15, element order: the low four bits of element j
// from byte j % 16 of qs (low nibble for j < 16, high nibble above), the
// fifth bit from bit j of qh (little-endian uint32).
inline void q5_0_quants(const char * blk, char * q) {
    const auto * p = reinterpret_cast<const uint8_t *>(blk);
    const uint32_t qh = static_cast<uint32_t>(p[2]) | static_cast<uint32_t>(p[3]) << 8 | static_cast<uint32_t>(p[4]) << 16 |
                        static_cast<uint32_t>(p[5]) << 24;
    for (int j = 0; j < k_qk / 2; ++j) {
        const int lo = (p[6 + j] & 0x0f) | static_cast<int>((qh >> j) & 1) << 4;
        const int hi = (p[6 + j] >> 4) | static_cast<int>((qh >> (j + 16)) & 1) << 4;
        q[j] = static_cast<char>(lo - 16);
        q[j + k_qk / 2] = static_cast<char>(hi - 16);
    }
}

// Expands a Q5_0 row (n_blocks blocks) into Q8_0 blocks with the same scale
// and the quants above: lossless, so dot_q8_0 on the result equals the Q5_0
// dot product. src and dst must not overlap.
inline void q5_0_row_to_q8_0(const char * src, char * dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const char * s = src + static_cast<size_t>(b) * k_q5_0_bytes;
        char * d = dst + static_cast<size_t>(b) * k_q8_0_bytes;
        std::memcpy(d, s, 2);
        q5_0_quants(s, d + 2);
    }
}

} // namespace tessera::cpu

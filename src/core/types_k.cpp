// core/types_k.cpp — the K-quant super-block formats (Q4_K, Q5_K, Q6_K, Q8_K):
// dequantization as the GGUF block layouts define it and this project's
// reference quantizers (types.hpp states what they choose).
//
// Layouts: the ggml_type block definitions of the GGUF format (block_q4_K,
// block_q5_K, block_q6_K, block_q8_K; QK_K = 256), described in types.hpp. Written here
// from that description; compiled for the baseline ISA.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include <fmt/format.h>

#include "tessera/core/error.hpp"
#include "tessera/core/types.hpp"

namespace tessera {

namespace {

void check_super_blocks(const char * what, int64_t n) {
    if (n < 0 || n % qk_k != 0) {
        throw error(fmt::format("{}: n = {} is not a multiple of the super-block size {}", what, n, qk_k));
    }
}

// Nearest integer, halves away from zero, clamped to [lo, hi]; NaN -> 0.
int round_clamp(float v, int lo, int hi) {
    const float r = std::round(v);
    if (!(r >= static_cast<float>(lo))) return r != r ? 0 : lo;
    if (r > static_cast<float>(hi)) return hi;
    return static_cast<int>(r);
}

// Element l of sub-block j of a Q4_K (qh == nullptr) or Q5_K block: the
// nibble, plus the fifth bit from qh.
int k4_quant(const uint8_t * qs, const uint8_t * qh, int j, int l) {
    const int nibble = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 15;
    return qh == nullptr ? nibble : nibble | ((qh[l] >> j) & 1) << 4;
}

// Dequantizes Q4_K or Q5_K super-blocks: per sub-block x = (d sc) q - (dmin m).
template <typename Block>
void dequantize_k4(const Block * x, float * y, int64_t n) {
    for (int64_t b = 0; b < n / qk_k; ++b) {
        const float d = f16_to_f32(x[b].d);
        const float dmin = f16_to_f32(x[b].dmin);
        const uint8_t * qh = nullptr;
        if constexpr (std::is_same_v<Block, block_q5_k>) qh = x[b].qh;
        float * yb = y + b * qk_k;
        for (int j = 0; j < 8; ++j) {
            uint8_t sc, m;
            q4_k_scale_min(x[b].scales, j, sc, m);
            const float d1 = d * static_cast<float>(sc);
            const float m1 = dmin * static_cast<float>(m);
            for (int l = 0; l < 32; ++l) yb[32 * j + l] = d1 * static_cast<float>(k4_quant(x[b].qs, qh, j, l)) - m1;
        }
    }
}

// The reference quantizers of Q4_K (Levels = 15) and Q5_K (31), as
// types.hpp states them.
template <int Levels, typename Block>
void quantize_k4(const float * x, Block * y, int64_t n) {
    constexpr bool five = std::is_same_v<Block, block_q5_k>;
    for (int64_t b = 0; b < n / qk_k; ++b) {
        const float * xb = x + b * qk_k;
        float scale[8], min[8];
        float max_scale = 0.0f, max_min = 0.0f;
        for (int j = 0; j < 8; ++j) {
            float lo = 0.0f, hi = 0.0f;
            for (int l = 0; l < 32; ++l) {
                const float v = xb[32 * j + l];
                if (v < lo) lo = v;
                if (v > hi) hi = v;
            }
            scale[j] = (hi - lo) / static_cast<float>(Levels);
            min[j] = -lo;
            max_scale = std::max(max_scale, scale[j]);
            max_min = std::max(max_min, min[j]);
        }
        Block & out = y[b];
        out.d = f32_to_f16(max_scale / 63.0f);
        out.dmin = f32_to_f16(max_min / 63.0f);
        const float d = f16_to_f32(out.d);
        const float dmin = f16_to_f32(out.dmin);
        uint8_t sc[8], m[8];
        for (int j = 0; j < 8; ++j) {
            sc[j] = static_cast<uint8_t>(d > 0.0f ? round_clamp(scale[j] / d, 0, 63) : 0);
            m[j] = static_cast<uint8_t>(dmin > 0.0f ? round_clamp(min[j] / dmin, 0, 63) : 0);
        }
        // Pack the 6-bit values (the inverse of q4_k_scale_min).
        for (int j = 0; j < 4; ++j) {
            out.scales[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
            out.scales[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
            out.scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
        }
        std::memset(out.qs, 0, sizeof out.qs);
        if constexpr (five) std::memset(out.qh, 0, sizeof out.qh);
        for (int j = 0; j < 8; ++j) {
            const float d1 = d * static_cast<float>(sc[j]);
            const float m1 = dmin * static_cast<float>(m[j]);
            const float id = d1 > 0.0f ? 1.0f / d1 : 0.0f;
            uint8_t * q = out.qs + 32 * (j / 2);
            const int shift = 4 * (j % 2);
            for (int l = 0; l < 32; ++l) {
                const int v = round_clamp((xb[32 * j + l] + m1) * id, 0, Levels);
                q[l] = static_cast<uint8_t>(q[l] | ((v & 15) << shift));
                if constexpr (five) out.qh[l] = static_cast<uint8_t>(out.qh[l] | ((v >> 4) << j));
            }
        }
    }
}

} // namespace

// --- Q4_K, Q5_K ------------------------------------------------------------------

void dequantize_row_q4_k(const block_q4_k * x, float * y, int64_t n) {
    check_super_blocks("dequantize_row_q4_k", n);
    dequantize_k4(x, y, n);
}

void dequantize_row_q5_k(const block_q5_k * x, float * y, int64_t n) {
    check_super_blocks("dequantize_row_q5_k", n);
    dequantize_k4(x, y, n);
}

void quantize_row_q4_k_ref(const float * x, block_q4_k * y, int64_t n) {
    check_super_blocks("quantize_row_q4_k_ref", n);
    quantize_k4<15>(x, y, n);
}

void quantize_row_q5_k_ref(const float * x, block_q5_k * y, int64_t n) {
    check_super_blocks("quantize_row_q5_k_ref", n);
    quantize_k4<31>(x, y, n);
}

// --- Q6_K ------------------------------------------------------------------------

namespace {

// Position of element e (0..255) of a Q6_K block: its low-bits byte in ql,
// the nibble shift there, its qh byte and the 2-bit shift there.
struct q6_pos {
    int ql, ql_shift, qh, qh_shift;
};

q6_pos q6_position(int e) {
    const int h = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
    return q6_pos{64 * h + l + 32 * (quarter % 2), 4 * (quarter / 2), 32 * h + l, 2 * quarter};
}

} // namespace

void dequantize_row_q6_k(const block_q6_k * x, float * y, int64_t n) {
    check_super_blocks("dequantize_row_q6_k", n);
    for (int64_t b = 0; b < n / qk_k; ++b) {
        const float d = f16_to_f32(x[b].d);
        for (int e = 0; e < qk_k; ++e) {
            const q6_pos p = q6_position(e);
            const int q = ((x[b].ql[p.ql] >> p.ql_shift) & 15) | (((x[b].qh[p.qh] >> p.qh_shift) & 3) << 4);
            y[b * qk_k + e] = d * static_cast<float>(x[b].scales[e / 16]) * static_cast<float>(q - 32);
        }
    }
}

void quantize_row_q6_k_ref(const float * x, block_q6_k * y, int64_t n) {
    check_super_blocks("quantize_row_q6_k_ref", n);
    for (int64_t b = 0; b < n / qk_k; ++b) {
        const float * xb = x + b * qk_k;
        float s[16];
        float max_s = 0.0f;
        for (int j = 0; j < 16; ++j) {
            float amax = 0.0f, v = 0.0f; // the value of largest magnitude (first wins ties)
            for (int l = 0; l < 16; ++l) {
                if (std::fabs(xb[16 * j + l]) > amax) {
                    amax = std::fabs(xb[16 * j + l]);
                    v = xb[16 * j + l];
                }
            }
            s[j] = v / -32.0f;
            max_s = std::max(max_s, std::fabs(s[j]));
        }
        block_q6_k & out = y[b];
        out.d = f32_to_f16(max_s / 127.0f);
        const float d = f16_to_f32(out.d);
        std::memset(out.ql, 0, sizeof out.ql);
        std::memset(out.qh, 0, sizeof out.qh);
        for (int j = 0; j < 16; ++j) {
            out.scales[j] = static_cast<int8_t>(d > 0.0f ? round_clamp(s[j] / d, -127, 127) : 0);
        }
        for (int e = 0; e < qk_k; ++e) {
            const float d1 = d * static_cast<float>(out.scales[e / 16]);
            const int q = (d1 != 0.0f ? round_clamp(xb[e] / d1, -32, 31) : 0) + 32;
            const q6_pos p = q6_position(e);
            out.ql[p.ql] = static_cast<uint8_t>(out.ql[p.ql] | ((q & 15) << p.ql_shift));
            out.qh[p.qh] = static_cast<uint8_t>(out.qh[p.qh] | ((q >> 4) << p.qh_shift));
        }
    }
}

// --- Q8_K ------------------------------------------------------------------------

void dequantize_row_q8_k(const block_q8_k * x, float * y, int64_t n) {
    check_super_blocks("dequantize_row_q8_k", n);
    for (int64_t b = 0; b < n / qk_k; ++b) {
        for (int e = 0; e < qk_k; ++e) y[b * qk_k + e] = x[b].d * static_cast<float>(x[b].qs[e]);
    }
}

void quantize_row_q8_k_ref(const float * x, block_q8_k * y, int64_t n) {
    check_super_blocks("quantize_row_q8_k_ref", n);
    for (int64_t b = 0; b < n / qk_k; ++b) {
        const float * xb = x + b * qk_k;
        y[b] = block_q8_k{};
        // The first value of the largest magnitude, with its sign (NaN skipped).
        float amax = 0.0f, max = 0.0f;
        for (int e = 0; e < qk_k; ++e) {
            if (std::fabs(xb[e]) > amax) {
                amax = std::fabs(xb[e]);
                max = xb[e];
            }
        }
        if (amax == 0.0f) continue; // all zero (or NaN): d = 0, quants 0
        const float iscale = -127.0f / max;
        for (int e = 0; e < qk_k; ++e) {
            const float r = std::nearbyint(iscale * xb[e]); // ties to even (default rounding mode)
            y[b].qs[e] = static_cast<int8_t>(r != r ? 0 : std::clamp(r, -127.0f, 127.0f));
        }
        y[b].d = 1.0f / iscale;
        for (int j = 0; j < 16; ++j) {
            int s = 0;
            for (int l = 0; l < 16; ++l) s += y[b].qs[16 * j + l];
            y[b].bsums[j] = static_cast<int16_t>(s);
        }
    }
}

} // namespace tessera

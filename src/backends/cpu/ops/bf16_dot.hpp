// backends/cpu/ops/bf16_dot.hpp — BF16 weights on AVX512-BF16 builds
// (TSR_CPU_BF16DOT, simd.hpp): the operands of vdpbf16ps, shared by the
// GEMM (gemm_f.cpp) and the one-token product (matvec_f.cpp) so that both
// compute a column with the same operations, bit for bit.
//
// vdpbf16ps (Intel SDM, "VDPBF16PS") multiplies pairs of BF16 values and
// adds both products to an F32 lane: by the SDM, lane i of acc gets
// a[2i+1] b[2i+1] added, then a[2i] b[2i], each add rounded to nearest
// even, ignoring MXCSR, with subnormal inputs, accumulator and results
// flushed to zero (other processors may round differently: bits compare
// only within one machine). With the weights already BF16, the
// activations are rounded to BF16 (vcvtne2ps2bf16: to nearest even,
// subnormals to zero), as the reference implementation does for BF16
// weights; the products are then exact in F32 and each K chunk
// (k_gemm_f_kc) is a chain of vdpbf16ps over its pairs (k, k + 1), k even,
// from zero, the chunk sums added in order (matvec_f.cpp's rows path: 16
// lanes of pairs, summed as its F32 lanes). A pair is one 32-bit word:
// element k in the low half, k + 1 in the high half (0 past K), the order
// both operands share. Weights read along m (matvec_f.cpp's strips, the
// transposed views of a KV cache) keep F32 activations.
//
// Included by gemm_f.cpp and matvec_f.cpp only; everything is in an
// unnamed namespace (internal linkage, one copy per instruction-set
// variant, as the kernels that use it). Internal to the CPU kernels.
#pragma once

#include <algorithm>
#include <cstdint>

#include "backends/cpu/ops/simd.hpp"

#ifdef TSR_CPU_BF16DOT

namespace tessera::cpu::bf16_dot {

namespace {

// Pairs of a packed F32 vector x[0 .. K): out[q] = (bf16(x[2q]),
// bf16(x[2q + 1])) for q < (K + 1) / 2, x[K] taken as 0 for odd K. 32
// elements per vcvtne2ps2bf16 (the tail through masked loads, so every
// value is rounded by the same instruction).
inline void to_pairs(const float * x, int64_t K, uint32_t * out) {
    for (int64_t k = 0; k < K; k += 32) {
        const int64_t n = std::min<int64_t>(32, K - k);
        const auto m_lo = static_cast<__mmask16>(n >= 16 ? 0xffff : (1u << n) - 1);
        const auto m_hi = static_cast<__mmask16>(n >= 32 ? 0xffff : n <= 16 ? 0 : (1u << (n - 16)) - 1);
        const __m512 lo = _mm512_maskz_loadu_ps(m_lo, x + k);
        const __m512 hi = _mm512_maskz_loadu_ps(m_hi, x + k + 16);
        const __m512i p = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)); // lo's 16 values first
        const int64_t pairs = (n + 1) / 2;
        _mm512_mask_storeu_epi32(out + k / 2, static_cast<__mmask16>(pairs >= 16 ? 0xffff : (1u << pairs) - 1), p);
    }
}

// 16 pairs, one per row, from two consecutive k steps of a repacked float
// group (repack.hpp: [k][16] BF16 per group): `steps` holds step k (rows
// 0..15) then, when `both`, step k + 1; without it the high halves are 0
// (odd K). Lane r = (row r's k, row r's k + 1).
inline __m512i group_pairs(const char * steps, bool both) {
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21,
                                         5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i v = both ? _mm512_loadu_si512(steps)
                           : _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(steps)));
    return _mm512_permutexvar_epi16(idx, v);
}

// acc + the pair products of w and x (vdpbf16ps).
inline __m512 dot(__m512 acc, __m512i w, __m512i x) {
    return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(w), reinterpret_cast<__m512bh>(x));
}

} // namespace

} // namespace tessera::cpu::bf16_dot

#endif // TSR_CPU_BF16DOT

// backends/cpu/ops/vec_math.hpp — vector versions of the elementary
// functions the element-wise kernels need (AVX2 + FMA builds only; see
// simd.hpp). Internal to the CPU kernels.
#pragma once

#include "backends/cpu/ops/simd.hpp"

namespace tessera::cpu::simd {

// The larger of a running maximum m and x, where a NaN (in either) wins and
// then stays: a soft-max maximum that skipped NaN would turn a NaN row into
// a finite or all-masked one (flash_attn.cpp, soft_max.cpp). Any build.
inline float max_keep_nan(float m, float x) {
    return x > m || x != x ? x : m;
}

#ifdef TSR_CPU_AVX2

// e^x for 8 lanes. Cody & Waite range reduction (x = n ln2 + r,
// |r| <= ln2 / 2, ln2 split in a high part whose products with n are exact
// and a low part), e^r by its Taylor polynomial of degree 7 (truncation
// error below 0.35^8 / 8! = 6e-9, under half an ulp) in Horner form with
// FMA, then scaled by 2^n as 2^n1 * 2^n2 (n1 = floor(n / 2), n2 = n - n1,
// each a normal power of two, so subnormal results come out of one
// correctly rounded multiply). Relative error within 2 ulp for normal
// results. Special cases: x > 88.72284 (overflow) -> +inf; x < -103.9721
// (below half the smallest subnormal) -> 0; -inf -> 0; NaN -> NaN.
inline __m256 exp8(__m256 x) {
    const __m256 hi = _mm256_set1_ps(88.72284f);
    const __m256 lo = _mm256_set1_ps(-103.9721f);
    const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc); // ln2 high part (9 bits)
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);    // ln2 - high part
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    // n in -150..128: n1 and n2 in -75..64, valid exponents of normal floats.
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1);
    const __m256i n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    y = _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_inff()), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
    y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q)); // NaN stays NaN
}

#ifdef TSR_CPU_AVX512
// exp8 on 16 lanes: each lane goes through exactly exp8's operations, so
// the results are the same bits (only twice as many per instruction).
inline __m512 exp16(__m512 x) {
    const __m512 hi = _mm512_set1_ps(88.72284f);
    const __m512 lo = _mm512_set1_ps(-103.9721f);
    const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    const __m512i ni = _mm512_cvtps_epi32(n);
    const __m512i n1 = _mm512_srai_epi32(ni, 1);
    const __m512i n2 = _mm512_sub_epi32(ni, n1);
    const __m512i bias = _mm512_set1_epi32(127);
    const __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
    const __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
    __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
    y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), y, _mm512_set1_ps(__builtin_inff()));
    y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), y, _mm512_setzero_ps());
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, x); // NaN stays NaN
}
#endif // TSR_CPU_AVX512

#endif // TSR_CPU_AVX2

} // namespace tessera::cpu::simd

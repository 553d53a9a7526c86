// backends/cpu/ops/simd.hpp — which vector instruction sets this copy of
// the kernels is compiled for, and small helpers shared by the SIMD kernels.
//
// The CPU kernels are compiled once per variant plugin with that variant's
// -m flags (cpu.cmake), so the choice is made at compile time from the
// compiler's predefined macros:
//   TSR_CPU_AVX2       AVX2 + FMA + F16C (variant haswell and above): the
//                      256-bit kernels
//   TSR_CPU_AVX512     AVX-512 F/BW/DQ/VL on top (skylakex and above): the
//                      512-bit GEMM micro-kernels
//   TSR_CPU_VNNI256    vpdpbusd on 256-bit vectors: AVX-VNNI (alderlake) or
//                      AVX512-VNNI + VL (icelake, zen4, sapphirerapids)
//   TSR_CPU_VNNI512    vpdpbusd on 512-bit vectors (AVX512-VNNI)
//   TSR_CPU_BF16DOT    vdpbf16ps (AVX512-BF16: zen4, sapphirerapids): BF16
//                      weights times activations rounded to BF16
//                      (bf16_dot.hpp)
//   TSR_CPU_AMX        AMX tiles with int8 products (AMX-TILE + AMX-INT8 on
//                      top of AVX512-VNNI: sapphirerapids): the repacked
//                      Q8_0/Q4_0/Q5_0/Q5_1 GEMM (mul_mat_repack.cpp), used
//                      only where Linux grants the tile state at run time
//   TSR_CPU_AMX_BF16   AMX-BF16 on top (TDPBF16PS): the GEMM of repacked
//                      F16 weights (gemm_f_amx.cpp), under the same grant
// Without TSR_CPU_AVX2 the portable kernels are used.
//
// Nothing here has static storage or runs at load time. Internal to the
// CPU kernels (only ops/*.cpp include it; see features.hpp on why baseline
// code must not share inline code with the kernels).
#pragma once

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define TSR_CPU_AVX2 1
#include <immintrin.h>
#endif

#if defined(TSR_CPU_AVX2) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && \
    defined(__AVX512VL__)
#define TSR_CPU_AVX512 1
#endif

#if defined(TSR_CPU_AVX2) && defined(__GNUC__) && !defined(__clang__)
// GCC 12 reports the deliberately undefined vectors inside its own
// intrinsic headers (_mm512_undefined_*, _mm256_undefined_*) as
// "used uninitialized" once they are inlined; false positives for every
// file that includes this header.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#if defined(TSR_CPU_AVX512) && defined(__AVX512VNNI__)
#define TSR_CPU_VNNI512 1
#define TSR_CPU_VNNI256 1
#elif defined(TSR_CPU_AVX2) && defined(__AVXVNNI__)
#define TSR_CPU_VNNI256 1
#endif

#if defined(TSR_CPU_AVX512) && defined(__AVX512BF16__)
#define TSR_CPU_BF16DOT 1
#endif

#if defined(TSR_CPU_VNNI512) && defined(__AMX_TILE__) && defined(__AMX_INT8__) && defined(__linux__)
#define TSR_CPU_AMX 1
#endif

#if defined(TSR_CPU_AMX) && defined(TSR_CPU_BF16DOT) && defined(__AMX_BF16__)
#define TSR_CPU_AMX_BF16 1
#endif

#include <cstdint>
#include <cstring>

namespace tessera::cpu::simd {

#ifdef TSR_CPU_AVX2

// Sum of the 8 lanes of v in the fixed pairwise order of reduce_lanes
// (vec_dot.hpp) applied to lanes 0..7: (upper half + lower half), then
// pairs, then the last two.
inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// Sum of 16 lanes held as lo (lanes 0..7) and hi (lanes 8..15), in the
// order of reduce_lanes: lane j + lane j+8 first, then hsum8.
inline float hsum16(__m256 lo, __m256 hi) {
    return hsum8(_mm256_add_ps(lo, hi));
}

// Sum of the 8 int32 lanes of v (exact, wrapping as int32 does).
inline int32_t hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

// Sum of the 8 int32 lanes of each of v0..v3 (exact): lane r of the result
// is the total of v_r.
inline __m128i hsum4x8_epi32(__m256i v0, __m256i v1, __m256i v2, __m256i v3) {
    const __m256i h01 = _mm256_hadd_epi32(v0, v1);
    const __m256i h23 = _mm256_hadd_epi32(v2, v3);
    const __m256i h = _mm256_hadd_epi32(h01, h23);
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// 8 F16 values at p (unaligned) as 8 F32 (exact).
inline __m256 load_f16x8(const void * p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i *>(p)));
}

// 8 BF16 values at p (unaligned) as 8 F32 (exact: bfloat16 is the upper
// half of a binary32).
inline __m256 load_bf16x8(const void * p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(static_cast<const __m128i *>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

// The 32 4-bit quants of a Q4_0 block (16 bytes at p) as bytes 0..15 in
// block order: byte j = low nibble of p[j] (element j), byte 16 + j = high
// nibble of p[j] (element 16 + j).
inline __m256i q4_nibbles(const void * p) {
    const __m128i q = _mm_loadu_si128(static_cast<const __m128i *>(p));
    const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

// Byte j (0..31) = 0x10 when bit j of qh is set, else 0: the fifth bits of
// a Q5_0 block (qh read as a little-endian uint32) in element order.
inline __m256i q5_high_bits(uint32_t qh) {
    // Byte j takes byte j / 8 of qh (the shuffle works per 128-bit half; each
    // half holds all four bytes), then is tested against bit j % 8.
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int32_t>(qh)),
                                               _mm256_setr_epi64x(0, 0x0101010101010101ll, 0x0202020202020202ll,
                                                                  0x0303030303030303ll));
    const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
}

// 0x10 in byte l where bit j (0..7) of byte l of qh is set: the fifth bits
// of sub-block j of a Q5_K block (qh[l] bit j belongs to element l of
// sub-block j; core/types.hpp). 16-bit shifts by at most 4 keep every
// byte's bit 4 within its byte.
inline __m256i q5_k_fifth(__m256i qh, int j) {
    const __m256i v = j <= 4 ? _mm256_sll_epi16(qh, _mm_cvtsi32_si128(4 - j)) : _mm256_srl_epi16(qh, _mm_cvtsi32_si128(j - 4));
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

// The 32 5-bit quants q (0..31) of the Q5_0 block at blk (f16 d, 4 bytes
// qh, 16 bytes qs; core/types.hpp) as bytes in block order.
inline __m256i q5_quants(const void * blk) {
    const auto * p = static_cast<const char *>(blk);
    uint32_t qh;
    std::memcpy(&qh, p + 2, sizeof qh); // little-endian, as the format stores it
    return _mm256_or_si256(q4_nibbles(p + 6), q5_high_bits(qh));
}

// Transposes the 8x8 matrix of 32-bit elements held in r[0..7] (r[i] = row
// i) in place: afterwards r[j] holds column j.
inline void transpose8x8(__m256 * r) {
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
    const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
    const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
    const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
    r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// Sums of groups of 4 products u[i] * s[i] (u unsigned, s signed bytes)
// added to acc: int32 lane l gets u[4l..4l+3] . s[4l..4l+3]. Exact when
// every pair sum u[2i]s[2i] + u[2i+1]s[2i+1] fits int16 (vpmaddubsw
// saturates), which holds for u <= 128 and |s| <= 127 and for u <= 15; the
// VNNI instruction has no such limit.
inline __m256i dot4_u8s8(__m256i acc, __m256i u, __m256i s) {
#if defined(TSR_CPU_VNNI512)
    return _mm256_dpbusd_epi32(acc, u, s);
#elif defined(TSR_CPU_VNNI256)
    return _mm256_dpbusd_avx_epi32(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

#endif // TSR_CPU_AVX2

#ifdef TSR_CPU_AVX512

// Sum of 16 lanes in the order of reduce_lanes (lane j + lane j+8 first).
inline float hsum16(__m512 v) {
    return hsum8(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

inline __m512i dot4_u8s8(__m512i acc, __m512i u, __m512i s) {
#if defined(TSR_CPU_VNNI512)
    return _mm512_dpbusd_epi32(acc, u, s);
#else
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
#endif
}

// acc + the byte products of u (unsigned) with the four signed bytes at x4
// repeated in every 32-bit lane. With VNNI one vpdpbusd with an
// embedded-broadcast memory operand, written out: GCC does not fold the
// broadcast into the instruction by itself, and the extra instruction per
// product costs front-end bandwidth in the quantized micro-kernels.
inline __m512i dot4_u8s8_bcast(__m512i acc, __m512i u, const char * x4) {
#if defined(TSR_CPU_VNNI512)
    __asm__("vpdpbusd %[x]%{1to16%}, %[u], %[acc]" : [acc] "+v"(acc) : [u] "v"(u), [x] "m"(*reinterpret_cast<const int32_t *>(x4)));
    return acc;
#else
    int32_t q;
    std::memcpy(&q, x4, sizeof q);
    return dot4_u8s8(acc, u, _mm512_set1_epi32(q));
#endif
}

#endif // TSR_CPU_AVX512

} // namespace tessera::cpu::simd

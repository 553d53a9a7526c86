// backends/cpu/ops/k_lanes.hpp — vector operations on the k_lanes int32 /
// F32 lanes of the widest vector this build has (AVX-512: 16 lanes of
// __m512i / __m512, AVX2: 8 of __m256i / __m256), one lane per weight row:
// the K-quant kernels that keep rows side by side (gemm_k.cpp's panels,
// mul_mat_k_repack.cpp's interleaved groups) are written once against
// these. Only in builds with AVX2 (TSR_CPU_AVX2). Internal to the CPU
// kernels.
#pragma once

#include <cstdint>
#include <cstring>

#include "backends/cpu/ops/repack.hpp"
#include "backends/cpu/ops/simd.hpp"
#include "backends/cpu/ops/vec_dot_k.hpp"
#include "tessera/core/types.hpp"

namespace tessera::cpu {

#ifdef TSR_CPU_AVX2

// The 4 bytes at p as one int32 (any alignment).
inline int32_t quad(const char * p) {
    int32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// The int16 pair (a, b) as one int32 word (a in the low half), the
// operand layout of vpmaddwd.
inline int32_t pair16(int a, int b) {
    return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint16_t>(a)) | (static_cast<uint32_t>(static_cast<uint16_t>(b)) << 16));
}

// The eight int32 words of int16 pairs of a Q8_K block's sums that the
// K-quant block-sum terms multiply (vpmaddwd) for weights of type t: Q4_K
// and Q5_K (bsum32_2i, bsum32_2i+1) in words 0..3, words 4..7 zero (bsum32_j: the
// sum of sub-block j's 32 quants, |.| <= 32 * 127); Q6_K (bsum_2i,
// bsum_2i+1), i = 0..7 (its sub-blocks of 16).
inline void q8_k_pair_words(int32_t t, const block_q8_k & x, int32_t * words) {
    const int16_t * bs = x.bsums;
    for (int i = 0; i < 8; ++i) {
        if (has_k_mins(t)) {
            words[i] = i < 4 ? pair16(bs[4 * i] + bs[4 * i + 1], bs[4 * i + 2] + bs[4 * i + 3]) : 0;
        } else {
            words[i] = pair16(bs[2 * i], bs[2 * i + 1]);
        }
    }
}

#ifdef TSR_CPU_AVX512
struct lanes {
    static constexpr int n = 16;
    using vi = __m512i;
    using vf = __m512;
    static vi zero() { return _mm512_setzero_si512(); }
    static vi load(const void * p) { return _mm512_load_si512(p); } // 64-byte aligned
    static vi loadu(const void * p) { return _mm512_loadu_si512(p); }
    static vf loadf(const void * p) { return _mm512_load_ps(p); }
    static vf load_f16(const void * p) { return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i *>(p))); }
    static vi u8_to_i32(const void * p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128(static_cast<const __m128i *>(p))); }
    static vi i8_to_i32(const void * p) { return _mm512_cvtepi8_epi32(_mm_loadu_si128(static_cast<const __m128i *>(p))); }
    static vi bcast(int32_t v) { return _mm512_set1_epi32(v); }
    static vi bcast8(char v) { return _mm512_set1_epi8(v); }
    static vf bcastf(float v) { return _mm512_set1_ps(v); }
    static vi and_(vi a, vi b) { return _mm512_and_si512(a, b); }
    static vi or_(vi a, vi b) { return _mm512_or_si512(a, b); }
    static vi srli16(vi a, int k) { return _mm512_srli_epi16(a, static_cast<unsigned>(k)); }
    static vi slli16(vi a, int k) { return _mm512_slli_epi16(a, static_cast<unsigned>(k)); }
    static vi slli32(vi a, int k) { return _mm512_slli_epi32(a, static_cast<unsigned>(k)); }
    static vi add(vi a, vi b) { return _mm512_add_epi32(a, b); }
    static vi add16(vi a, vi b) { return _mm512_add_epi16(a, b); }
    static vi sub(vi a, vi b) { return _mm512_sub_epi32(a, b); }
    static vi shl5(vi a) { return _mm512_slli_epi32(a, 5); }
    static vi mullo(vi a, vi b) { return _mm512_mullo_epi32(a, b); }
    static vi madd16(vi a, vi b) { return _mm512_madd_epi16(a, b); }
    static vi maddubs(vi u, vi s) { return _mm512_maddubs_epi16(u, s); }
    static vi dot4_bcast(vi acc, vi u, const char * x4) { return simd::dot4_u8s8_bcast(acc, u, x4); }
    static vf cvt(vi a) { return _mm512_cvtepi32_ps(a); }
    static vf mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
    static vf neg(vf a) { return _mm512_xor_ps(a, _mm512_set1_ps(-0.0f)); }
    static vf fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
    static vf zerof() { return _mm512_setzero_ps(); }
    static void storef(float * p, vf v) { _mm512_store_ps(p, v); } // 64-byte aligned
    static void storeuf(float * p, vf v) { _mm512_storeu_ps(p, v); }
    static void storeu(void * p, vi v) { _mm512_storeu_si512(p, v); }
};
#else
struct lanes {
    static constexpr int n = 8;
    using vi = __m256i;
    using vf = __m256;
    static vi zero() { return _mm256_setzero_si256(); }
    static vi load(const void * p) { return _mm256_load_si256(static_cast<const __m256i *>(p)); } // 32-byte aligned
    static vi loadu(const void * p) { return _mm256_loadu_si256(static_cast<const __m256i *>(p)); }
    static vf loadf(const void * p) { return _mm256_load_ps(static_cast<const float *>(p)); }
    static vf load_f16(const void * p) { return simd::load_f16x8(p); }
    static vi u8_to_i32(const void * p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64(static_cast<const __m128i *>(p))); }
    static vi i8_to_i32(const void * p) { return _mm256_cvtepi8_epi32(_mm_loadl_epi64(static_cast<const __m128i *>(p))); }
    static vi bcast(int32_t v) { return _mm256_set1_epi32(v); }
    static vi bcast8(char v) { return _mm256_set1_epi8(v); }
    static vf bcastf(float v) { return _mm256_set1_ps(v); }
    static vi and_(vi a, vi b) { return _mm256_and_si256(a, b); }
    static vi or_(vi a, vi b) { return _mm256_or_si256(a, b); }
    static vi srli16(vi a, int k) { return _mm256_srli_epi16(a, k); }
    static vi slli16(vi a, int k) { return _mm256_slli_epi16(a, k); }
    static vi slli32(vi a, int k) { return _mm256_slli_epi32(a, k); }
    static vi add(vi a, vi b) { return _mm256_add_epi32(a, b); }
    static vi add16(vi a, vi b) { return _mm256_add_epi16(a, b); }
    static vi sub(vi a, vi b) { return _mm256_sub_epi32(a, b); }
    static vi shl5(vi a) { return _mm256_slli_epi32(a, 5); }
    static vi mullo(vi a, vi b) { return _mm256_mullo_epi32(a, b); }
    static vi madd16(vi a, vi b) { return _mm256_madd_epi16(a, b); }
    static vi maddubs(vi u, vi s) { return _mm256_maddubs_epi16(u, s); }
    static vi dot4_bcast(vi acc, vi u, const char * x4) { return simd::dot4_u8s8(acc, u, _mm256_set1_epi32(quad(x4))); }
    static vf cvt(vi a) { return _mm256_cvtepi32_ps(a); }
    static vf mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
    static vf neg(vf a) { return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); }
    static vf fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
    static vf zerof() { return _mm256_setzero_ps(); }
    static void storef(float * p, vf v) { _mm256_store_ps(p, v); } // 32-byte aligned
    static void storeuf(float * p, vf v) { _mm256_storeu_ps(p, v); }
    static void storeu(void * p, vi v) { _mm256_storeu_si256(static_cast<__m256i *>(p), v); }
};
#endif

// The units of super-block b of a repacked Q6_K group of lanes::n rows
// (repack.hpp: the body in first-read order, d after it in even and
// before it in odd super-blocks): the address of each unit's G copies.
struct q6_k_group_block {
    static constexpr size_t G = lanes::n;
    const char * blk;  // the group's super-block b
    const char * body; // its ql/qh/scale units
    bool odd;
    q6_k_group_block(const char * group, int64_t b)
        : blk(group + static_cast<size_t>(b) * 210 * G), body(blk + (b % 2 != 0 ? 2 * G : 0)), odd(b % 2 != 0) {}
    // ql step j = 0..31 (bytes 4j..4j+3 of each row's ql)
    const char * ql(int j) const { return body + G * q6_k_ql_pos(static_cast<size_t>(j)); }
    // qh step i = 0..15
    const char * qh(int i) const { return body + G * q6_k_qh_pos(static_cast<size_t>(i)); }
    // scale k = 0..15 (one byte per row)
    const char * scale(int k) const { return body + G * q6_k_scale_pos(static_cast<size_t>(k)); }
    // the rows' F16 d
    const char * d() const { return odd ? blk : blk + 208 * G; }
};

// Bit `bit` (0..7) of every byte of v moved to bit 4, the rest zero: the
// Q5_K fifth bits of one nibble half of a repacked step (repack.hpp: qh[l]
// bit j is the fifth bit of element l of sub-block j). 16-bit shifts by
// at most 4 keep every byte's bit 4 within its byte.
inline lanes::vi q5_k_fifth_lanes(lanes::vi v, int bit) {
    const lanes::vi m = bit <= 4 ? lanes::slli16(v, 4 - bit) : lanes::srli16(v, bit - 4);
    return lanes::and_(m, lanes::bcast8(0x10));
}

#endif // TSR_CPU_AVX2

} // namespace tessera::cpu

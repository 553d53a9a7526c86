// backends/cpu/ops/q8_act.cpp — see q8_act.hpp (Q8_0 and Q8_K activations).
//
// Rounding: quantize_row_q8_0_ref uses std::round (half away from zero);
// quantize_row_q8_k_ref ties to even (_mm256_round_ps here). The vector
// path computes the former as trunc(v + copysign(0.5 - 2^-25, v)):
// for |v| < 2^22 the sum rounds to the next integer exactly when the
// fraction of |v| is >= 1/2 (the largest float below 1/2 keeps 0.49999997
// below 1, and a fraction of exactly 1/2 reaches the integer through the
// ties-to-even rounding of the addition), so both agree; here |v| <= 127.
#include "backends/cpu/ops/q8_act.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/ops/simd.hpp"
#include "backends/cpu/ops/tensor_access.hpp"
#include "tessera/core/types.hpp"

namespace tessera::cpu {

namespace {

constexpr int k_block = 32;

size_t part(size_t n) {
    return align64(n);
}

// One block the way the reference does it, except that a NaN value makes
// the scale NaN (see q8_act.hpp).
[[maybe_unused]] void quantize_block_scalar(const float * x, int8_t * q, float * d_out, int32_t * sum_out) {
    float amax = 0.0f;
    bool nan = false;
    for (int j = 0; j < k_block; ++j) {
        amax = std::fmax(amax, std::fabs(x[j]));
        nan = nan || std::isnan(x[j]);
    }
    const float d = nan ? std::numeric_limits<float>::quiet_NaN() : amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    *d_out = f16_to_f32_inline(f32_to_f16(d));
    int32_t s = 0;
    for (int j = 0; j < k_block; ++j) {
        const float v = std::round(x[j] * id);
        int qv = 0;
        if (v >= -127.0f && v <= 127.0f) {
            qv = static_cast<int>(v);
        } else if (v > 0.0f) {
            qv = 127;
        } else if (v < 0.0f) {
            qv = -127;
        }
        q[j] = static_cast<int8_t>(qv);
        s += qv;
    }
    *sum_out = s;
}

#ifdef TSR_CPU_AVX2

// v rounded (Even: ties to even, as quantize_row_q8_k_ref; else half away
// from zero, |v| < 2^22, as quantize_row_q8_0_ref), NaN -> 0, clamped to
// [-127, 127], as int32.
template <bool Even>
inline __m256i round_clamp(__m256 v) {
    __m256 r;
    if constexpr (Even) {
        r = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else {
        const __m256 sign = _mm256_and_ps(v, _mm256_set1_ps(-0.0f));
        const __m256 half = _mm256_or_ps(sign, _mm256_set1_ps(0.49999997f));
        r = _mm256_round_ps(_mm256_add_ps(v, half), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    }
    r = _mm256_and_ps(r, _mm256_cmp_ps(v, v, _CMP_ORD_Q)); // NaN -> 0
    r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
    return _mm256_cvttps_epi32(r);
}

// The largest |x| of n vectors of 8 at x (n a multiple of 4); NaN if one
// of them is NaN. Four chains of vmaxps (one was bound by its latency).
inline float amax_avx2(const float * x, int n) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 mc[4], nc[4];
    for (int c = 0; c < 4; ++c) mc[c] = nc[c] = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 4) {
        for (int c = 0; c < 4; ++c) {
            const __m256 v = _mm256_loadu_ps(x + 8 * (i + c));
            mc[c] = _mm256_max_ps(_mm256_and_ps(v, abs_mask), mc[c]);
            nc[c] = _mm256_or_ps(nc[c], _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        }
    }
    const __m256 m = _mm256_max_ps(_mm256_max_ps(mc[0], mc[1]), _mm256_max_ps(mc[2], mc[3]));
    const __m256 nan = _mm256_or_ps(_mm256_or_ps(nc[0], nc[1]), _mm256_or_ps(nc[2], nc[3]));
    if (_mm256_movemask_ps(nan) != 0) return std::numeric_limits<float>::quiet_NaN();
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    return _mm_cvtss_f32(m4);
}

// Quantizes the 32 values at x (times id, rounded as round_clamp<Even>)
// into q; i32 gets the four int32 vectors of quants (elements 8i .. 8i +
// 7), for the block sums.
template <bool Even>
inline void quantize_32(const float * x, __m256 vid, int8_t * q, __m256i * i32) {
    for (int i = 0; i < 4; ++i) i32[i] = round_clamp<Even>(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * i), vid));
    // int32 -> int8 (values fit, no saturation), back in element order.
    const __m256i w01 = _mm256_packs_epi32(i32[0], i32[1]);
    const __m256i w23 = _mm256_packs_epi32(i32[2], i32[3]);
    __m256i b = _mm256_packs_epi16(w01, w23);
    b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(q), b);
}

// A NaN value gives d = id = NaN: NaN scale, zero quants (round_clamp).
void quantize_block_avx2(const float * x, int8_t * q, float * d_out, int32_t * sum_out) {
    const float d = amax_avx2(x, 4) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    *d_out = _cvtsh_ss(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT));
    __m256i i32[4];
    quantize_32<false>(x, _mm256_set1_ps(id), q, i32);
    *sum_out = simd::hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(i32[0], i32[1]), _mm256_add_epi32(i32[2], i32[3])));
}

// One Q8_K super-block: the same choice of scale and rounding as
// quantize_row_q8_k_ref, except for a NaN value (NaN scale, zero quants).
void quantize_super_block_avx2(const float * x, block_q8_k & y) {
    const float amax = amax_avx2(x, 32);
    if (amax == 0.0f || std::isnan(amax)) {
        y = block_q8_k{};
        if (std::isnan(amax)) y.d = amax;
        return;
    }
    // The first value of that magnitude, sign kept.
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)), va = _mm256_set1_ps(amax);
    int first = 0;
    for (int i = 0; i < 32; ++i) {
        const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + 8 * i), abs_mask), va, _CMP_EQ_OQ));
        if (hit != 0) {
            first = 8 * i + __builtin_ctz(static_cast<unsigned>(hit));
            break;
        }
    }
    const float iscale = -127.0f / x[first];
    y.d = 1.0f / iscale;
    const __m256 vid = _mm256_set1_ps(iscale);
    // Block sums by vpsadbw of the quants biased to unsigned (q + 128): 4
    // sums of 8 per 32 quants (each < 2^11), OR'ed into 16-bit field g % 4
    // of acc[g / 4], instead of 16 horizontal additions of int32 vectors.
    const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
    __m256i acc[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int g = 0; g < 8; ++g) { // 32 elements
        __m256i i32[4];
        quantize_32<true>(x + 32 * g, vid, y.qs + 32 * g, i32);
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(y.qs + 32 * g));
        const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(q, bias), _mm256_setzero_si256());
        acc[g / 4] = _mm256_or_si256(acc[g / 4], _mm256_slli_epi64(sad, 16 * (g % 4)));
    }
    for (int h = 0; h < 2; ++h) {
        // Qword 0 (2): values 0..15 (16..31) of each group of 32, after
        // adding the two sums of 8; interleaved, bsums 8h .. 8h + 7.
        const __m256i t = _mm256_add_epi16(acc[h], _mm256_shuffle_epi32(acc[h], 0x4E));
        const __m128i b = _mm_unpacklo_epi16(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
        _mm_storeu_si128(reinterpret_cast<__m128i *>(y.bsums + 8 * h), _mm_sub_epi16(b, _mm_set1_epi16(2048)));
    }
}

#endif

#ifdef TSR_CPU_AVX512

// quantize_block_avx2 on two 512-bit vectors, for a block whose values
// and 1 / d are finite (false otherwise, nothing written): then |x * id|
// <= 127 (1 + 2^-22), so trunc(v + copysign(0.49999997, v)) lies in
// [-127, 127] and neither round_clamp's clamp nor its NaN test can change
// a quant, and the truncating conversion does the rounding's truncation.
// The same arithmetic, so the same bits; one block in about half the
// instructions (no 256-bit halves, no clamp, one-instruction narrowing):
// BM_quantize_q8_act (Zen 5) 2.29 -> 3.95 G values/s, synth 135M Q4_0
// pp512 1.01-1.05x (the two quantizers alternated in one process).
inline bool quantize_block_avx512(const float * x, int8_t * q, float * d_out, int32_t * sum_out) {
    const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
    const __m512 a0 = _mm512_abs_ps(x0), a1 = _mm512_abs_ps(x1);
    const __m512 inf = _mm512_set1_ps(std::numeric_limits<float>::infinity());
    // Not less than infinity, or unordered: an infinity or a NaN.
    if ((_mm512_cmp_ps_mask(a0, inf, _CMP_NLT_UQ) | _mm512_cmp_ps_mask(a1, inf, _CMP_NLT_UQ)) != 0) return false;
    const float d = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1)) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    if (!(id < std::numeric_limits<float>::infinity())) return false; // d subnormal
    *d_out = _cvtsh_ss(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT));
    const __m512 vid = _mm512_set1_ps(id);
    const __m512i half = _mm512_castps_si512(_mm512_set1_ps(0.49999997f));
    const __m512i sign = _mm512_set1_epi32(INT32_MIN);
    __m512i i32[2];
    const __m512 xs[2] = {x0, x1};
    for (int i = 0; i < 2; ++i) {
        const __m512 v = _mm512_mul_ps(xs[i], vid);
        // (v & sign) | half: copysign(0.49999997, v) in one instruction.
        const __m512 h = _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_castps_si512(v), sign, half, 0xEA));
        i32[i] = _mm512_cvttps_epi32(_mm512_add_ps(v, h));
        _mm_storeu_si128(reinterpret_cast<__m128i *>(q + 16 * i), _mm512_cvtsepi32_epi8(i32[i]));
    }
    *sum_out = _mm512_reduce_add_epi32(_mm512_add_epi32(i32[0], i32[1]));
    return true;
}

#endif

#ifdef TSR_CPU_AVX512

// One Q8_K super-block on 512-bit vectors, where its largest magnitude a
// is finite and non-zero and -127 / x[first] is finite (false otherwise,
// nothing written; quantize_super_block_avx2 then handles it). The same
// scale and the same ties-to-even rounding as quantize_super_block_avx2,
// so the same bits, in about a quarter of the instructions:
// - the magnitudes are compared as integers (|x|'s bits order as |x|
//   does, and an infinity or a NaN compares above every finite value), in
//   four chains where amax_avx2 has one of vmaxps latency per 8 values;
// - |x * iscale| <= 127 (1 + 2^-22) < 127.5, so the rounding conversion
//   needs no clamp (round_clamp's clamp and NaN test cannot change a
//   quant here);
// - the block sums come from vpsadbw on the quants biased to unsigned
//   (q + 128: each 8-byte sum is sum q + 1024) instead of 16 horizontal
//   additions of int32 vectors.
// BM_quantize_q8_k_act: see the stop 47 note.
inline bool quantize_super_block_avx512(const float * x, block_q8_k & y) {
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
    __m512i m[4];
    for (int c = 0; c < 4; ++c) m[c] = _mm512_and_si512(_mm512_loadu_si512(x + 16 * c), abs_mask);
    for (int i = 4; i < 16; i += 4) {
        for (int c = 0; c < 4; ++c) m[c] = _mm512_max_epu32(m[c], _mm512_and_si512(_mm512_loadu_si512(x + 16 * (i + c)), abs_mask));
    }
    const uint32_t amax_bits = _mm512_reduce_max_epu32(_mm512_max_epu32(_mm512_max_epu32(m[0], m[1]), _mm512_max_epu32(m[2], m[3])));
    if (amax_bits == 0 || amax_bits >= 0x7f800000u) return false; // zero, or an infinity or a NaN
    // The first value of that magnitude, sign kept.
    const __m512i va = _mm512_set1_epi32(static_cast<int32_t>(amax_bits));
    int first = 0;
    for (int i = 0; i < 16; ++i) {
        const __mmask16 hit = _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_loadu_si512(x + 16 * i), abs_mask), va);
        if (hit != 0) {
            first = 16 * i + __builtin_ctz(static_cast<unsigned>(hit));
            break;
        }
    }
    const float iscale = -127.0f / x[first];
    if (!(std::fabs(iscale) < std::numeric_limits<float>::infinity())) return false; // x[first] too small
    y.d = 1.0f / iscale;
    const __m512 vid = _mm512_set1_ps(iscale);
    // Dword j of a 64-byte vector packed from four int32 vectors a..d (lane
    // l of the packs holds a[4l..4l+3], b[..], c[..], d[..]) back in element
    // order: dword 4k + l comes from dword 4l + k.
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
    __m512i sums = _mm512_setzero_si512();
    for (int g = 0; g < 4; ++g) { // 64 values, bsums 4g .. 4g + 3
        __m512i i32[4];
        for (int c = 0; c < 4; ++c) {
            const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + 64 * g + 16 * c), vid);
            i32[c] = _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        }
        const __m512i q = _mm512_permutexvar_epi32(
            order, _mm512_packs_epi16(_mm512_packs_epi32(i32[0], i32[1]), _mm512_packs_epi32(i32[2], i32[3])));
        _mm512_storeu_si512(y.qs + 64 * g, q);
        // 8 sums of 8 biased quants (each < 2^11), into 16-bit field g.
        const __m512i s = _mm512_sad_epu8(_mm512_xor_si512(q, bias), _mm512_setzero_si512());
        sums = _mm512_or_si512(sums, _mm512_slli_epi64(s, static_cast<unsigned>(16 * g)));
    }
    // Qword 2l + h, field g: the sum of values 64 g + 16 l + 8 h .. + 7.
    // Add the two halves of each 16 (fields stay < 2^12), pick field g of
    // qword 2l (word 8 l + g) for bsum 4 g + l, unbias.
    sums = _mm512_add_epi16(sums, _mm512_shuffle_epi32(sums, _MM_PERM_BADC));
    alignas(64) static constexpr int16_t pick_words[32] = {0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27};
    const __m512i pick = _mm512_load_si512(pick_words);
    const __m256i b = _mm256_sub_epi16(_mm512_castsi512_si256(_mm512_permutexvar_epi16(pick, sums)), _mm256_set1_epi16(2048));
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(y.bsums), b);
    return true;
}

#endif

} // namespace

size_t q8_col_bytes(int64_t n_blocks) {
    const auto nb = static_cast<size_t>(n_blocks);
    return part(nb * k_block) + part(nb * sizeof(float)) + part(nb * sizeof(int32_t));
}

q8_col q8_col_at(void * base, int64_t n_blocks) {
    const auto nb = static_cast<size_t>(n_blocks);
    char * p = static_cast<char *>(base);
    q8_col c{};
    c.qs = reinterpret_cast<int8_t *>(p);
    p += part(nb * k_block);
    c.d = reinterpret_cast<float *>(p);
    p += part(nb * sizeof(float));
    c.sum = reinterpret_cast<int32_t *>(p);
    c.qs_stride = k_block;
    c.aux_stride = sizeof(float);
    return c;
}

void quantize_q8_act(const float * x, int64_t n_blocks, const q8_col & col, int sum_shift) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        int32_t sum = 0;
#if defined(TSR_CPU_AVX512)
        if (!quantize_block_avx512(x + b * k_block, col.qs_of(b), col.d_of(b), &sum)) {
            quantize_block_avx2(x + b * k_block, col.qs_of(b), col.d_of(b), &sum);
        }
#elif defined(TSR_CPU_AVX2)
        quantize_block_avx2(x + b * k_block, col.qs_of(b), col.d_of(b), &sum);
#else
        quantize_block_scalar(x + b * k_block, col.qs_of(b), col.d_of(b), &sum);
#endif
        *col.sum_of(b) = sum * (1 << sum_shift);
    }
}

void quantize_q8_k_act(const float * x, int64_t n_super, block_q8_k * y) {
#if defined(TSR_CPU_AVX512)
    for (int64_t b = 0; b < n_super; ++b) {
        if (!quantize_super_block_avx512(x + b * 256, y[b])) quantize_super_block_avx2(x + b * 256, y[b]);
    }
#elif defined(TSR_CPU_AVX2)
    for (int64_t b = 0; b < n_super; ++b) quantize_super_block_avx2(x + b * 256, y[b]);
#else
    quantize_row_q8_k_ref(x, y, n_super * 256);
    for (int64_t b = 0; b < n_super; ++b) { // a NaN value: NaN scale, zero quants (q8_act.hpp)
        if (std::any_of(x + b * 256, x + (b + 1) * 256, [](float v) { return std::isnan(v); })) {
            y[b] = block_q8_k{};
            y[b].d = std::numeric_limits<float>::quiet_NaN();
        }
    }
#endif
}

} // namespace tessera::cpu

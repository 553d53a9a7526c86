// backends/cpu/ops/mul_mat_k.cpp — MUL_MAT with Q4_K / Q5_K / Q6_K weights
// (row-contiguous) and N < k_gemm_min_n columns, the token-generation case
// (more columns: gemm_k.cpp): the columns are quantized to Q8_K
// (q8_act.hpp), then the weights stream once, row by row; each super-block
// is unpacked in registers and multiplied with the N columns (vpmaddubsw:
// the unsigned quants 0..15 / 0..31 / 0..63 times the int8 activations,
// Q5_K's fifth bits shifted from qh into bit 4 of each byte; pair sums
// in int16; vpmaddwd by the sub-block scales, broadcast by vpshufb, into
// int32). The integer sums and the F32 steps are those of vec_dot_k.hpp,
// so a product has the same bits as the portable kernel's and the GEMM's,
// on any number of threads.
#include <algorithm>

#include "backends/cpu/ops/mul_mat_impl.hpp"
#include "backends/cpu/ops/simd.hpp"
#include "backends/cpu/ops/vec_dot_k.hpp"

namespace tessera::cpu {

#ifdef TSR_CPU_AVX2

namespace {

constexpr int k_cols = static_cast<int>(k_gemm_min_n) - 1; // columns of this path (N < k_gemm_min_n)
constexpr int64_t k_rows = 16;                               // rows per work item
constexpr size_t k_prefetch = 4096;                          // bytes ahead in the weight row

inline int32_t hsum_i32(__m256i v) {
    return simd::hsum_epi32(v);
}

inline __m256i load256(const void * p) {
    return _mm256_loadu_si256(static_cast<const __m256i *>(p));
}

// int16 [sc0..sc7 | m0..m7] of a Q4_K block.
inline __m256i q4_k_scales_mins16(const char * w) {
    const q4_k_scales s = unpack_q4_k_scales(w + k_q4_k_scales);
    return _mm256_cvtepu8_epi16(_mm_setr_epi32(static_cast<int>(s.sc_lo), static_cast<int>(s.sc_hi), static_cast<int>(s.m_lo),
                                               static_cast<int>(s.m_hi)));
}

// msum of a column (vec_dot_k.hpp): sum_j m_j (bsum[2j] + bsum[2j + 1]),
// m16 the int16 mins; the pair sums (|.| <= 32 * 127) fit int16.
inline int32_t q4_k_msum(const block_q8_k & x, __m128i m16) {
    const auto * bs = reinterpret_cast<const __m128i *>(x.bsums);
    const __m128i pairs = _mm_hadd_epi16(_mm_loadu_si128(bs), _mm_loadu_si128(bs + 1));
    __m128i t = _mm_madd_epi16(pairs, m16);
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
    return _mm_cvtsi128_si32(t);
}

// q4_k_block: the sums of C columns of one Q4_K (or Q5_K) super-block w, isum[c]
// and msum[c] as in vec_dot_k.hpp; q6_k_block: isum[c] of a Q6_K one.
#ifdef TSR_CPU_AVX512

// AVX-512 versions: two pairs of Q4_K sub-blocks, or two quarters of a
// Q6_K half, per 512-bit vector. They read the activation quants of each
// 128 elements of a Q4_K column in the order [0..31, 64..95, 32..63,
// 96..127] (permute_q4_k_act), so that the low nibbles of 64 weight bytes
// meet 64 consecutive activation bytes.
constexpr bool k_permuted_q4_act = true;

inline int32_t hsum_i32(__m512i v) {
    return hsum_i32(_mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)));
}

// Q5_K fifth bits of sub-blocks j0 (bytes 0..31) and j1 (bytes 32..63):
// qh (broadcast to both halves) with bit j of each byte moved to bit 4
// (16-bit shifts by at most 4 keep every byte's bit 4 within its byte).
inline __m512i q5_k_fifth(__m512i qh, int j0, int j1) {
    const __m512i l = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(std::max(0, 4 - j0))),
                                         _mm256_set1_epi16(static_cast<short>(std::max(0, 4 - j1))), 1);
    const __m512i r = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(std::max(0, j0 - 4))),
                                         _mm256_set1_epi16(static_cast<short>(std::max(0, j1 - 4))), 1);
    return _mm512_and_si512(_mm512_srlv_epi16(_mm512_sllv_epi16(qh, l), r), _mm512_set1_epi8(0x10));
}

template <int32_t T, int C>
inline void q4_k_block(const char * w, const block_q8_k * const * x, int64_t b, int32_t * isum, int32_t * msum) {
    constexpr bool five = T == TSR_TYPE_Q5_K;
    const __m256i sm16 = q4_k_scales_mins16(w);
    const __m512i sc4 = _mm512_broadcast_i32x4(_mm256_castsi256_si128(sm16)); // sc0..7 in every 128-bit lane
    const __m128i m16 = _mm256_extracti128_si256(sm16, 1);
    __m512i acc[C];
    for (int c = 0; c < C; ++c) {
        msum[c] = q4_k_msum(x[c][b], m16);
        acc[c] = _mm512_setzero_si512();
    }
    const __m512i nib = _mm512_set1_epi8(0x0f);
    const char * qs = w + (five ? k_q5_k_qs : k_q4_k_qs);
    __m512i qh = _mm512_setzero_si512();
    if constexpr (five) qh = _mm512_broadcast_i64x4(load256(w + k_q5_k_qh));
#pragma GCC unroll 2
    for (int p = 0; p < 2; ++p) {
        // Bytes 0..31: sub-blocks 4p (low nibbles) and 4p + 1 (high);
        // bytes 32..63: sub-blocks 4p + 2 and 4p + 3.
        const __m512i q = _mm512_loadu_si512(qs + 64 * p);
        __m512i lo = _mm512_and_si512(q, nib);
        __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), nib);
        if constexpr (five) {
            lo = _mm512_or_si512(lo, q5_k_fifth(qh, 4 * p, 4 * p + 2));
            hi = _mm512_or_si512(hi, q5_k_fifth(qh, 4 * p + 1, 4 * p + 3));
        }
        auto sel = [](int j0, int j1) {
            const __m256i a = _mm256_set1_epi16(static_cast<short>(0x0100 + 0x0202 * j0));
            const __m256i b = _mm256_set1_epi16(static_cast<short>(0x0100 + 0x0202 * j1));
            return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
        };
        const __m512i s_lo = _mm512_shuffle_epi8(sc4, sel(4 * p, 4 * p + 2));
        const __m512i s_hi = _mm512_shuffle_epi8(sc4, sel(4 * p + 1, 4 * p + 3));
        for (int c = 0; c < C; ++c) {
            const int8_t * xq = x[c][b].qs + 128 * p; // permuted: lo's 64 quants, then hi's
            const __m512i a = _mm512_madd_epi16(_mm512_maddubs_epi16(lo, _mm512_loadu_si512(xq)), s_lo);
            const __m512i h = _mm512_madd_epi16(_mm512_maddubs_epi16(hi, _mm512_loadu_si512(xq + 64)), s_hi);
            acc[c] = _mm512_add_epi32(acc[c], _mm512_add_epi32(a, h));
        }
    }
    for (int c = 0; c < C; ++c) isum[c] = hsum_i32(acc[c]);
}

template <int C>
inline void q6_k_block(const char * w, const block_q8_k * const * x, int64_t b, int32_t * isum) {
    const auto * sc = reinterpret_cast<const int8_t *>(w + k_q6_k_scales);
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(sc)));
    // sc_8h..sc_8h+7 in every 128-bit lane
    const __m512i sc_half[2] = {_mm512_broadcast_i32x4(_mm256_castsi256_si128(sc16)), _mm512_broadcast_i32x4(_mm256_extracti128_si256(sc16, 1))};
    __m512i acc[C];
    for (int c = 0; c < C; ++c) {
        const __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(load256(x[c][b].bsums), sc16), 5);
        acc[c] = _mm512_castsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), off));
        acc[c] = _mm512_inserti64x4(acc[c], _mm256_setzero_si256(), 1);
    }
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i m2 = _mm512_set1_epi8(0x30);
    // Per-lane shifts: quarters 0 | 1 take qh bits 0-1 | 2-3 to bits 4-5
    // (left 4 | 2); quarters 2 | 3 bits 4-5 | 6-7 (right 0 | 2).
    const __m512i shl = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i shr = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    auto sel = [](int j) { // 128-bit lane k selects int16 j + k
        return _mm512_setr_epi32(0x01000100 + 0x02020202 * j, 0x01000100 + 0x02020202 * j, 0x01000100 + 0x02020202 * j,
                                 0x01000100 + 0x02020202 * j, 0x01000100 + 0x02020202 * (j + 1), 0x01000100 + 0x02020202 * (j + 1),
                                 0x01000100 + 0x02020202 * (j + 1), 0x01000100 + 0x02020202 * (j + 1), 0x01000100 + 0x02020202 * (j + 2),
                                 0x01000100 + 0x02020202 * (j + 2), 0x01000100 + 0x02020202 * (j + 2), 0x01000100 + 0x02020202 * (j + 2),
                                 0x01000100 + 0x02020202 * (j + 3), 0x01000100 + 0x02020202 * (j + 3), 0x01000100 + 0x02020202 * (j + 3),
                                 0x01000100 + 0x02020202 * (j + 3));
    };
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
        const __m512i ql = _mm512_loadu_si512(w + k_q6_k_ql + 64 * h);
        const __m512i qh = _mm512_broadcast_i64x4(load256(w + k_q6_k_qh + 32 * h));
        // Elements 128h + 0..63 (quarters 0, 1) and 128h + 64..127 (quarters 2, 3).
        const __m512i qa = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_sllv_epi16(qh, shl), m2));
        const __m512i qc = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), _mm512_and_si512(_mm512_srlv_epi16(qh, shr), m2));
        const __m512i s_a = _mm512_shuffle_epi8(sc_half[h], sel(0));
        const __m512i s_c = _mm512_shuffle_epi8(sc_half[h], sel(4));
        for (int c = 0; c < C; ++c) {
            const int8_t * xq = x[c][b].qs + 128 * h;
            const __m512i a = _mm512_madd_epi16(_mm512_maddubs_epi16(qa, _mm512_loadu_si512(xq)), s_a);
            const __m512i cc = _mm512_madd_epi16(_mm512_maddubs_epi16(qc, _mm512_loadu_si512(xq + 64)), s_c);
            acc[c] = _mm512_add_epi32(acc[c], _mm512_add_epi32(a, cc));
        }
    }
    for (int c = 0; c < C; ++c) isum[c] = hsum_i32(acc[c]);
}

#else

constexpr bool k_permuted_q4_act = false;

template <int32_t T, int C>
inline void q4_k_block(const char * w, const block_q8_k * const * x, int64_t b, int32_t * isum, int32_t * msum) {
    constexpr bool five = T == TSR_TYPE_Q5_K;
    // The scales in both 128-bit lanes, from which one vpshufb per
    // sub-block broadcasts sc_j.
    const __m256i sm16 = q4_k_scales_mins16(w);
    const __m256i sc2 = _mm256_permute4x64_epi64(sm16, 0x44);
    const __m128i m16 = _mm256_extracti128_si256(sm16, 1);
    __m256i acc[C];
    for (int c = 0; c < C; ++c) {
        msum[c] = q4_k_msum(x[c][b], m16);
        acc[c] = _mm256_setzero_si256();
    }
    const __m256i nib = _mm256_set1_epi8(0x0f);
    const char * qs = w + (five ? k_q5_k_qs : k_q4_k_qs);
    __m256i qh = _mm256_setzero_si256();
    if constexpr (five) qh = load256(w + k_q5_k_qh);
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
        const __m256i q = load256(qs + 32 * p);
        __m256i lo = _mm256_and_si256(q, nib);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), nib);
        if constexpr (five) {
            lo = _mm256_or_si256(lo, simd::q5_k_fifth(qh, 2 * p));
            hi = _mm256_or_si256(hi, simd::q5_k_fifth(qh, 2 * p + 1));
        }
        // int16 lane bytes (2j, 2j + 1) of sc2: sc_j in every lane
        const __m256i s_lo = _mm256_shuffle_epi8(sc2, _mm256_set1_epi16(static_cast<short>(0x0100 + 0x0202 * (2 * p))));
        const __m256i s_hi = _mm256_shuffle_epi8(sc2, _mm256_set1_epi16(static_cast<short>(0x0100 + 0x0202 * (2 * p + 1))));
        for (int c = 0; c < C; ++c) {
            const int8_t * xq = x[c][b].qs + 64 * p;
            const __m256i a = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load256(xq)), s_lo);
            const __m256i h = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load256(xq + 32)), s_hi);
            acc[c] = _mm256_add_epi32(acc[c], _mm256_add_epi32(a, h));
        }
    }
    for (int c = 0; c < C; ++c) isum[c] = hsum_i32(acc[c]);
}

// Sums of C columns of one Q6_K super-block w (vec_dot_k.hpp).
template <int C>
inline void q6_k_block(const char * w, const block_q8_k * const * x, int64_t b, int32_t * isum) {
    const auto * sc = reinterpret_cast<const int8_t *>(w + k_q6_k_scales);
    // int16 [sc0..sc15]; the halves sc0..7 and sc8..15 each in both 128-bit
    // lanes, from which one vpshufb gives [sc_j x 8 | sc_j+1 x 8].
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(sc)));
    const __m256i sc_half[2] = {_mm256_permute4x64_epi64(sc16, 0x44), _mm256_permute4x64_epi64(sc16, 0xee)};
    __m256i acc[C];
    for (int c = 0; c < C; ++c) {
        // minus the offset term 32 sum_j sc_j bsum_j, in the same int32 lanes
        acc[c] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(load256(x[c][b].bsums), sc16), 5));
    }
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i m2 = _mm256_set1_epi8(0x30);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
        const __m256i ql0 = load256(w + k_q6_k_ql + 64 * h);
        const __m256i ql1 = load256(w + k_q6_k_ql + 64 * h + 32);
        const __m256i qh = load256(w + k_q6_k_qh + 32 * h);
        // The four quarters of the half (elements 32 i .. 32 i + 31), quants 0..63.
        __m256i q[4];
        q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2));
        q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2));
        q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m2));
        q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2));
        for (int i = 0; i < 4; ++i) {
            // int16 lanes 0..7 are sub-block 8h + 2i, lanes 8..15 sub-block 8h + 2i + 1.
            const __m256i sel = _mm256_setr_m128i(_mm_set1_epi16(static_cast<short>(0x0100 + 0x0202 * (2 * i))),
                                                  _mm_set1_epi16(static_cast<short>(0x0100 + 0x0202 * (2 * i + 1))));
            const __m256i s = _mm256_shuffle_epi8(sc_half[h], sel);
            for (int c = 0; c < C; ++c) {
                const __m256i p = _mm256_maddubs_epi16(q[i], load256(x[c][b].qs + 128 * h + 32 * i));
                acc[c] = _mm256_add_epi32(acc[c], _mm256_madd_epi16(p, s));
            }
        }
    }
    for (int c = 0; c < C; ++c) isum[c] = hsum_i32(acc[c]);
}

#endif // TSR_CPU_AVX512

// The activation order the AVX-512 Q4_K kernel reads: in each 128
// quants, bytes 32..63 and 64..95 swapped (the block sums keep the
// element order).
void permute_q4_k_act(block_q8_k * y, int64_t n_super) {
    for (int64_t b = 0; b < n_super; ++b) {
        for (int g = 0; g < 2; ++g) {
            int8_t tmp[32];
            int8_t * q = y[b].qs + 128 * g;
            std::memcpy(tmp, q + 32, 32);
            std::memcpy(q + 32, q + 64, 32);
            std::memcpy(q + 64, tmp, 32);
        }
    }
}

// out[c] = row w . column c for C columns (n_super super-blocks).
template <int32_t T, int C>
void row_dot(const char * w, const block_q8_k * const * x, int64_t n_super, float * out) {
    float acc[C];
    for (int c = 0; c < C; ++c) acc[c] = 0.0f;
    for (int64_t b = 0; b < n_super; ++b) {
        const char * wb = w + static_cast<size_t>(b) * k_block_bytes(T);
        _mm_prefetch(wb + k_prefetch, _MM_HINT_T0);
        _mm_prefetch(wb + k_prefetch + 64, _MM_HINT_T0);
        _mm_prefetch(wb + k_prefetch + 128, _MM_HINT_T0);
        int32_t isum[C];
        if constexpr (has_k_mins(T)) {
            int32_t msum[C];
            q4_k_block<T, C>(wb, x, b, isum, msum);
            const float d = _cvtsh_ss(read_u16(wb + k_q4_k_d)), dmin = _cvtsh_ss(read_u16(wb + k_q4_k_dmin));
            for (int c = 0; c < C; ++c) acc[c] = q4_k_step(acc[c], d, dmin, x[c][b].d, isum[c], msum[c]);
        } else {
            q6_k_block<C>(wb, x, b, isum);
            const float d = _cvtsh_ss(read_u16(wb + k_q6_k_d));
            for (int c = 0; c < C; ++c) acc[c] = q6_k_step(acc[c], d, x[c][b].d, isum[c]);
        }
    }
    for (int c = 0; c < C; ++c) out[c] = acc[c];
}

template <int32_t T, int C = k_cols>
void row_dot_n(int cols, const char * w, const block_q8_k * const * x, int64_t n_super, float * out) {
    if constexpr (C > 1) {
        if (cols < C) return row_dot_n<T, C - 1>(cols, w, x, n_super, out);
    }
    row_dot<T, C>(w, x, n_super, out);
}

size_t col_bytes(int64_t n_super) {
    return align64(static_cast<size_t>(n_super) * k_q8_k_bytes);
}

template <int32_t T>
void run(const compute_params & p, const mm_dims & d) {
    const int64_t n_super = d.K / k_qk_k;
    const size_t cbytes = col_bytes(n_super);
    char * cols = static_cast<char *>(p.wdata);                      // k_cols quantized columns
    auto * xbuf = reinterpret_cast<float *>(cols + k_cols * cbytes); // one gathered column
    const bool in_place = b_in_place(d);
    const int64_t n_groups = (d.M + k_rows - 1) / k_rows;
    const int64_t n_items = d.n_batch * n_groups;
    work_queue queue(p, n_items, chunk_for_bytes(k_rows * static_cast<size_t>(d.a->nb[1]), n_items, p.nth));
    int64_t have_batch = -1;
    const block_q8_k * x[k_cols];
    for (int64_t n = 0; n < k_cols; ++n) x[n] = reinterpret_cast<const block_q8_k *>(cols + static_cast<size_t>(n) * cbytes);
    const int nc = static_cast<int>(d.N);
    for (item_range items{}; queue.next(items);) {
        for (int64_t it = items.begin; it < items.end; ++it) {
            const int64_t batch = it / n_groups;
            const int64_t m0 = (it % n_groups) * k_rows, m1 = std::min(d.M, m0 + k_rows);
            if (batch != have_batch) {
                for (int64_t n = 0; n < d.N; ++n) {
                    auto * q = reinterpret_cast<block_q8_k *>(cols + static_cast<size_t>(n) * cbytes);
                    quantize_q8_k_act(b_column(d, in_place, batch, n, xbuf), n_super, q);
                    if (has_k_mins(T) && k_permuted_q4_act) permute_q4_k_act(q, n_super);
                }
                have_batch = batch;
            }
            const char * a = a_matrix(d, batch);
            float * y[k_cols];
            for (int c = 0; c < nc; ++c) y[c] = dst_column(d, batch, c);
            for (int64_t m = m0; m < m1; ++m) {
                float out[k_cols];
                row_dot_n<T>(nc, a + static_cast<size_t>(m) * d.a->nb[1], x, n_super, out);
                for (int c = 0; c < nc; ++c) y[c][m] = out[c];
            }
        }
    }
}

} // namespace

size_t mul_mat_k_work_size(const mm_dims & d) {
    return k_cols * col_bytes(d.K / k_qk_k) + align64(static_cast<size_t>(d.K) * sizeof(float));
}

bool mul_mat_k(const compute_params & p, const mm_dims & d) {
    if (d.N > k_cols) return false; // the GEMM path (gemm_k.cpp) takes these
    switch (d.a->type) {
    case TSR_TYPE_Q4_K: run<TSR_TYPE_Q4_K>(p, d); return true;
    case TSR_TYPE_Q5_K: run<TSR_TYPE_Q5_K>(p, d); return true;
    case TSR_TYPE_Q6_K: run<TSR_TYPE_Q6_K>(p, d); return true;
    default: return false;
    }
}

#else // portable build: the generic kernel is used instead

size_t mul_mat_k_work_size(const mm_dims &) { return 0; }
bool mul_mat_k(const compute_params &, const mm_dims &) { return false; }

#endif

} // namespace tessera::cpu

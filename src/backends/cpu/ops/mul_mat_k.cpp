// backends/cpu/ops/mul_mat_k.cpp — MUL_MAT with Q4_K / Q6_K weights
// (row-contiguous), any number of columns: the columns are quantized to
// Q8_K (q8_act.hpp), then each weight super-block is unpacked once into
// registers and multiplied with up to k_cols columns (vpmaddubsw: the
// unsigned quants 0..15 / 0..63 times the int8 activations, pair sums in
// int16; vpmaddwd by the sub-block scales into int32). The integer sums and
// the F32 steps are those of vec_dot_k.hpp, so a product has the same bits
// as the portable kernel's, alone or in a batch, on any number of threads.
//
// One token (N < k_cols) streams every weight row once; a prompt walks the
// columns k_cols at a time over a block of rows that stays in L2 (the
// quantized columns of the tile stay in L1).
#include <algorithm>

#include "backends/cpu/ops/mul_mat_impl.hpp"
#include "backends/cpu/ops/simd.hpp"
#include "backends/cpu/ops/vec_dot_k.hpp"

namespace tessera::cpu {

#ifdef TSR_CPU_AVX2

namespace {

constexpr int k_cols = 4;          // columns per pass over a super-block
constexpr int64_t k_rows_max = 64; // rows per work item (a prompt's weights reused from L2)
constexpr int64_t k_cols_max = 64; // columns per work item
constexpr size_t k_prefetch = 1024; // bytes ahead in the weight row

inline int32_t hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

inline __m256i load256(const void * p) {
    return _mm256_loadu_si256(static_cast<const __m256i *>(p));
}

// Sums of C columns of one Q4_K super-block w: isum[c], msum[c] as in
// vec_dot_k.hpp.
template <int C>
inline void q4_k_block(const char * w, const block_q8_k * const * x, int64_t b, int32_t * isum, int32_t * msum) {
    const q4_k_scales s = unpack_q4_k_scales(w + k_q4_k_scales);
    alignas(16) uint32_t words[4] = {s.sc_lo, s.sc_hi, s.m_lo, s.m_hi};
    const auto * sc = reinterpret_cast<const uint8_t *>(words);
    // Mins: sum_j m_j (bsum[2j] + bsum[2j + 1]); the pair sums (|.| <= 32 * 127) fit int16.
    const __m128i m16 = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(words + 2)));
    __m256i acc[C];
    for (int c = 0; c < C; ++c) {
        const auto * bs = reinterpret_cast<const __m128i *>(x[c][b].bsums);
        const __m128i pairs = _mm_hadd_epi16(_mm_loadu_si128(bs), _mm_loadu_si128(bs + 1));
        __m128i t = _mm_madd_epi16(pairs, m16);
        t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
        t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
        msum[c] = _mm_cvtsi128_si32(t);
        acc[c] = _mm256_setzero_si256();
    }
    const __m256i nib = _mm256_set1_epi8(0x0f);
    const char * qs = w + k_q4_k_qs;
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
        const __m256i q = load256(qs + 32 * p);
        const __m256i lo = _mm256_and_si256(q, nib);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), nib);
        const __m256i s_lo = _mm256_set1_epi16(sc[2 * p]);
        const __m256i s_hi = _mm256_set1_epi16(sc[2 * p + 1]);
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
    // The offset term: 32 sum_j sc_j bsum_j.
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(sc)));
    __m256i acc[C], off[C];
    for (int c = 0; c < C; ++c) {
        off[c] = _mm256_madd_epi16(load256(x[c][b].bsums), sc16);
        acc[c] = _mm256_setzero_si256();
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
            const __m256i s = _mm256_setr_m128i(_mm_set1_epi16(sc[8 * h + 2 * i]), _mm_set1_epi16(sc[8 * h + 2 * i + 1]));
            for (int c = 0; c < C; ++c) {
                const __m256i p = _mm256_maddubs_epi16(q[i], load256(x[c][b].qs + 128 * h + 32 * i));
                acc[c] = _mm256_add_epi32(acc[c], _mm256_madd_epi16(p, s));
            }
        }
    }
    for (int c = 0; c < C; ++c) isum[c] = hsum_i32(acc[c]) - 32 * hsum_i32(off[c]);
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
        if constexpr (T == TSR_TYPE_Q4_K) {
            int32_t msum[C];
            q4_k_block<C>(wb, x, b, isum, msum);
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
    char * cols = static_cast<char *>(p.wdata);                         // k_cols_max quantized columns
    auto * xbuf = reinterpret_cast<float *>(cols + k_cols_max * cbytes); // one gathered column
    const bool in_place = b_in_place(d);
    const mm_grid g = make_mm_grid(d, p.nth, 4, k_rows_max, k_cols, k_cols_max);
    work_queue queue(p, g.n_items, 1);
    int64_t have_cols = -1; // (batch, column block) quantized in cols
    for (item_range items{}; queue.next(items);) {
        for (int64_t it = items.begin; it < items.end; ++it) {
            const mm_item item = item_of(g, d, it);
            if (item.bc != have_cols) {
                for (int64_t n = item.n0; n < item.n1; ++n) {
                    quantize_q8_k_act(b_column(d, in_place, item.batch, n, xbuf), n_super,
                                      reinterpret_cast<block_q8_k *>(cols + static_cast<size_t>(n - item.n0) * cbytes));
                }
                have_cols = item.bc;
            }
            const char * a = a_matrix(d, item.batch);
            for (int64_t n = item.n0; n < item.n1; n += k_cols) {
                const int nc = static_cast<int>(std::min<int64_t>(k_cols, item.n1 - n));
                const block_q8_k * x[k_cols];
                float * y[k_cols];
                for (int c = 0; c < nc; ++c) {
                    x[c] = reinterpret_cast<const block_q8_k *>(cols + static_cast<size_t>(n - item.n0 + c) * cbytes);
                    y[c] = dst_column(d, item.batch, n + c);
                }
                for (int64_t m = item.m0; m < item.m1; ++m) {
                    float out[k_cols];
                    row_dot_n<T>(nc, a + static_cast<size_t>(m) * d.a->nb[1], x, n_super, out);
                    for (int c = 0; c < nc; ++c) y[c][m] = out[c];
                }
            }
        }
    }
}

} // namespace

size_t mul_mat_k_work_size(const mm_dims & d) {
    return k_cols_max * col_bytes(d.K / k_qk_k) + align64(static_cast<size_t>(d.K) * sizeof(float));
}

bool mul_mat_k(const compute_params & p, const mm_dims & d) {
    switch (d.a->type) {
    case TSR_TYPE_Q4_K: run<TSR_TYPE_Q4_K>(p, d); return true;
    case TSR_TYPE_Q6_K: run<TSR_TYPE_Q6_K>(p, d); return true;
    default: return false;
    }
}

#else // portable build: the generic kernel is used instead

size_t mul_mat_k_work_size(const mm_dims &) { return 0; }
bool mul_mat_k(const compute_params &, const mm_dims &) { return false; }

#endif

} // namespace tessera::cpu

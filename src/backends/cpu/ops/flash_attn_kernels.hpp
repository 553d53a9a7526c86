// backends/cpu/ops/flash_attn_kernels.hpp — the block kernels of
// FLASH_ATTN_EXT (flash_attn.cpp), for G query rows at once and one block
// of up to k_block keys: the scores (scores_rows from transposed keys,
// transpose_block / transpose_keys; scores_rows_d from K's rows), the
// soft-max weights and their sum (block_exp_sum) and the accumulation of
// V (accumulate_rows), on 8 or 16 lanes (lanes8, lanes16), portable
// versions of the three, and the end of a mask row's visible keys
// (visible_end). flash_attn.cpp tiles the work, deals it to the threads,
// chooses G and runs the online soft-max around these. Included by
// flash_attn.cpp only (compiled once per instruction-set variant, like
// every ops/*.cpp), and all in an unnamed namespace: internal linkage as
// when they were part of flash_attn.cpp (the same inlining, so the same
// code and bits), and no copy compiled for one instruction set can stand
// in for another's at link time. Internal to the CPU kernels.
//
// Scores, two orders of summation, chosen by the node's shape alone (never
// by T, so a prompt row and a decoded one get the same bits):
//   - with k_min_group_t or more heads a KV head, transposed keys
//     (transpose_block: keys along the lanes, scores_rows): a score is two
//     FMA chains, no horizontal sum; a prompt transposes the node's keys
//     once for all threads (prepare call, shared scratch), decoding each
//     block in the one tile that reads it;
//   - with fewer, the order of the dimensions along the lanes
//     (scores_rows_d: eight keys' dot products folded and transposed), which
//     decoding computes so: the transposition would cost it more than the
//     folding does with few rows a key. A prompt transposes its keys once
//     and computes the same sums with the keys along the lanes
//     (scores_rows_dt), without the folding and transposing per row.
// The accumulation has the dimensions along the lanes (512-bit vectors on
// AVX-512, the same bits as 256-bit ones).
// bench_ops BM_attention, D 64, F16 cache, GFLOP/s, medians of 5 interleaved
// runs on Zen 4 (one thread / two): 32 heads over 4, T = n_kv = 512: 51.4
// / 98.7 with dimension-lane scores, 62.3 / 122.9 transposed; one decoded
// token over 2048 keys 57.8 / 110.6 and 58.9 / 113.9. (Earlier, on Zen 5,
// 9 heads over 3: sharing the K and V loads took a prompt from 5.5-5.8 ms
// to 3.5-3.6 ms on one thread and a decoded token from 94-106 us to 52-59.)
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "backends/cpu/compute.hpp"
#include "backends/cpu/ops/float_load.hpp"
#include "backends/cpu/ops/simd.hpp"
#include "backends/cpu/ops/tensor_access.hpp"
#include "backends/cpu/ops/vec_dot.hpp"
#include "backends/cpu/ops/vec_math.hpp"

namespace tessera::cpu::flash_attn {

namespace {

constexpr int64_t k_block = 64; // keys per online soft-max step
constexpr float k_neg_inf = -std::numeric_limits<float>::infinity();

#ifdef TSR_CPU_AVX2

// The K/V cache's element type (F16 or F32), for float_load.
template <bool F16>
constexpr int32_t kv_type = F16 ? TSR_TYPE_F16 : TSR_TYPE_F32;

// A vector width of the kernels below: 8 lanes, or 16 with AVX-512.
// half() folds a vector to 8 lanes (its two 256-bit halves added); with
// 8 lanes it is the vector itself.
struct lanes8 {
    using vec = __m256;
    static constexpr int64_t width = 8;
    static vec zero() { return _mm256_setzero_ps(); }
    static vec set1(float x) { return _mm256_set1_ps(x); }
    static vec load(const float * p) { return _mm256_loadu_ps(p); }
    static void store(float * p, vec v) { _mm256_storeu_ps(p, v); }
    template <bool F16>
    static vec loadk(const char * p) { return float_load::load8<kv_type<F16>>(p); }
    static vec fma(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }
    static vec mul(vec a, vec b) { return _mm256_mul_ps(a, b); }
    static vec unit_bcast(const float * q);
    static vec add(vec a, vec b) { return _mm256_add_ps(a, b); }
    static __m256 half(vec v) { return v; }
    // Lanes < valid (1 <= valid <= width) of p; the others read as zero.
    static __m256i lanes_below(int64_t valid) {
        return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(valid)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    }
    static vec load_part(const float * p, int64_t valid) { return _mm256_maskload_ps(p, lanes_below(valid)); }
    static void store_part(float * p, vec v, int64_t valid) { _mm256_maskstore_ps(p, lanes_below(valid), v); }
    // v with lanes >= valid set to -inf; bits of the lanes < valid that are NaN.
    static vec below_or_ninf(vec v, int64_t valid) {
        return _mm256_blendv_ps(_mm256_set1_ps(-std::numeric_limits<float>::infinity()), v,
                                _mm256_castsi256_ps(lanes_below(valid)));
    }
    static int nan_bits(vec v, int64_t valid) {
        return _mm256_movemask_ps(_mm256_and_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q), _mm256_castsi256_ps(lanes_below(valid))));
    }
    static vec max(vec a, vec b) { return _mm256_max_ps(a, b); }
    // a in the lanes < from, b in the others.
    static vec blend_from(vec a, vec b, int64_t from) {
        return from <= 0 ? b : _mm256_blendv_ps(b, a, _mm256_castsi256_ps(lanes_below(std::min<int64_t>(from, width))));
    }
    static float hmax(vec v) {
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
        return _mm_cvtss_f32(m);
    }
};
#ifdef TSR_CPU_AVX512
struct lanes16 {
    using vec = __m512;
    static constexpr int64_t width = 16;
    static vec zero() { return _mm512_setzero_ps(); }
    static vec set1(float x) { return _mm512_set1_ps(x); }
    static vec load(const float * p) { return _mm512_loadu_ps(p); }
    static void store(float * p, vec v) { _mm512_storeu_ps(p, v); }
    template <bool F16>
    static vec loadk(const char * p) { return float_load::load16<kv_type<F16>>(p); }
    static vec fma(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
    static vec mul(vec a, vec b) { return _mm512_mul_ps(a, b); }
    static vec unit_bcast(const float * q);
    static vec add(vec a, vec b) { return _mm512_add_ps(a, b); }
    static __m256 half(vec v) { return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)); }
    static __mmask16 lanes_below(int64_t valid) { return static_cast<__mmask16>((1u << valid) - 1u); }
    static vec load_part(const float * p, int64_t valid) { return _mm512_maskz_loadu_ps(lanes_below(valid), p); }
    static void store_part(float * p, vec v, int64_t valid) { _mm512_mask_storeu_ps(p, lanes_below(valid), v); }
    static vec below_or_ninf(vec v, int64_t valid) {
        return _mm512_mask_mov_ps(_mm512_set1_ps(-std::numeric_limits<float>::infinity()), lanes_below(valid), v);
    }
    static int nan_bits(vec v, int64_t valid) { return _mm512_mask_cmp_ps_mask(lanes_below(valid), v, v, _CMP_UNORD_Q); }
    static vec max(vec a, vec b) { return _mm512_max_ps(a, b); }
    static vec blend_from(vec a, vec b, int64_t from) {
        return from <= 0 ? b : _mm512_mask_mov_ps(b, lanes_below(std::min<int64_t>(from, width)), a);
    }
    static float hmax(vec v) { return _mm512_reduce_max_ps(v); }
};
#endif

// Keys ahead of the one in use whose K or V bytes are prefetched (the
// next key block's). Decoding reads the cache from memory (a token's
// weights evict it between uses) along rows a cache row apart, which the
// hardware prefetcher follows too slowly: 135M Q4_0 generation spent about
// 130 ns per key and layer (tg512 against tg64, one thread), 5x the
// hot-cache BM_attention. BM_attn_decode_layers (64 caches of 1024 keys,
// medians of 5 interleaved runs): 1 thread 10.1 -> 17.8 GB/s, 2 threads
// 9.8 -> 18.2; prefetching a block's V rows during its scores instead,
// or 32 keys ahead, measured the same within the noise.
constexpr int64_t k_kv_prefetch = 64;

// Prefetches the `bytes` bytes at p into L1, a line at a time.
inline void prefetch_bytes(const char * p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
}

// For G rows at once (each V vector loaded once for all of them):
// acc[i][d0 .. d0 + NV L::width) += sum_j w[i][j] V_j[same range] for
// j < n[i], in order of j: one FMA chain per element, whatever the vector
// width or the group (the same bits).
template <class L, bool F16, int NV, int G>
void accumulate_chunk_rows(float * const * acc, const float * const * w, const char * vd, size_t v_row, const int64_t * n) {
    constexpr size_t esz = F16 ? 2 : 4;
    int64_t n_all = n[0];
    for (int i = 1; i < G; ++i) n_all = std::min(n_all, n[i]);
    typename L::vec a[G][NV];
    for (int i = 0; i < G; ++i) {
        for (int r = 0; r < NV; ++r) a[i][r] = L::load(acc[i] + L::width * r);
    }
    for (int64_t j = 0; j < n_all; ++j) {
        const char * row = vd + static_cast<size_t>(j) * v_row;
        prefetch_bytes(row + k_kv_prefetch * v_row, NV * L::width * esz);
        typename L::vec vv[NV];
        for (int r = 0; r < NV; ++r) vv[r] = L::template loadk<F16>(row + L::width * r * esz);
        for (int i = 0; i < G; ++i) {
            const typename L::vec wj = L::set1(w[i][j]);
            for (int r = 0; r < NV; ++r) a[i][r] = L::fma(wj, vv[r], a[i][r]);
        }
    }
    for (int i = 0; i < G; ++i) {
        for (int64_t j = n_all; j < n[i]; ++j) { // the rest of this row's keys
            const typename L::vec wj = L::set1(w[i][j]);
            const char * row = vd + static_cast<size_t>(j) * v_row;
            for (int r = 0; r < NV; ++r) a[i][r] = L::fma(wj, L::template loadk<F16>(row + L::width * r * esz), a[i][r]);
        }
        for (int r = 0; r < NV; ++r) L::store(acc[i] + L::width * r, a[i][r]);
    }
}

// The node's keys transposed (prepare call, transpose_keys), in units of
// two consecutive dimensions: per KV head hk and block b of k_block keys,
// a [D / 2][k_block][2] array of F32 (an F16 cache widened on the way:
// exact, so the same scores, and the score kernels then load without
// converting; a vcvtph2ps per key vector took the FMA ports, once per
// group of rows): unit c of key b k_block + j (dimensions 2c, 2c + 1) at
// kt + ((hk n_blocks + b) D / 2 + c) k_block 2 elements; keys past n_kv
// are zero. With the keys along the vector lanes (two lanes a key) a score
// is two FMA chains and one add, where the old kernel (dimensions along
// the lanes) spent more operations folding its 64-long dot products than
// multiplying; units of two halve the shuffles of the transposition,
// which decoding pays once per token.
int64_t key_blocks(int64_t n_kv) {
    return (n_kv + k_block - 1) / k_block;
}

size_t kt_block_bytes(int64_t D) {
    return static_cast<size_t>(D * k_block) * sizeof(float);
}

// One block of transposed keys (D % 8 == 0): out[c][j] = unit c of key j
// of the nk keys at kb (k_row bytes apart; keys nk .. k_block - 1 zero),
// as F32. F16 units (32 bits) go through 8 x 8 transposes of 8 keys x 8
// units and are widened as they are stored, F32 units (64 bits) through
// 4 x 4 transposes of 4 keys x 4 units. The
// rows `ahead` keys on (if fewer than n_next keys follow kb) are
// prefetched: decoding reads the cache from memory (see k_kv_prefetch).
template <bool F16>
void transpose_block(const char * kb, size_t k_row, int64_t nk, int64_t n_next, int64_t D, char * out) {
    constexpr size_t esz = F16 ? 2 : 4, unit = 2 * esz;
    constexpr int64_t ahead = 2 * k_kv_prefetch;
    auto key = [&](int64_t j, int64_t c) { return kb + static_cast<size_t>(j) * k_row + static_cast<size_t>(c) * unit; };
    auto dst = [&](int64_t c, int64_t j) { return out + static_cast<size_t>(c * k_block + j) * 2 * sizeof(float); };
    auto prefetch_ahead = [&](int64_t jj, int64_t keys) {
        for (int64_t j = jj + ahead; j < std::min(jj + ahead + keys, n_next); ++j) {
            prefetch_bytes(kb + static_cast<size_t>(j) * k_row, static_cast<size_t>(D) * esz);
        }
    };
    if constexpr (F16) {
        for (int64_t jj = 0; jj < k_block; jj += 8) {
            prefetch_ahead(jj, 8);
            const bool full = jj + 8 <= nk;
            for (int64_t c = 0; c < D / 2; c += 8) {
                const bool four = D / 2 - c < 8; // the last 4 units when D % 16 == 8
                __m256 r[8];
                if (full && !four) { // the common case, without a test per key
                    for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(reinterpret_cast<const float *>(key(jj + i, c)));
                } else {
                    for (int i = 0; i < 8; ++i) {
                        if (jj + i >= nk) {
                            r[i] = _mm256_setzero_ps();
                        } else if (four) {
                            r[i] = _mm256_zextps128_ps256(_mm_loadu_ps(reinterpret_cast<const float *>(key(jj + i, c))));
                        } else {
                            r[i] = _mm256_loadu_ps(reinterpret_cast<const float *>(key(jj + i, c)));
                        }
                    }
                }
                simd::transpose8x8(r); // r[u]: unit c + u of the 8 keys
                for (int u = 0; u < (four ? 4 : 8); ++u) {
                    const __m256i h = _mm256_castps_si256(r[u]);
                    auto * o = reinterpret_cast<float *>(dst(c + u, jj));
#ifdef TSR_CPU_AVX512
                    _mm512_storeu_ps(o, _mm512_cvtph_ps(h));
#else
                    _mm256_storeu_ps(o, _mm256_cvtph_ps(_mm256_castsi256_si128(h)));
                    _mm256_storeu_ps(o + 8, _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)));
#endif
                }
            }
        }
    } else {
        for (int64_t jj = 0; jj < k_block; jj += 4) {
            prefetch_ahead(jj, 4);
            for (int64_t c = 0; c < D / 2; c += 4) {
                __m256d r[4];
                for (int i = 0; i < 4; ++i) {
                    r[i] = jj + i < nk ? _mm256_loadu_pd(reinterpret_cast<const double *>(key(jj + i, c))) : _mm256_setzero_pd();
                }
                const __m256d t0 = _mm256_unpacklo_pd(r[0], r[1]), t1 = _mm256_unpackhi_pd(r[0], r[1]);
                const __m256d t2 = _mm256_unpacklo_pd(r[2], r[3]), t3 = _mm256_unpackhi_pd(r[2], r[3]);
                _mm256_storeu_pd(reinterpret_cast<double *>(dst(c + 0, jj)), _mm256_permute2f128_pd(t0, t2, 0x20));
                _mm256_storeu_pd(reinterpret_cast<double *>(dst(c + 1, jj)), _mm256_permute2f128_pd(t1, t3, 0x20));
                _mm256_storeu_pd(reinterpret_cast<double *>(dst(c + 2, jj)), _mm256_permute2f128_pd(t0, t2, 0x31));
                _mm256_storeu_pd(reinterpret_cast<double *>(dst(c + 3, jj)), _mm256_permute2f128_pd(t1, t3, 0x31));
            }
        }
    }
}

// This thread's share of the (KV head, key block) items of the node's
// shared kt: the blocks of the first n_vis keys (those some row can see).
template <bool F16>
void transpose_keys(const compute_params & p, const tsr_tensor * k, int64_t D, int64_t n_vis, char * kt) {
    const int64_t n_kv = k->ne[1], nb = key_blocks(n_kv), nb_vis = key_blocks(n_vis), items = k->ne[2] * nb_vis;
    const size_t k_row = k->nb[1];
    for (int64_t it = items * p.ith / p.nth; it < items * (p.ith + 1) / p.nth; ++it) {
        const int64_t hk = it / nb_vis, b = it % nb_vis, j0 = b * k_block;
        transpose_block<F16>(row_ptr(k, 0, hk, 0) + static_cast<size_t>(j0) * k_row, k_row, std::min(k_block, n_kv - j0),
                             n_vis - j0, D, kt + static_cast<size_t>(hk * nb + b) * kt_block_bytes(D));
    }
}

// Lane pairs (key r: lanes 2r, 2r + 1) of a and b (keys W/2 .. W-1)
// added, the W keys in the order key_order puts back (64-bit units hold
// keys (0,1) (4,5) (2,3) (6,7) with 8 lanes, (0,1) (8,9) (2,3) (10,11) ...
// with 16).
inline __m256 add_lane_pairs_unordered(__m256 a, __m256 b) {
    return _mm256_add_ps(_mm256_shuffle_ps(a, b, 0x88), _mm256_shuffle_ps(a, b, 0xdd));
}
inline __m256 key_order(__m256 v) {
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(v), 0xd8));
}
// The same with key r of the W keys in lane r.
inline __m256 add_lane_pairs(__m256 a, __m256 b) {
    return key_order(add_lane_pairs_unordered(a, b));
}
#ifdef TSR_CPU_AVX512
inline __m512 add_lane_pairs_unordered(__m512 a, __m512 b) {
    return _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x88), _mm512_shuffle_ps(a, b, 0xdd));
}
inline __m512 key_order(__m512 v) {
    return _mm512_castpd_ps(_mm512_permutexvar_pd(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), _mm512_castps_pd(v)));
}
inline __m512 add_lane_pairs(__m512 a, __m512 b) {
    return key_order(add_lane_pairs_unordered(a, b));
}
#endif

// Both elements of unit c of q (dimensions 2c, 2c + 1) in every lane pair.
inline __m256 unit_bcast8(const float * q) {
    return _mm256_castpd_ps(_mm256_broadcast_sd(reinterpret_cast<const double *>(q)));
}
#ifdef TSR_CPU_AVX512
inline __m512 unit_bcast16(const float * q) {
    double u;
    std::memcpy(&u, q, sizeof u);
    return _mm512_castpd_ps(_mm512_set1_pd(u));
}
#endif

inline __m256 lanes8::unit_bcast(const float * q) { return unit_bcast8(q); }
#ifdef TSR_CPU_AVX512
inline __m512 lanes16::unit_bcast(const float * q) { return unit_bcast16(q); }
#endif

// For G query rows at once (each key vector loaded once for all of them):
// s[i][j] = scale * (q[i] . K_j) + mk[i][j] for j < n[i] <= k_block (mk:
// the rows' mask entries for these keys; it may be s itself), and mx[i] =
// the largest s[i][j] (NaN if a score is), from the block's transposed keys kt
// (transpose_block).
// W / 2 keys a vector, 4 vectors (2 W keys) a pass: the dot of row i and
// key j is an FMA chain over the even dimensions from zero and one over
// the odd ones, added, then times scale, plus the mask: the same
// operations in any group, pass or vector width, so a row gets the same
// bits in a prompt as alone.
template <class L, bool F16, int G>
void scores_rows(const float * const * q, const char * kt, int64_t D, const int64_t * n, float scale,
                 const float * const * mk, float * const * s, float * mx) {
    constexpr int NK = 4; // key vectors per pass
    constexpr int64_t W = L::width, KV = W / 2; // lanes, keys a vector
    constexpr size_t esz = F16 ? 2 : 4;
    int64_t n_max = n[0];
    for (int i = 1; i < G; ++i) n_max = std::max(n_max, n[i]);
    const typename L::vec vscale = L::set1(scale);
    typename L::vec vmax[G]; // per row: lane maxima of the valid scores
    int nan[G] = {};         // per row: lanes that met a NaN score
    for (auto & v : vmax) v = L::set1(k_neg_inf);
    for (int64_t j0 = 0; j0 < n_max; j0 += NK * KV) {
        typename L::vec a[G][NK];
        for (auto & row : a) {
            for (auto & v : row) v = L::zero();
        }
        const char * col = kt + static_cast<size_t>(j0) * 2 * esz;
        for (int64_t c = 0; c < D / 2; ++c) {
            typename L::vec kv[NK];
            for (int v = 0; v < NK; ++v) kv[v] = L::template loadk<F16>(col + static_cast<size_t>((c * k_block + v * KV) * 2) * esz);
            for (int i = 0; i < G; ++i) {
                const typename L::vec qc = L::unit_bcast(q[i] + 2 * c);
                for (int v = 0; v < NK; ++v) a[i][v] = L::fma(qc, kv[v], a[i][v]);
            }
        }
        for (int i = 0; i < G; ++i) {
            for (int v = 0; v < NK; v += 2) {
                const int64_t j = j0 + v * KV, valid = std::min<int64_t>(W, n[i] - j);
                if (valid <= 0) break;
                const typename L::vec dot = add_lane_pairs(a[i][v], a[i][v + 1]);
                const typename L::vec sj = L::add(L::mul(dot, vscale), L::load_part(mk[i] + j, valid));
                L::store_part(s[i] + j, sj, valid);
                vmax[i] = L::max(vmax[i], valid == W ? sj : L::below_or_ninf(sj, valid));
                nan[i] |= L::nan_bits(sj, valid);
            }
        }
    }
    // A NaN score makes the maximum NaN (see tile_block); max_ps would drop it.
    for (int i = 0; i < G; ++i) mx[i] = nan[i] != 0 ? std::numeric_limits<float>::quiet_NaN() : L::hmax(vmax[i]);
}

// scores_rows_d's scores, bit for bit, from the block's transposed keys kt
// (transpose_block), for prompts whose heads are too few a KV head for
// scores_rows (its sums are ordered differently): the same products summed
// in the same order, with the keys along the lanes instead of folded and
// transposed (BM_attention, see flash_attn.cpp). scores_rows_d<L>'s lane m
// of a key's accumulator is an FMA chain over dimensions m, m + W, ...
// (W = L::width); here unit c (dimensions 2c, 2c + 1, two lanes a key)
// belongs to class c mod W/2, one accumulator per class and key vector.
// L::half adds lanes m and m + 8 (classes u and u + 4 with 16 lanes), and
// the eight folded lanes h_0 .. h_7 are summed as ((h0 + h1) + (h2 + h3))
// + ((h4 + h5) + (h6 + h7)); the last n % 8 keys of a row, which
// scores_rows_d takes one at a time, in hsum8's order ((h0 + h4) + (h2 +
// h6)) + ((h1 + h5) + (h3 + h7)). Then times scale, plus the mask, as
// there. D % W == 0 (as scores_rows_d<L>). S: D / W when known at compile
// time (the chains unrolled), else 0.
template <class L, bool F16, int G, int S = 0>
void scores_rows_dt(const float * const * q, const char * kt, int64_t D, const int64_t * n, float scale,
                    const float * const * mk, float * const * s, float * mx) {
    using vec = typename L::vec;
    constexpr int64_t W = L::width, KV = W / 2; // lanes, keys a vector
    constexpr int64_t U = W / 2;                 // unit classes (lane pairs of scores_rows_d's accumulators)
    constexpr bool fold = W == 16;               // L::half adds classes u and u + 4
    constexpr size_t esz = F16 ? 2 : 4;
    const int64_t steps = S > 0 ? S : D / W; // units of one class
    int64_t n_max = n[0];
    for (int i = 1; i < G; ++i) n_max = std::max(n_max, n[i]);
    const vec vscale = L::set1(scale);
    vec vmax[G];
    int nan[G] = {};
    for (auto & v : vmax) v = L::set1(k_neg_inf);
    for (int64_t j0 = 0; j0 < n_max; j0 += W) {
        vec part[G][2];  // per row: P0, then P0 + P1; P2, then P2 + P3 (P_u: H_u's lane pairs added)
        vec hs[G][4][2]; // per row, u and key vector: H_u (for the last keys' order)
        // u: the folded lanes 2u, 2u + 1 (classes u, and u + 4 with 16 lanes).
        for (int u = 0; u < 4; ++u) {
            vec a[G][2][fold ? 2 : 1];
            for (auto & row : a) {
                for (auto & kv : row) {
                    for (auto & x : kv) x = L::zero();
                }
            }
            for (int64_t t = 0; t < steps; ++t) {
                for (int f = 0; f < (fold ? 2 : 1); ++f) {
                    const int64_t c = u + 4 * f + U * t;
                    const char * col = kt + static_cast<size_t>((c * k_block + j0) * 2) * esz;
                    const vec k0 = L::template loadk<F16>(col);
                    const vec k1 = L::template loadk<F16>(col + static_cast<size_t>(KV * 2) * esz);
                    for (int i = 0; i < G; ++i) {
                        const vec qc = L::unit_bcast(q[i] + 2 * c);
                        a[i][0][f] = L::fma(qc, k0, a[i][0][f]);
                        a[i][1][f] = L::fma(qc, k1, a[i][1][f]);
                    }
                }
            }
            for (int i = 0; i < G; ++i) {
                vec hv[2];
                for (int v = 0; v < 2; ++v) {
                    if constexpr (fold) {
                        hv[v] = L::add(a[i][v][0], a[i][v][1]);
                    } else {
                        hv[v] = a[i][v][0];
                    }
                    hs[i][u][v] = hv[v];
                }
                const vec p = add_lane_pairs_unordered(hv[0], hv[1]); // the same key order for every u
                if (u == 0) part[i][0] = p;
                if (u == 1) part[i][0] = L::add(part[i][0], p);
                if (u == 2) part[i][1] = p;
                if (u == 3) part[i][1] = L::add(part[i][1], p);
            }
        }
        for (int i = 0; i < G; ++i) {
            const int64_t valid = std::min<int64_t>(W, n[i] - j0);
            if (valid <= 0) continue;
            vec dot = key_order(L::add(part[i][0], part[i][1]));
            const int64_t tail = n[i] - n[i] % 8 - j0; // keys from here on: hsum8's order
            if (tail < valid) {
                vec ev[2];
                for (int v = 0; v < 2; ++v) ev[v] = L::add(L::add(hs[i][0][v], hs[i][2][v]), L::add(hs[i][1][v], hs[i][3][v]));
                const vec e = add_lane_pairs(ev[0], ev[1]);
                dot = L::blend_from(dot, e, std::max<int64_t>(tail, 0));
            }
            const vec sj = L::add(L::mul(dot, vscale), L::load_part(mk[i] + j0, valid));
            L::store_part(s[i] + j0, sj, valid);
            vmax[i] = L::max(vmax[i], valid == W ? sj : L::below_or_ninf(sj, valid));
            nan[i] |= L::nan_bits(sj, valid);
        }
    }
    for (int i = 0; i < G; ++i) mx[i] = nan[i] != 0 ? std::numeric_limits<float>::quiet_NaN() : L::hmax(vmax[i]);
}

// The scores of scores_rows with the dimensions along the lanes, read
// from K's rows (k0, k_row bytes apart; for few heads a KV head, see
// transposed_scores): s[i][j] = scale * (q[i] . K_j) + mk[i][j] for j <
// n[i], mx[i] = the largest s[i][j]; D % L::width == 0. Eight
// keys at a time: one accumulator per key whose lanes sum q[d] k_j[d] for
// d = lane (mod width), folded to 8 lanes (L::half), the 8x8 block
// transposed and added in a fixed tree so lane r is key r's dot. After the
// last group of eight common to all rows each row goes on alone (G = 1),
// its last keys one at a time (folded, then hsum8). A row's operations
// depend only on its own n, so it gets the same bits in any group.
template <class L, bool F16, int G>
void scores_rows_d(const float * const * q, const char * k0, size_t k_row, int64_t D, const int64_t * n, float scale,
                   const float * const * mk, float * const * s, float * mx) {
    constexpr size_t esz = F16 ? 2 : 4;
    int64_t n_all = n[0];
    for (int i = 1; i < G; ++i) n_all = std::min(n_all, n[i]);
    n_all -= n_all % 8; // keys every row takes in groups of eight
    const __m256 vscale = _mm256_set1_ps(scale);
    __m256 vmax[G], vnan[G]; // running maxima; lanes that met a NaN score
    for (auto & v : vmax) v = _mm256_set1_ps(k_neg_inf);
    for (auto & v : vnan) v = _mm256_setzero_ps();
    for (int64_t j = 0; j < n_all; j += 8) {
        typename L::vec a[G][8];
        for (auto & row : a) {
            for (auto & v : row) v = L::zero();
        }
        const char * kj = k0 + static_cast<size_t>(j) * k_row;
        for (int r = 0; r < 8; ++r) prefetch_bytes(kj + (k_kv_prefetch + r) * k_row, static_cast<size_t>(D) * esz);
        for (int64_t d = 0; d < D; d += L::width) {
            typename L::vec qv[G];
            for (int i = 0; i < G; ++i) qv[i] = L::load(q[i] + d);
            const size_t off = static_cast<size_t>(d) * esz;
            for (int r = 0; r < 8; ++r) {
                const typename L::vec kv = L::template loadk<F16>(kj + r * k_row + off);
                for (int i = 0; i < G; ++i) a[i][r] = L::fma(qv[i], kv, a[i][r]);
            }
        }
        for (int i = 0; i < G; ++i) {
            __m256 h[8];
            for (int r = 0; r < 8; ++r) h[r] = L::half(a[i][r]);
            simd::transpose8x8(h);
            const __m256 dot = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(h[0], h[1]), _mm256_add_ps(h[2], h[3])),
                                             _mm256_add_ps(_mm256_add_ps(h[4], h[5]), _mm256_add_ps(h[6], h[7])));
            const __m256 sj = _mm256_add_ps(_mm256_mul_ps(dot, vscale), _mm256_loadu_ps(mk[i] + j));
            _mm256_storeu_ps(s[i] + j, sj);
            vmax[i] = _mm256_max_ps(vmax[i], sj);
            vnan[i] = _mm256_or_ps(vnan[i], _mm256_cmp_ps(sj, sj, _CMP_UNORD_Q));
        }
    }
    for (int i = 0; i < G; ++i) {
        alignas(32) float lanes[8];
        _mm256_store_ps(lanes, vmax[i]);
        float m = k_neg_inf;
        for (float x : lanes) m = x > m ? x : m;
        if (_mm256_movemask_ps(vnan[i]) != 0) m = std::numeric_limits<float>::quiet_NaN();
        if constexpr (G == 1) {
            for (int64_t j = n_all; j < n[0]; ++j) { // the last keys one at a time
                typename L::vec a = L::zero();
                const char * kj = k0 + static_cast<size_t>(j) * k_row;
                for (int64_t d = 0; d < D; d += L::width) {
                    a = L::fma(L::load(q[0] + d), L::template loadk<F16>(kj + static_cast<size_t>(d) * esz), a);
                }
                s[0][j] = simd::hsum8(L::half(a)) * scale + mk[0][j];
                m = simd::max_keep_nan(m, s[0][j]);
            }
        } else if (n[i] > n_all) { // the rest of this row's keys on its own
            const int64_t rest_n = n[i] - n_all;
            float * rest_s = s[i] + n_all;
            const float * rest_m = mk[i] + n_all;
            float rest = k_neg_inf;
            scores_rows_d<L, F16, 1>(q + i, k0 + static_cast<size_t>(n_all) * k_row, k_row, D, &rest_n, scale, &rest_m,
                                     &rest_s, &rest);
            m = simd::max_keep_nan(m, rest);
        }
        mx[i] = m;
    }
}

// acc[i][d] += sum_j w[i][j] V_j[d] for j < n[i], for G rows at once;
// D % 8 == 0. On AVX-512 builds chunks of 64 elements in 512-bit vectors
// first; then chunks of 32 elements (4 vectors per row), then one chunk of
// the rest.
template <bool F16, int G>
void accumulate_rows(float * const * acc, const float * const * w, const char * v0, size_t v_row, int64_t D, const int64_t * n) {
    constexpr size_t esz = F16 ? 2 : 4;
    float * a[G];
    int64_t d = 0;
#ifdef TSR_CPU_AVX512
    for (; d + 64 <= D; d += 64) {
        for (int i = 0; i < G; ++i) a[i] = acc[i] + d;
        accumulate_chunk_rows<lanes16, F16, 4, G>(a, w, v0 + static_cast<size_t>(d) * esz, v_row, n);
    }
#endif
    while (d < D) {
        for (int i = 0; i < G; ++i) a[i] = acc[i] + d;
        const char * vd = v0 + static_cast<size_t>(d) * esz;
        switch (std::min<int64_t>(4, (D - d) / 8)) {
        case 4: accumulate_chunk_rows<lanes8, F16, 4, G>(a, w, vd, v_row, n); d += 32; break;
        case 3: accumulate_chunk_rows<lanes8, F16, 3, G>(a, w, vd, v_row, n); d += 24; break;
        case 2: accumulate_chunk_rows<lanes8, F16, 2, G>(a, w, vd, v_row, n); d += 16; break;
        default: accumulate_chunk_rows<lanes8, F16, 1, G>(a, w, vd, v_row, n); d += 8; break;
        }
    }
}

// w[j] = exp(w[j] - m) for j < n (masked -inf gives 0); returns their sum
// (eight lanes, then hsum8, then the tail in order).
float block_exp_sum(float * w, int64_t n, float m) {
    const __m256 mv = _mm256_set1_ps(m);
    __m256 sum = _mm256_setzero_ps();
    int64_t j = 0;
#ifdef TSR_CPU_AVX512
    // Sixteen exps at a time, summed as two groups of eight (the same order).
    const __m512 mv16 = _mm512_set1_ps(m);
    for (; j + 16 <= n; j += 16) {
        const __m512 e = simd::exp16(_mm512_sub_ps(_mm512_loadu_ps(w + j), mv16));
        _mm512_storeu_ps(w + j, e);
        sum = _mm256_add_ps(sum, _mm512_castps512_ps256(e));
        sum = _mm256_add_ps(sum, _mm512_extractf32x8_ps(e, 1));
    }
#endif
    for (; j + 8 <= n; j += 8) {
        const __m256 e = simd::exp8(_mm256_sub_ps(_mm256_loadu_ps(w + j), mv));
        _mm256_storeu_ps(w + j, e);
        sum = _mm256_add_ps(sum, e);
    }
    float total = simd::hsum8(sum);
    for (; j < n; ++j) {
        w[j] = std::exp(w[j] - m);
        total += w[j];
    }
    return total;
}

#endif // TSR_CPU_AVX2

// Portable versions of the three steps above (same contracts, any D).
template <bool F16>
float block_scores_portable(const float * q, const char * k0, size_t k_row, int64_t D, int64_t n, float scale,
                            const float * mk, float * s, float * row) {
    float mx = k_neg_inf;
    for (int64_t j = 0; j < n; ++j) {
        const char * kj = k0 + static_cast<size_t>(j) * k_row;
        float dot;
        if constexpr (F16) {
            f16_row_to_f32(reinterpret_cast<const uint16_t *>(kj), row, D);
            dot = dot_f32(row, q, D);
        } else {
            dot = dot_f32(reinterpret_cast<const float *>(kj), q, D);
        }
        s[j] = dot * scale + mk[j];
        mx = simd::max_keep_nan(mx, s[j]); // see tile_block
    }
    return mx;
}

template <bool F16>
void block_accumulate_portable(float * acc, const float * w, const char * v0, size_t v_row, int64_t D,
                               int64_t n) {
    for (int64_t j = 0; j < n; ++j) {
        const float wj = w[j];
        const char * vj = v0 + static_cast<size_t>(j) * v_row;
        if constexpr (F16) {
            const auto * h = reinterpret_cast<const uint16_t *>(vj);
            for (int64_t d = 0; d < D; ++d) acc[d] += wj * f16_to_f32_inline(h[d]);
        } else {
            const auto * f = reinterpret_cast<const float *>(vj);
            for (int64_t d = 0; d < D; ++d) acc[d] += wj * f[d];
        }
    }
}

float block_exp_sum_portable(float * w, int64_t n, float m) {
    float total = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
        w[j] = std::exp(w[j] - m);
        total += w[j];
    }
    return total;
}

// One past the last key of a mask row (n entries, stride nb0 bytes) that is
// not -inf; 0 when all are. A packed row is scanned 16 entries at a time by
// their bits (-inf has one encoding), which the compiler vectorizes: a
// causal mask row is mostly masked tail.
int64_t visible_end(const char * mrow, size_t nb0, int64_t n) {
    constexpr uint32_t ninf_bits = 0xff800000u;
    if (nb0 == sizeof(float)) {
        for (; n >= 16; n -= 16) {
            uint32_t v[16];
            std::memcpy(v, mrow + static_cast<size_t>(n - 16) * sizeof(float), sizeof v);
            uint32_t other = 0;
            for (uint32_t x : v) other |= x ^ ninf_bits;
            if (other != 0) break;
        }
    }
    while (n > 0 && read_f32(mrow + static_cast<size_t>(n - 1) * nb0) == k_neg_inf) --n;
    return n;
}

} // namespace

} // namespace tessera::cpu::flash_attn

// backends/cpu/ops/flash_attn.cpp — FLASH_ATTN_EXT: softmax(scale * K^T q +
// mask) V per (query row, head) without a score matrix in memory.
//   q:    F32 [D, T, H, 1], any strides
//   k, v: F32 or F16 [D, n_kv, H_kv, 1], packed along ne[0]
//   mask: null or F32 [n_kv, >= T, M2, 1]; row i of head h uses mask row
//         (i, h % M2)
//   dst:  F32 [D, H, T, 1]; head h reads K/V head h / (H / H_kv)
// op_params [0] = scale (shapes: include/tessera/core/ops.hpp).
//
// Algorithm: the online soft-max (Milakov & Gimelshein 2018, "Online
// normalizer calculation for softmax", alg. 3) applied to blocks of keys as
// in FlashAttention (Dao et al. 2022, alg. 1), for one query row at a time:
// with a running maximum m, running sum l and accumulator acc[D] (all F32),
// for each block of up to k_block keys
//   s_j   = scale * (q . k_j) + mask_j
//   m'    = max(m, max_j s_j);  c = exp(m - m')
//   l     = c * l + sum_j exp(s_j - m')
//   acc   = c * acc + sum_j exp(s_j - m') v_j
// and finally out = acc / l (mathematically softmax(s) V). Blocks whose keys
// are all masked change nothing and are skipped, as are masked keys after the
// last visible one (the causal tail); a row with no visible key gives zeros.
//
// Threads: tiles of up to k_tile (query row, head) pairs that read the same
// KV head (a row's heads of one group side by side, then the next row's)
// are dealt round-robin (tile r to thread r % nth), which balances causal
// rows of different lengths; within a tile the key blocks are the outer
// loop, so each block of K/V is reused from cache by all the tile's pairs,
// and k_group pairs at a time share every K load and k_group_acc every V
// load (the scores and the accumulation are otherwise load-bound: one load
// per FMA). Every (row, head) pair is computed with the same fixed order of
// operations whatever the tiling, grouping and thread count, so the result
// depends on neither (a row of a prompt gets the bits it gets alone).
//
// Scores, two kernels, chosen by the node's shape alone (never by T, so a
// prompt row and a decoded one take the same):
//   - with k_min_group_t or more heads a KV head, transposed keys
//     (transpose_block: keys along the lanes, scores_rows): a score is two
//     FMA chains, no horizontal sum; a prompt transposes the node's keys
//     once for all threads (prepare call, shared scratch), decoding each
//     block in the one tile that reads it;
//   - with fewer, the dimensions along the lanes (scores_rows_d), eight
//     keys' dot products folded and transposed: the transposition would
//     cost decoding more than the folding does with few rows a key.
// The accumulation has the dimensions along the lanes (512-bit vectors on
// AVX-512, the same bits as 256-bit ones).
// bench_ops BM_attention, D 64, F16 cache, GFLOP/s, medians of 5 interleaved
// runs on Zen 4 (one thread / two): 32 heads over 4, T = n_kv = 512: 51.4
// / 98.7 with dimension-lane scores, 62.3 / 122.9 transposed; one decoded
// token over 2048 keys 57.8 / 110.6 and 58.9 / 113.9. (Earlier, on Zen 5,
// 9 heads over 3: sharing the K and V loads took a prompt from 5.5-5.8 ms
// to 3.5-3.6 ms on one thread and a decoded token from 94-106 us to 52-59.)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include "backends/cpu/ops/float_load.hpp"
#include "backends/cpu/ops/ops.hpp"
#include "backends/cpu/ops/tensor_access.hpp"
#include "backends/cpu/ops/vec_dot.hpp"
#include "backends/cpu/ops/vec_math.hpp"

namespace tessera::cpu {

namespace {

constexpr int64_t k_block = 64; // keys per online soft-max step
constexpr int64_t k_tile = 12;  // (query row, head) pairs of one KV head computed together
#ifdef TSR_CPU_AVX512
// Query rows whose scores and accumulations share each load of K and V
// (32 vector registers): transposed scores 6 rows x 4 key vectors,
// dimension-lane scores 3 rows x 8 keys, accumulation 3 rows x 4 vectors.
constexpr int k_group = 6;
constexpr int k_group_d = 3;
constexpr int k_group_acc = 3;
#else
// 16 registers: transposed scores 2 rows x 4 key vectors, dimension-lane
// scores one row (8 keys), accumulation 2 rows (2 x 4 vectors; the same
// bits as one at a time).
constexpr int k_group = 2;
constexpr int k_group_d = 1;
constexpr int k_group_acc = 2;
#endif
// Heads a KV head from which the scores read transposed keys
// (transposed_scores). The transposition costs about as much per key as
// the dimension-lane kernel's folding costs per key and row, so decoding
// gains only with many rows a key: bench_ops on Zen 4, one thread, F16
// cache: 32 heads over 4 (BM_attn_decode) decode the same either way, 9
// over 3 (BM_attention T = 1, 2048 keys) 53.9 -> 41.3 GFLOP/s, while
// prompts gain in both (T = n_kv = 512, 9 over 3: 43 -> 55).
constexpr int64_t k_min_group_t = 6;
constexpr float k_neg_inf = -std::numeric_limits<float>::infinity();
// The mask entries of a row without a mask.
alignas(64) constexpr float k_zero_mask[k_block] = {};

struct fa_dims {
    int64_t D, T, H, H_kv, n_kv, group;
};

fa_dims dims_of(const tsr_tensor * dst) {
    const tsr_tensor * q = dst->src[0];
    const tsr_tensor * k = dst->src[1];
    return {q->ne[0], q->ne[1], q->ne[2], k->ne[2], k->ne[1], q->ne[2] / k->ne[2]};
}

// Scratch of one thread, carved from p.wdata (work_size below).
struct fa_scratch {
    float * q;   // [k_tile][D] the tile's query rows in F32, packed
    float * acc; // [k_tile][D] their running accumulators
    float * s;   // [k_tile][k_block] scores, then weights exp(s - m), per row
    float * row; // [D] one K row widened to F32 (portable path only)
    char * kt;   // one block of transposed keys (decoding: kt_bytes is 0)
};

size_t tile_bytes(int64_t D) {
    return align64(static_cast<size_t>(k_tile * D) * sizeof(float));
}

size_t scratch_bytes(int64_t D) {
    return 2 * tile_bytes(D) + align64(k_tile * k_block * sizeof(float)) + align64(static_cast<size_t>(D) * sizeof(float)) +
           align64(static_cast<size_t>(D * k_block) * sizeof(float));
}

fa_scratch carve(void * wdata, int64_t D) {
    auto * base = static_cast<char *>(wdata);
    const size_t tile = tile_bytes(D);
    fa_scratch s{};
    s.q = reinterpret_cast<float *>(base);
    s.acc = reinterpret_cast<float *>(base + tile);
    s.s = reinterpret_cast<float *>(base + 2 * tile);
    s.row = reinterpret_cast<float *>(base + 2 * tile + align64(k_tile * k_block * sizeof(float)));
    s.kt = reinterpret_cast<char *>(s.row) + align64(static_cast<size_t>(D) * sizeof(float));
    return s;
}

// Whether the scores read transposed keys (transpose_block): vector
// builds, D % 8 == 0.
bool transposed_scores(const tsr_tensor * node) {
#ifdef TSR_CPU_AVX2
    const fa_dims dm = dims_of(node);
    return dm.D % 8 == 0 && dm.group >= k_min_group_t;
#else
    (void)node;
    return false;
#endif
}

// Bytes of the node's transposed keys, made once for all threads by the
// prepare call (shared scratch, transpose_keys) when more than one tile
// reads each KV head (prompts); 0 otherwise: decoding (one tile a KV head)
// transposes each block in the tile that reads it, into the thread's own
// scratch, and needs no prepare call nor its barrier.
size_t kt_bytes(const tsr_tensor * node) {
#ifdef TSR_CPU_AVX2
    const tsr_tensor * k = node->src[1];
    const int64_t D = k->ne[0];
    const fa_dims dm = dims_of(node);
    if (!transposed_scores(node) || dm.T * dm.group <= k_tile) return 0;
    size_t bytes = 0;
    const auto blocks = static_cast<size_t>(k->ne[2]) * static_cast<size_t>((k->ne[1] + k_block - 1) / k_block);
    const size_t per_block = static_cast<size_t>(D * k_block) * float_type_size(k->type);
    if (__builtin_mul_overflow(blocks, per_block, &bytes)) throw std::length_error("flash_attn_ext: transposed keys exceed the address space");
    return bytes;
#else
    (void)node;
    return 0;
#endif
}

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
// a [D / 2][k_block][2] array of K's own element type (F16 or F32): unit
// c of key b k_block + j (dimensions 2c, 2c + 1) at
// kt + ((hk n_blocks + b) D / 2 + c) k_block 2 elements; keys past n_kv
// are zero. With the keys along the vector lanes (two lanes a key) a score
// is two FMA chains and one add, where the old kernel (dimensions along
// the lanes) spent more operations folding its 64-long dot products than
// multiplying; units of two halve the shuffles of the transposition,
// which decoding pays once per token.
int64_t key_blocks(int64_t n_kv) {
    return (n_kv + k_block - 1) / k_block;
}

template <bool F16>
size_t kt_block_bytes(int64_t D) {
    return static_cast<size_t>(D * k_block) * (F16 ? 2 : 4);
}

// One block of transposed keys (D % 8 == 0): out[c][j] = unit c of key j
// of the nk keys at kb (k_row bytes apart; keys nk .. k_block - 1 zero).
// F16 units (32 bits) go through 8 x 8 transposes of 8 keys x 8 units,
// F32 units (64 bits) through 4 x 4 transposes of 4 keys x 4 units. The
// rows `ahead` keys on (if fewer than n_next keys follow kb) are
// prefetched: decoding reads the cache from memory (see k_kv_prefetch).
template <bool F16>
void transpose_block(const char * kb, size_t k_row, int64_t nk, int64_t n_next, int64_t D, char * out) {
    constexpr size_t esz = F16 ? 2 : 4, unit = 2 * esz;
    constexpr int64_t ahead = 2 * k_kv_prefetch;
    auto key = [&](int64_t j, int64_t c) { return kb + static_cast<size_t>(j) * k_row + static_cast<size_t>(c) * unit; };
    auto dst = [&](int64_t c, int64_t j) { return out + static_cast<size_t>(c * k_block + j) * unit; };
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
                for (int u = 0; u < (four ? 4 : 8); ++u) _mm256_storeu_ps(reinterpret_cast<float *>(dst(c + u, jj)), r[u]);
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
                             n_vis - j0, D, kt + static_cast<size_t>(hk * nb + b) * kt_block_bytes<F16>(D));
    }
}

// Lane pairs (key r: lanes 2r, 2r + 1) of a and b (keys W/2 .. W-1)
// added: key r of the W keys in lane r.
inline __m256 add_lane_pairs(__m256 a, __m256 b) {
    const __m256 sum = _mm256_add_ps(_mm256_shuffle_ps(a, b, 0x88), _mm256_shuffle_ps(a, b, 0xdd));
    // 64-bit units now hold keys (0,1) (4,5) (2,3) (6,7)
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(sum), 0xd8));
}
#ifdef TSR_CPU_AVX512
inline __m512 add_lane_pairs(__m512 a, __m512 b) {
    const __m512 sum = _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x88), _mm512_shuffle_ps(a, b, 0xdd));
    // 64-bit units now hold keys (0,1) (8,9) (2,3) (10,11) ...
    return _mm512_castpd_ps(_mm512_permutexvar_pd(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), _mm512_castps_pd(sum)));
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

#ifdef TSR_CPU_AVX2
// One past the last key any query row of the node can see (visible_end
// over every mask row it uses).
int64_t visible_keys(const tsr_tensor * dst) {
    const tsr_tensor * q = dst->src[0];
    const tsr_tensor * mask = dst->src[3];
    const int64_t n_kv = dst->src[1]->ne[1];
    if (mask == nullptr) return n_kv;
    int64_t end = 0;
    for (int64_t i = q->ne[1] - 1; i >= 0 && end < n_kv; --i) { // the last rows usually see the most
        for (int64_t m = 0; m < mask->ne[2] && end < n_kv; ++m) {
            end = std::max(end, visible_end(row_ptr(mask, i, m, 0), mask->nb[0], n_kv));
        }
    }
    return end;
}
#endif

// The online soft-max state of one (query row, head) pair.
struct row_state {
    const char * mrow; // mask row or null
    int64_t n_end;     // keys after n_end - 1 are all masked
    float m, l;        // running maximum and sum
};

#ifdef TSR_CPU_AVX2
// Calls f(std::integral_constant<int, G>{}) for G = count, 1 <= count <=
// Max: a run-time group size to the kernels' compile-time G.
template <int Max, class F>
void with_group(int count, F && f) {
    if constexpr (Max > 1) {
        if (count < Max) return with_group<Max - 1>(count, f);
    }
    f(std::integral_constant<int, Max>{});
}

// Scores of `count` rows (at most k_group) of one key block from its
// transposed keys kt: the row pointers, key counts and maxima of
// scores_rows, 16 lanes on AVX-512 builds.
template <bool F16>
void scores_group(int count, const float * const * q, const char * kt, int64_t D, const int64_t * n, float scale,
                  const float * const * mk, float * const * s, float * mx) {
    with_group<k_group>(count, [&](auto g) {
#ifdef TSR_CPU_AVX512
        scores_rows<lanes16, F16, g()>(q, kt, D, n, scale, mk, s, mx);
#else
        scores_rows<lanes8, F16, g()>(q, kt, D, n, scale, mk, s, mx);
#endif
    });
}

// The same from K's rows kb (scores_rows_d; at most k_group_d rows), 16
// lanes where AVX-512 and D allow.
template <bool F16>
void scores_group_d(int count, const float * const * q, const char * kb, size_t k_row, int64_t D, const int64_t * n,
                    float scale, const float * const * mk, float * const * s, float * mx) {
    with_group<k_group_d>(count, [&](auto g) {
#ifdef TSR_CPU_AVX512
        if (D % 16 == 0) return scores_rows_d<lanes16, F16, g()>(q, kb, k_row, D, n, scale, mk, s, mx);
#endif
        scores_rows_d<lanes8, F16, g()>(q, kb, k_row, D, n, scale, mk, s, mx);
    });
}

// The accumulation of `count` rows (at most k_group_acc) of one key block.
template <bool F16>
void accumulate_group(int count, float * const * acc, const float * const * w, const char * vb, size_t v_row, int64_t D,
                      const int64_t * n) {
    with_group<k_group_acc>(count, [&](auto g) { accumulate_rows<F16, g()>(acc, w, vb, v_row, D, n); });
}
#endif

// One block of keys [j0, j0 + k_block) for the tile's rows that still
// have visible keys in it: scores (k_group rows share each key load, from
// the block's transposed keys ktb, or K's rows kb on the portable path), then
// per row the rescale and weights, then the accumulation (k_group rows
// share each V load); the steps in the header comment. A row whose keys
// in the block are all masked is left unchanged.
template <bool K16, bool V16>
void tile_block(const tsr_tensor * mask, row_state * st, int64_t nr, const char * ktb, const char * kb, const char * vb,
                size_t k_row, size_t v_row, int64_t D, int64_t j0, float scale, const fa_scratch & w) {
    const float * q[k_tile];
    const float * mk[k_tile]; // each row's mask entries for these keys
    float * s[k_tile];
    float * acc[k_tile];
    int64_t n[k_tile];
    row_state * rs[k_tile];
    float mx[k_tile];
    int na = 0;
    for (int64_t r = 0; r < nr; ++r) {
        if (j0 >= st[r].n_end) continue;
        const int64_t nk = std::min(k_block, st[r].n_end - j0);
        float * sr = w.s + r * k_block;
        // A packed mask row is read in place (copying it cost 7% of a
        // prompt's attention); a strided one is gathered into sr first.
        if (st[r].mrow == nullptr) {
            mk[na] = k_zero_mask;
        } else if (mask->nb[0] == sizeof(float)) {
            mk[na] = reinterpret_cast<const float *>(st[r].mrow) + j0;
        } else {
            for (int64_t j = 0; j < nk; ++j) sr[j] = read_f32(st[r].mrow + static_cast<size_t>(j0 + j) * mask->nb[0]);
            mk[na] = sr;
        }
        q[na] = w.q + r * D;
        s[na] = sr;
        acc[na] = w.acc + r * D;
        n[na] = nk;
        rs[na] = &st[r];
        ++na;
    }
#ifdef TSR_CPU_AVX2
    const bool vec = D % 8 == 0;
    if (ktb != nullptr) {
        for (int g = 0; g < na; g += k_group) {
            scores_group<K16>(std::min(k_group, na - g), q + g, ktb, D, n + g, scale, mk + g, s + g, mx + g);
        }
    } else if (vec) {
        for (int g = 0; g < na; g += k_group_d) {
            scores_group_d<K16>(std::min(k_group_d, na - g), q + g, kb, k_row, D, n + g, scale, mk + g, s + g, mx + g);
        }
    }
#else
    constexpr bool vec = false;
#endif
    if (!vec) {
        for (int i = 0; i < na; ++i) mx[i] = block_scores_portable<K16>(q[i], kb, k_row, D, n[i], scale, mk[i], s[i], w.row);
    }
    int nl = 0; // rows with a visible key in the block, moved to the front
    for (int i = 0; i < na; ++i) {
        if (mx[i] == k_neg_inf) continue; // every key of the block is masked
        row_state & sr = *rs[i];
        // A NaN score (NaN or Inf in q or K) makes the row NaN from here on
        // rather than be dropped by the maximum, which would treat its keys
        // as masked and give zeros or a wrong mean.
        if (mx[i] > sr.m || mx[i] != mx[i]) {
            const float c = std::exp(sr.m - mx[i]); // 0 on the first visible block (m = -inf)
            for (int64_t d = 0; d < D; ++d) acc[i][d] *= c;
            sr.l *= c;
            sr.m = mx[i];
        }
#ifdef TSR_CPU_AVX2
        sr.l += vec ? block_exp_sum(s[i], n[i], sr.m) : block_exp_sum_portable(s[i], n[i], sr.m);
#else
        sr.l += block_exp_sum_portable(s[i], n[i], sr.m);
#endif
        s[nl] = s[i];
        acc[nl] = acc[i];
        n[nl] = n[i];
        ++nl;
    }
#ifdef TSR_CPU_AVX2
    if (vec) {
        for (int g = 0; g < nl; g += k_group_acc) {
            accumulate_group<V16>(std::min(k_group_acc, nl - g), acc + g, s + g, vb, v_row, D, n + g);
        }
        return;
    }
#endif
    for (int i = 0; i < nl; ++i) block_accumulate_portable<V16>(acc[i], s[i], vb, v_row, D, n[i]);
}

// Query row i and head h of pair p of KV head hk (attend_tile).
struct row_head {
    int64_t i, h;
};
row_head pair_of(const fa_dims & dm, int64_t hk, int64_t p) {
    return {p / dm.group, hk * dm.group + p % dm.group};
}

// The (query row, head) pairs of one KV head hk, numbered p = i group + g
// for row i and head hk group + g: the heads that share hk's keys and
// values next to each other, so one row's heads (same mask row, same
// visible keys) fall in one tile. Pairs p0 .. p0 + np - 1 (np <= k_tile)
// form a tile. Key blocks are the outer loop so a block of K and V
// (k_block rows) is read from memory once and reused from cache by every
// pair of the tile; each pair still sees its blocks in order j0 = 0,
// k_block, ..., so its arithmetic is that of a pair computed alone.
template <bool K16, bool V16>
void attend_tile(const tsr_tensor * dst, const fa_dims & dm, float scale, int64_t hk, int64_t p0, int64_t np,
                 const char * kt, const fa_scratch & w) {
    const tsr_tensor * q = dst->src[0];
    const tsr_tensor * k = dst->src[1];
    const tsr_tensor * v = dst->src[2];
    const tsr_tensor * mask = dst->src[3];
    const int64_t D = dm.D;

    row_state st[k_tile];
    int64_t n_end_max = 0;
    for (int64_t r = 0; r < np; ++r) {
        const auto [i, h] = pair_of(dm, hk, p0 + r);
        const char * qrow = row_ptr(q, i, h, 0);
        float * qf = w.q + r * D;
        if (q->nb[0] == sizeof(float)) {
            std::memcpy(qf, qrow, static_cast<size_t>(D) * sizeof(float));
        } else {
            for (int64_t d = 0; d < D; ++d) qf[d] = read_f32(qrow + static_cast<size_t>(d) * q->nb[0]);
        }
        std::fill(w.acc + r * D, w.acc + (r + 1) * D, 0.0f);
        row_state & sr = st[r];
        sr.mrow = mask != nullptr ? row_ptr(mask, i, h % mask->ne[2], 0) : nullptr;
        if (r > 0 && sr.mrow == st[r - 1].mrow) {
            sr.n_end = st[r - 1].n_end; // the same mask row (another head of row i)
        } else {
            sr.n_end = sr.mrow != nullptr ? visible_end(sr.mrow, mask->nb[0], dm.n_kv) : dm.n_kv;
        }
        sr.m = k_neg_inf;
        sr.l = 0.0f;
        n_end_max = std::max(n_end_max, sr.n_end);
    }

    const char * k0 = row_ptr(k, 0, hk, 0);
    const char * v0 = row_ptr(v, 0, hk, 0);
    const size_t k_row = k->nb[1], v_row = v->nb[1];
    const bool transposed = transposed_scores(dst);
    for (int64_t j0 = 0; j0 < n_end_max; j0 += k_block) {
        const char * ktb = nullptr;
#ifdef TSR_CPU_AVX2
        if (kt != nullptr) {
            ktb = kt + static_cast<size_t>(hk * key_blocks(dm.n_kv) + j0 / k_block) * kt_block_bytes<K16>(D);
        } else if (transposed) {
            transpose_block<K16>(k0 + static_cast<size_t>(j0) * k_row, k_row, std::min(k_block, dm.n_kv - j0),
                                 n_end_max - j0, D, w.kt);
            ktb = w.kt;
        }
#else
        (void)transposed;
#endif
        tile_block<K16, V16>(mask, st, np, ktb, k0 + static_cast<size_t>(j0) * k_row, v0 + static_cast<size_t>(j0) * v_row,
                             k_row, v_row, D, j0, scale, w);
    }

    for (int64_t r = 0; r < np; ++r) {
        const auto [i, h] = pair_of(dm, hk, p0 + r);
        char * out = row_ptr(dst, h, i, 0);
        const float * acc = w.acc + r * D;
        const float inv = st[r].l > 0.0f ? 1.0f / st[r].l : 0.0f; // no visible key: zeros
        for (int64_t d = 0; d < D; ++d) write_f32(out + static_cast<size_t>(d) * dst->nb[0], acc[d] * inv);
    }
}

// Work items: tiles of k_tile pairs of one KV head (attend_tile), dealt
// round-robin. With fewer tiles than 2 nth (decoding: T = 1) the tiles are
// made smaller, down to k_group pairs, so that the threads share the work
// more evenly; how pairs are grouped never changes their results.
template <bool K16, bool V16>
void attend_rows(const compute_params & p, const tsr_tensor * dst, const fa_dims & dm, float scale) {
    const fa_scratch w = carve(p.wdata, dm.D);
    const char * kt = kt_bytes(dst) > 0 ? static_cast<const char *>(p.shared) : nullptr;
    const int64_t pairs = dm.T * dm.group; // per KV head
    const int64_t step = transposed_scores(dst) ? k_group : k_group_d;
    int64_t tile = k_tile;
    while (tile > step && dm.H_kv * ((pairs + tile - 1) / tile) < 2 * p.nth) tile -= step;
    const int64_t tiles = (pairs + tile - 1) / tile;
    for (int64_t item = p.ith; item < tiles * dm.H_kv; item += p.nth) {
        const int64_t hk = item / tiles, p0 = (item % tiles) * tile;
        attend_tile<K16, V16>(dst, dm, scale, hk, p0, std::min(tile, pairs - p0), kt, w);
    }
}

} // namespace

bool flash_attn_ext_supported(const tsr_tensor * node) {
    const tsr_tensor * q = node->src[0];
    const tsr_tensor * k = node->src[1];
    const tsr_tensor * v = node->src[2];
    const tsr_tensor * mask = node->src[3];
    if (node->type != TSR_TYPE_F32 || q->type != TSR_TYPE_F32) return false;
    for (const tsr_tensor * t : {k, v}) {
        if (t->type != TSR_TYPE_F32 && t->type != TSR_TYPE_F16) return false;
        if (t->nb[0] != float_type_size(t->type) || t->ne[3] != 1) return false;
    }
    if (q->ne[3] != 1 || k->ne[0] != q->ne[0] || v->ne[0] != q->ne[0]) return false;
    if (k->ne[1] != v->ne[1] || k->ne[2] != v->ne[2] || q->ne[2] % k->ne[2] != 0) return false;
    if (mask != nullptr) {
        if (mask->type != TSR_TYPE_F32 || mask->ne[0] != k->ne[1] || mask->ne[1] < q->ne[1]) return false;
        if (q->ne[2] % mask->ne[2] != 0 || mask->ne[3] != 1) return false;
    }
    return node->ne[0] == q->ne[0] && node->ne[1] == q->ne[2] && node->ne[2] == q->ne[1] && node->ne[3] == 1;
}

// Query rows and accumulators of one tile, k_block scores and (portable
// path) one widened K row.
size_t flash_attn_ext_work_size(const tsr_tensor * node) {
    return scratch_bytes(node->src[0]->ne[0]);
}

size_t flash_attn_ext_shared_size(const tsr_tensor * node) {
    return kt_bytes(node);
}

bool compute_flash_attn_ext(const compute_params & p, tsr_tensor * dst) {
    const size_t kt = kt_bytes(dst);
    if (kt > 0 && (p.shared == nullptr || p.shared_size < kt)) return false;
    if (p.prepare) { // this thread's part of the transposed keys
#ifdef TSR_CPU_AVX2
        if (kt == 0) return false;
        const tsr_tensor * k = dst->src[1];
        // Decoding sees a prefix of a cache view that can be much longer.
        const int64_t n_vis = visible_keys(dst);
        if (k->type == TSR_TYPE_F16) {
            transpose_keys<true>(p, k, k->ne[0], n_vis, static_cast<char *>(p.shared));
        } else {
            transpose_keys<false>(p, k, k->ne[0], n_vis, static_cast<char *>(p.shared));
        }
        return true;
#else
        return false;
#endif
    }
    float scale;
    std::memcpy(&scale, &dst->op_params[0], sizeof scale);
    const fa_dims dm = dims_of(dst);
    const bool k16 = dst->src[1]->type == TSR_TYPE_F16;
    const bool v16 = dst->src[2]->type == TSR_TYPE_F16;
    if (k16 && v16) {
        attend_rows<true, true>(p, dst, dm, scale);
    } else if (k16) {
        attend_rows<true, false>(p, dst, dm, scale);
    } else if (v16) {
        attend_rows<false, true>(p, dst, dm, scale);
    } else {
        attend_rows<false, false>(p, dst, dm, scale);
    }
    return true;
}

} // namespace tessera::cpu

// backends/cpu/ops/matvec_f.cpp — MUL_MAT with float weights (F32, F16,
// BF16) and few columns (N < k_gemm_min_n): one pass over the weights,
// F16/BF16 widened in registers (F16C / shifts), FMA.
//
// Three weight layouts:
//   repacked (F16/BF16 in the CPU_REPACK buffer, repack.hpp: groups of 16
//     rows, k-major): each group one contiguous stream, 16 rows per
//     vector; per row the GEMM's operations (chains over its K chunks), so
//     a column gets the same bits from both paths (BF16 on AVX512-BF16
//     builds: vdpbf16ps chains over BF16 pairs, bf16_dot.hpp, as the GEMM).
//   row-contiguous (nb[0] = element size; weight matrices, the K view of a
//     KV cache): dst[m, n] is a dot product in 16 lanes, element k in lane
//     k % 16 (FMA); the lanes are summed in a fixed 4-level tree (lane j +
//     lane j + 8, then adjacent pairs twice, then the two halves), four
//     rows together. Four rows at a time share the column loads.
//   m-contiguous (nb[1] = element size; the transposed V view of a KV
//     cache): dst[:, n] = sum_k b[k, n] * a[k, :] accumulated over k for a
//     strip of consecutive m; each element is a sequential FMA chain over k
//     in chunks of k_chain terms, the chunk sums added in order.
// Any other layout is gathered one row at a time into scratch and takes
// the row-contiguous kernel.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/ops/mul_mat_impl.hpp"
#include "backends/cpu/ops/bf16_dot.hpp"
#include "backends/cpu/ops/float_load.hpp"
#include "backends/cpu/ops/repack.hpp"
#include "backends/cpu/ops/simd.hpp"
#include "backends/cpu/ops/tuning.hpp"

namespace tessera::cpu {

#ifdef TSR_CPU_AVX2

namespace {

using namespace float_load;

constexpr int64_t k_chain = 256; // m-contiguous layout: terms per FMA chain
constexpr int64_t k_strip = 64;  // m-contiguous layout: elements per strip (one attention head)
// Software prefetch of plain weight rows (read_ahead): at least this many
// bytes ahead (whole groups of four rows), into L1 while what is read ahead
// and the group being read take at most k_l1_ahead_bytes, else into L2.
constexpr size_t k_min_ahead_bytes = size_t{8} << 10;
constexpr size_t k_l1_ahead_bytes = size_t{16} << 10;

// The weights read ahead while a group of rows is read: `bytes` from `next`
// (a later group), front to back in equal shares of whole lines over the
// kernel's n_steps steps (step() once per step); nothing when bytes = 0.
// (Before: k_prefetch = 4096 bytes ahead within rows of 16 KiB or more,
// else the same place four rows on: on Zen 4, 2 KiB rows read one group
// ahead, about one memory latency, and 8 KiB ones 32 KiB ahead into L1.)
struct read_ahead {
    const char * next = nullptr;
    size_t bytes = 0;
    bool to_l1 = true;
    size_t share = 0;
    // Sets the share for n_steps steps.
    void plan(int64_t n_steps) { share = n_steps <= 0 ? 0 : (bytes / static_cast<size_t>(n_steps) + 127) & ~size_t{63}; }
    void step(int64_t s) const {
        const size_t at = static_cast<size_t>(s) * share;
        for (size_t o = at; o < at + share && o < bytes; o += 64) {
            if (to_l1) {
                _mm_prefetch(next + o, _MM_HINT_T0);
            } else {
                _mm_prefetch(next + o, _MM_HINT_T1);
            }
        }
    }
};
// Repacked float weights: groups per item (4: 64 rows).
constexpr int64_t k_item_groups = 4;
// Groups of at most this many bytes (F16: K <= 1024) are computed one
// after the other, so an item's groups are read as one contiguous stream;
// longer groups are read as k_item_groups streams side by side (four
// independent FMA chains). Short streams that restart every group cost
// more than the single chain's latency: the 135M preset's F16 token
// generation (K = 576, 18 KiB groups), tessera bench -p 0 -n 128, three
// interleaved runs on Zen 4: 1 thread 74-79 -> 86-88 t/s, 2 threads 111-114
// -> 113-115; while 2048 x 2048 and larger (64 KiB groups and up) read
// faster as four streams (BM_mul_mat_repack F16, one column: 4096 x 4096
// 21.7-24.6 GFLOP/s as four streams against 17.1-20.0 as one).
constexpr size_t k_one_stream_bytes = 32 * 1024;

// Lane r = the sum of the 8 lanes of h[r], the four rows reduced together:
// pairs (0+1, 2+3, ...), then pairs of pairs, then the two 128-bit halves.
inline __m128 hsum4x8(const __m256 * h) {
    const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(h[0], h[1]), _mm256_hadd_ps(h[2], h[3]));
    return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

#ifdef TSR_CPU_AVX512
// The first `n` (< 16) weights at p, the other lanes zero; reads only n elements.
template <int32_t T>
inline __m512 load16_partial(const char * p, int n) {
    const auto m = static_cast<__mmask16>((1u << n) - 1);
    if constexpr (T == TSR_TYPE_F32) return _mm512_maskz_loadu_ps(m, p);
    else {
        const __m256i h = _mm256_maskz_loadu_epi16(m, p);
        if constexpr (T == TSR_TYPE_F16) return _mm512_cvtph_ps(h);
        else return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
}

// out[r] = row r . x for four rows of k weights (16 lanes per row);
// `ra`: the weights to read ahead meanwhile (read_ahead).
template <int32_t T>
void dot4(const char * const * w, const float * x, int64_t k, read_ahead ra, float * out) {
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    int64_t i = 0;
    // Two 16-element steps per trip, a share of the read-ahead per trip
    // (the hardware prefetcher alone leaves F16 rows short of bandwidth).
    ra.plan(k / 32);
    for (; i + 32 <= k; i += 32) {
        const __m512 xv = _mm512_loadu_ps(x + i);
        const __m512 xv2 = _mm512_loadu_ps(x + i + 16);
        ra.step(i / 32);
        for (int r = 0; r < 4; ++r) {
            acc[r] = _mm512_fmadd_ps(load16<T>(w[r] + i * esize<T>()), xv, acc[r]);
        }
        for (int r = 0; r < 4; ++r) {
            acc[r] = _mm512_fmadd_ps(load16<T>(w[r] + (i + 16) * esize<T>()), xv2, acc[r]);
        }
    }
    for (; i + 16 <= k; i += 16) {
        const __m512 xv = _mm512_loadu_ps(x + i);
        for (int r = 0; r < 4; ++r) acc[r] = _mm512_fmadd_ps(load16<T>(w[r] + i * esize<T>()), xv, acc[r]);
    }
    if (i < k) {
        const int n = static_cast<int>(k - i);
        const __m512 xv = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), x + i);
        for (int r = 0; r < 4; ++r) acc[r] = _mm512_fmadd_ps(load16_partial<T>(w[r] + i * esize<T>(), n), xv, acc[r]);
    }
    __m256 h[4];
    for (int r = 0; r < 4; ++r) h[r] = _mm256_add_ps(_mm512_castps512_ps256(acc[r]), _mm512_extractf32x8_ps(acc[r], 1));
    _mm_storeu_ps(out, hsum4x8(h));
}
#else
// out[r] = row r . x for four rows of k weights (16 lanes per row as two
// 8-lane halves); `ra` as above.
template <int32_t T>
void dot4(const char * const * w, const float * x, int64_t k, read_ahead ra, float * out) {
    __m256 lo[4], hi[4];
    for (int r = 0; r < 4; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
    int64_t i = 0;
    ra.plan(k / 16);
    for (; i + 16 <= k; i += 16) {
        const __m256 x0 = _mm256_loadu_ps(x + i);
        const __m256 x1 = _mm256_loadu_ps(x + i + 8);
        ra.step(i / 16);
        for (int r = 0; r < 4; ++r) {
            lo[r] = _mm256_fmadd_ps(load8<T>(w[r] + i * esize<T>()), x0, lo[r]);
            hi[r] = _mm256_fmadd_ps(load8<T>(w[r] + (i + 8) * esize<T>()), x1, hi[r]);
        }
    }
    if (i < k) { // the tail through zero-padded copies: lane j < k - i gets w * x
        const int n = static_cast<int>(k - i);
        alignas(32) float xt[16] = {};
        std::copy(x + i, x + k, xt);
        const __m256 x0 = _mm256_load_ps(xt), x1 = _mm256_load_ps(xt + 8);
        for (int r = 0; r < 4; ++r) {
            alignas(32) float wt[16] = {};
            for (int j = 0; j < n; ++j) wt[j] = load1<T>(w[r] + (i + j) * esize<T>());
            lo[r] = _mm256_fmadd_ps(_mm256_load_ps(wt), x0, lo[r]);
            hi[r] = _mm256_fmadd_ps(_mm256_load_ps(wt + 8), x1, hi[r]);
        }
    }
    __m256 h[4];
    for (int r = 0; r < 4; ++r) h[r] = _mm256_add_ps(lo[r], hi[r]);
    _mm_storeu_ps(out, hsum4x8(h));
}
#endif

#ifdef TSR_CPU_BF16DOT
// BF16 rows on AVX512-BF16 builds (bf16_dot.hpp): out[r] = row r . x for
// four rows of k BF16 weights, x given as its pairs xp. A row's 32
// consecutive weights are 16 pairs as they lie, one vdpbf16ps each (the
// element past an odd k read as 0); the 16 lanes reduced as dot4's.
void dot4_pairs(const char * const * w, const uint32_t * xp, int64_t k, read_ahead ra, float * out) {
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    int64_t i = 0;
    ra.plan(k / 32);
    for (; i + 32 <= k; i += 32) {
        const __m512i xv = _mm512_loadu_si512(xp + i / 2);
        ra.step(i / 32);
        for (int r = 0; r < 4; ++r) {
            acc[r] = bf16_dot::dot(acc[r], _mm512_loadu_si512(w[r] + i * 2), xv);
        }
    }
    if (i < k) {
        const int n = static_cast<int>(k - i), pairs = (n + 1) / 2;
        const __m512i xv = _mm512_maskz_loadu_epi32(static_cast<__mmask16>((1u << pairs) - 1), xp + i / 2);
        const auto m = static_cast<__mmask32>((uint64_t{1} << n) - 1);
        for (int r = 0; r < 4; ++r) acc[r] = bf16_dot::dot(acc[r], _mm512_maskz_loadu_epi16(m, w[r] + i * 2), xv);
    }
    __m256 h[4];
    for (int r = 0; r < 4; ++r) h[r] = _mm256_add_ps(_mm512_castps512_ps256(acc[r]), _mm512_extractf32x8_ps(acc[r], 1));
    _mm_storeu_ps(out, hsum4x8(h));
}
#endif

// One batch's columns (gathered to xbuf when strided), destination columns
// and weight matrix.
struct batch_view {
    const float * x[k_gemm_min_n] = {};
    const uint32_t * xp[k_gemm_min_n] = {}; // x's BF16 pairs, after load_pairs
    float * y[k_gemm_min_n] = {};
    const char * a = nullptr;
    void load(const mm_dims & d, bool in_place, int64_t batch, float * xbuf) {
        for (int64_t n = 0; n < d.N; ++n) {
            x[n] = b_column(d, in_place, batch, n, xbuf + n * d.K);
            y[n] = dst_column(d, batch, n);
        }
        a = a_matrix(d, batch);
    }
#ifdef TSR_CPU_BF16DOT
    // The loaded columns' BF16 pairs (bf16_dot::to_pairs) into xpairs,
    // (K + 1) / 2 words a column, for the BF16 kernels.
    void load_pairs(const mm_dims & d, uint32_t * xpairs) {
        for (int64_t n = 0; n < d.N; ++n) {
            uint32_t * out = xpairs + n * ((d.K + 1) / 2);
            bf16_dot::to_pairs(x[n], d.K, out);
            xp[n] = out;
        }
    }
#endif
};

// Row-contiguous weights (or rows gathered to F32): items of 4 rows, walked
// in order without divisions per item (they cost more than a short row's
// dot product, e.g. a K row of an attention head). BF16 on AVX512-BF16
// builds: dot4_pairs over the columns' pairs (xpairs), strided rows
// gathered as BF16.
template <int32_t T>
void rows_path(const compute_params & p, const mm_dims & d, bool gather, float * xbuf, float * rowbuf,
               [[maybe_unused]] uint32_t * xpairs) {
#ifdef TSR_CPU_BF16DOT
    constexpr bool pairs = T == TSR_TYPE_BF16;
#endif
    const bool in_place = b_in_place(d);
    const int64_t n_groups = (d.M + 3) / 4;
    const int64_t n_items = d.n_batch * n_groups;
    work_queue queue(p, n_items, chunk_for_bytes(4 * esize<T>() * static_cast<size_t>(d.K), n_items, p.nth));
    const size_t nb1 = d.a->nb[1];
    // Software prefetch (read_ahead) of rows that follow each other (weight
    // matrices), at least k_min_ahead_bytes on; not of the short, strided
    // rows of a KV cache view.
    const size_t row_bytes = esize<T>() * static_cast<size_t>(d.K);
    const size_t group_bytes = 4 * row_bytes;
    const size_t rows_ahead = 4 * std::max<size_t>(1, (k_min_ahead_bytes + group_bytes - 1) / group_bytes);
    const bool contiguous_rows = nb1 == row_bytes;
    const bool ahead_to_l1 = (rows_ahead + 4) * row_bytes <= k_l1_ahead_bytes;
    int64_t batch = 0, m0 = 0;
    batch_view bv;
    bool new_batch = false;
    for (item_range items{}; queue.next(items);) {
        batch = items.begin / n_groups;
        m0 = (items.begin % n_groups) * 4;
        new_batch = true;
        for (int64_t it = items.begin; it < items.end; ++it) {
            if (new_batch) {
                bv.load(d, in_place, batch, xbuf);
#ifdef TSR_CPU_BF16DOT
                if constexpr (pairs) bv.load_pairs(d, xpairs);
#endif
                new_batch = false;
            }
            const char * w[4];
            for (int r = 0; r < 4; ++r) {
                const int64_t m = std::min(m0 + r, d.M - 1); // short last group: repeat the last row
                w[r] = bv.a + static_cast<size_t>(m) * nb1;
            }
            const bool full = m0 + 4 <= d.M;
            read_ahead ra;
            if (contiguous_rows) {
                ra.next = bv.a + static_cast<size_t>(m0 + static_cast<int64_t>(rows_ahead)) * nb1;
                ra.bytes = group_bytes;
                ra.to_l1 = ahead_to_l1;
            }
            alignas(16) float out[4];
            for (int64_t n = 0; n < d.N; ++n) {
#ifdef TSR_CPU_BF16DOT
                if constexpr (pairs) {
                    const uint32_t * xp = bv.xp[n];
                    if (gather) { // strided rows: one row at a time through rowbuf (BF16 bits)
                        auto * rb = reinterpret_cast<char *>(rowbuf);
                        for (int r = 0; r < 4 && m0 + r < d.M; ++r) {
                            for (int64_t i = 0; i < d.K; ++i) std::memcpy(rb + 2 * i, w[r] + static_cast<size_t>(i) * d.a->nb[0], 2);
                            const char * wr[4] = {rb, rb, rb, rb};
                            float o[4];
                            dot4_pairs(wr, xp, d.K, {}, o);
                            out[r] = o[0];
                        }
                    } else {
                        dot4_pairs(w, xp, d.K, ra, out);
                    }
                } else
#endif
                if (gather) { // strided rows: one row at a time through rowbuf (F32)
                    for (int r = 0; r < 4 && m0 + r < d.M; ++r) {
                        for (int64_t i = 0; i < d.K; ++i) {
                            rowbuf[i] = load1<T>(w[r] + static_cast<size_t>(i) * d.a->nb[0]);
                        }
                        const char * wr[4] = {reinterpret_cast<const char *>(rowbuf), reinterpret_cast<const char *>(rowbuf),
                                              reinterpret_cast<const char *>(rowbuf), reinterpret_cast<const char *>(rowbuf)};
                        float o[4];
                        dot4<TSR_TYPE_F32>(wr, bv.x[n], d.K, {}, o);
                        out[r] = o[0];
                    }
                } else {
                    dot4<T>(w, bv.x[n], d.K, ra, out);
                }
                if (full) {
                    _mm_storeu_ps(bv.y[n] + m0, _mm_load_ps(out));
                } else {
                    for (int r = 0; m0 + r < d.M; ++r) bv.y[n][m0 + r] = out[r];
                }
            }
            m0 += 4;
            if (m0 >= d.M) {
                m0 = 0;
                ++batch;
                new_batch = true;
            }
        }
    }
}

// A full strip of k_strip elements: the same operations as strip() below,
// in whole vectors (512-bit with AVX-512).
template <int32_t T>
void full_strip(const char * a, size_t nb0, const float * x, int64_t K, float * y) {
#ifdef TSR_CPU_AVX512
    constexpr int V = k_strip / 16;
    __m512 total[V];
    for (int v = 0; v < V; ++v) total[v] = _mm512_setzero_ps();
    for (int64_t k0 = 0; k0 < K; k0 += k_chain) {
        const int64_t k1 = std::min(K, k0 + k_chain);
        __m512 acc[V];
        for (int v = 0; v < V; ++v) acc[v] = _mm512_setzero_ps();
        for (int64_t k = k0; k < k1; ++k) {
            const char * row = a + static_cast<size_t>(k) * nb0;
            const __m512 xv = _mm512_set1_ps(x[k]);
            for (int v = 0; v < V; ++v) acc[v] = _mm512_fmadd_ps(load16<T>(row + v * 16 * esize<T>()), xv, acc[v]);
        }
        for (int v = 0; v < V; ++v) total[v] = _mm512_add_ps(total[v], acc[v]);
    }
    for (int v = 0; v < V; ++v) _mm512_storeu_ps(y + v * 16, total[v]);
#else
    constexpr int V = k_strip / 8;
    __m256 total[V];
    for (int v = 0; v < V; ++v) total[v] = _mm256_setzero_ps();
    for (int64_t k0 = 0; k0 < K; k0 += k_chain) {
        const int64_t k1 = std::min(K, k0 + k_chain);
        __m256 acc[V];
        for (int v = 0; v < V; ++v) acc[v] = _mm256_setzero_ps();
        for (int64_t k = k0; k < k1; ++k) {
            const char * row = a + static_cast<size_t>(k) * nb0;
            const __m256 xv = _mm256_set1_ps(x[k]);
            for (int v = 0; v < V; ++v) acc[v] = _mm256_fmadd_ps(load8<T>(row + v * 8 * esize<T>()), xv, acc[v]);
        }
        for (int v = 0; v < V; ++v) total[v] = _mm256_add_ps(total[v], acc[v]);
    }
    for (int v = 0; v < V; ++v) _mm256_storeu_ps(y + v * 8, total[v]);
#endif
}

template <int32_t T>
void strip(const char * a, size_t nb0, int64_t m0, int64_t len, const float * x, int64_t K, float * y) {
    if (len == k_strip) {
        full_strip<T>(a + static_cast<size_t>(m0) * esize<T>(), nb0, x, K, y + m0);
        return;
    }
    constexpr int V = k_strip / 8;
    const int64_t nv = len / 8; // full vectors in the strip
    __m256 total[V];
    for (int v = 0; v < V; ++v) total[v] = _mm256_setzero_ps();
    float total_s[8] = {};
    const int64_t tail0 = nv * 8;
    for (int64_t k0 = 0; k0 < K; k0 += k_chain) {
        const int64_t k1 = std::min(K, k0 + k_chain);
        __m256 acc[V];
        for (int v = 0; v < V; ++v) acc[v] = _mm256_setzero_ps();
        float acc_s[8] = {};
        for (int64_t k = k0; k < k1; ++k) {
            const char * row = a + static_cast<size_t>(k) * nb0 + static_cast<size_t>(m0) * esize<T>();
            const __m256 xv = _mm256_set1_ps(x[k]);
            for (int v = 0; v < V; ++v) {
                if (v < nv) acc[v] = _mm256_fmadd_ps(load8<T>(row + v * 8 * esize<T>()), xv, acc[v]);
            }
            for (int64_t j = tail0; j < len; ++j) acc_s[j - tail0] = std::fma(load1<T>(row + j * esize<T>()), x[k], acc_s[j - tail0]);
        }
        for (int v = 0; v < V; ++v) total[v] = _mm256_add_ps(total[v], acc[v]);
        for (int64_t j = tail0; j < len; ++j) total_s[j - tail0] += acc_s[j - tail0];
    }
    for (int v = 0; v < V; ++v) {
        if (v < nv) _mm256_storeu_ps(y + m0 + v * 8, total[v]);
    }
    for (int64_t j = tail0; j < len; ++j) y[m0 + j] = total_s[j - tail0];
}

template <int32_t T>
void strips_path(const compute_params & p, const mm_dims & d, float * xbuf) {
    const bool in_place = b_in_place(d);
    const int64_t n_strips = (d.M + k_strip - 1) / k_strip;
    const int64_t n_items = d.n_batch * n_strips;
    work_queue queue(p, n_items, chunk_for_bytes(k_strip * esize<T>() * static_cast<size_t>(d.K), n_items, p.nth));
    int64_t batch = 0, m0 = 0;
    batch_view bv;
    bool new_batch = false;
    for (item_range items{}; queue.next(items);) {
        batch = items.begin / n_strips;
        m0 = (items.begin % n_strips) * k_strip;
        new_batch = true;
        for (int64_t it = items.begin; it < items.end; ++it) {
            if (new_batch) {
                bv.load(d, in_place, batch, xbuf);
                new_batch = false;
            }
            for (int64_t n = 0; n < d.N; ++n) {
                strip<T>(bv.a, d.a->nb[0], m0, std::min(k_strip, d.M - m0), bv.x[n], d.K, bv.y[n]);
            }
            m0 += k_strip;
            if (m0 >= d.M) {
                m0 = 0;
                ++batch;
                new_batch = true;
            }
        }
    }
}

// Repacked float weights (repack.hpp): NG consecutive groups of 16 rows,
// group g's stream at g0 + g group_bytes, step k (16 weights) at k * 16
// elements. y[16 g + r] = row r of group g . x, with the GEMM's operations
// (gemm_f.cpp): per K chunk of k_gemm_f_kc a sequential FMA chain from
// zero, the chunk sums added to the first in order. P: each stream is
// prefetched `pf` bytes ahead (into L1 or L2), a line per 64 bytes of steps (tuning.hpp:
// on Intel; on Zen 4 the hardware prefetcher alone read faster, BM_mul_mat_repack
// F16 4096 x 4096, one column, GFLOP/s with prefetch 2048 bytes ahead ->
// none: AVX-512 1 thread 17.8 -> 24.4, 2 threads 27.8 -> 32.0; the AVX2
// build 18.0 -> 22.2 and 26.5 -> 29.7).
template <int32_t T, int NG, stream_pf P>
void groups(const char * g0, size_t group_bytes, const float * x, int64_t K, float * y, [[maybe_unused]] size_t pf) {
    constexpr int64_t G = k_repack_float_rows;
    constexpr size_t step = G * esize<T>();
    constexpr int64_t steps_per_line = 64 / static_cast<int64_t>(step);
    const char * g[NG];
    for (int i = 0; i < NG; ++i) g[i] = g0 + static_cast<size_t>(i) * group_bytes;
#ifdef TSR_CPU_AVX512
    __m512 total[NG], acc[NG];
    for (int64_t k0 = 0; k0 < K; k0 += k_gemm_f_kc) {
        const int64_t k1 = std::min(K, k0 + k_gemm_f_kc);
        for (int i = 0; i < NG; ++i) acc[i] = _mm512_setzero_ps();
        for (int64_t k = k0; k < k1; ++k) {
            const __m512 xv = _mm512_set1_ps(x[k]);
            for (int i = 0; i < NG; ++i) {
                const char * w = g[i] + static_cast<size_t>(k) * step;
                if constexpr (P != stream_pf::none) {
                    if (k % steps_per_line == 0) prefetch_line<P>(w + pf);
                }
                acc[i] = _mm512_fmadd_ps(load16<T>(w), xv, acc[i]);
            }
        }
        for (int i = 0; i < NG; ++i) total[i] = k0 == 0 ? acc[i] : _mm512_add_ps(total[i], acc[i]);
    }
    for (int i = 0; i < NG; ++i) _mm512_storeu_ps(y + G * i, total[i]);
#else
    __m256 total[NG][2], acc[NG][2];
    for (int64_t k0 = 0; k0 < K; k0 += k_gemm_f_kc) {
        const int64_t k1 = std::min(K, k0 + k_gemm_f_kc);
        for (int i = 0; i < NG; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
        for (int64_t k = k0; k < k1; ++k) {
            const __m256 xv = _mm256_set1_ps(x[k]);
            for (int i = 0; i < NG; ++i) {
                const char * w = g[i] + static_cast<size_t>(k) * step;
                if constexpr (P != stream_pf::none) {
                    if (k % steps_per_line == 0) prefetch_line<P>(w + pf);
                }
                acc[i][0] = _mm256_fmadd_ps(load8<T>(w), xv, acc[i][0]);
                acc[i][1] = _mm256_fmadd_ps(load8<T>(w + 8 * esize<T>()), xv, acc[i][1]);
            }
        }
        for (int i = 0; i < NG; ++i) {
            for (int h = 0; h < 2; ++h) total[i][h] = k0 == 0 ? acc[i][h] : _mm256_add_ps(total[i][h], acc[i][h]);
        }
    }
    for (int i = 0; i < NG; ++i) {
        _mm256_storeu_ps(y + G * i, total[i][0]);
        _mm256_storeu_ps(y + G * i + 8, total[i][1]);
    }
#endif
}

#ifdef TSR_CPU_BF16DOT
// groups<TSR_TYPE_BF16, NG, P> on AVX512-BF16 builds: the GEMM's
// operations there (gemm_f.cpp run_bf16): per K chunk a vdpbf16ps chain
// from zero over the pairs of two steps (bf16_dot::group_pairs) and the
// column's pairs xp (bf16_dot::to_pairs), the chunk sums added in order.
template <int NG, stream_pf P>
void groups_pairs(const char * g0, size_t group_bytes, const uint32_t * xp, int64_t K, float * y, [[maybe_unused]] size_t pf) {
    constexpr int64_t G = k_repack_float_rows;
    constexpr size_t step = G * 2;
    const char * g[NG];
    for (int i = 0; i < NG; ++i) g[i] = g0 + static_cast<size_t>(i) * group_bytes;
    __m512 total[NG], acc[NG];
    for (int64_t k0 = 0; k0 < K; k0 += k_gemm_f_kc) {
        const int64_t k1 = std::min(K, k0 + k_gemm_f_kc);
        for (int i = 0; i < NG; ++i) acc[i] = _mm512_setzero_ps();
        for (int64_t k = k0; k < k1; k += 2) {
            const __m512i xv = _mm512_set1_epi32(static_cast<int>(xp[k / 2]));
            for (int i = 0; i < NG; ++i) {
                const char * w = g[i] + static_cast<size_t>(k) * step;
                if constexpr (P != stream_pf::none) {
                    if (k % 2 == 0) prefetch_line<P>(w + pf); // a line per two steps
                }
                acc[i] = bf16_dot::dot(acc[i], bf16_dot::group_pairs(w, k + 1 < k1), xv);
            }
        }
        for (int i = 0; i < NG; ++i) total[i] = k0 == 0 ? acc[i] : _mm512_add_ps(total[i], acc[i]);
    }
    for (int i = 0; i < NG; ++i) _mm512_storeu_ps(y + G * i, total[i]);
}
#endif

// groups<T, ng, P> for ng in 1..k_item_groups, or groups<T, 1, P> ng
// times in a row for groups of at most k_one_stream_bytes (the same
// operations per row either way).
// (BF16 on AVX512-BF16 builds: groups_pairs over the column's pairs xp.)
template <int32_t T, stream_pf P>
void groups_of(int64_t ng, const char * w, size_t group_bytes, const float * x, [[maybe_unused]] const uint32_t * xp,
               int64_t K, float * y, size_t pf) {
    static_assert(k_item_groups == 4, "one case per group count");
    auto run_groups = [&]<int NG>(const char * wg, float * yg) {
#ifdef TSR_CPU_BF16DOT
        if constexpr (T == TSR_TYPE_BF16) return groups_pairs<NG, P>(wg, group_bytes, xp, K, yg, pf);
#endif
        groups<T, NG, P>(wg, group_bytes, x, K, yg, pf);
    };
    if (group_bytes <= k_one_stream_bytes) {
        for (int64_t i = 0; i < ng; ++i) {
            run_groups.template operator()<1>(w + static_cast<size_t>(i) * group_bytes, y + i * k_repack_float_rows);
        }
        return;
    }
    switch (ng) {
    case 1: run_groups.template operator()<1>(w, y); break;
    case 2: run_groups.template operator()<2>(w, y); break;
    case 3: run_groups.template operator()<3>(w, y); break;
    default: run_groups.template operator()<4>(w, y); break;
    }
}

// Repacked float weights: items of up to k_item_groups groups of 16 rows.
// xpairs: scratch for the columns' BF16 pairs (BF16 on AVX512-BF16
// builds), (K + 1) / 2 words a column.
template <int32_t T>
void groups_path(const compute_params & p, const mm_dims & d, float * xbuf, [[maybe_unused]] uint32_t * xpairs) {
    constexpr int64_t G = k_repack_float_rows;
    const bool in_place = b_in_place(d);
    const int64_t n_groups = d.M / G; // repack_eligible: M is a multiple of G
    const int64_t per_batch = (n_groups + k_item_groups - 1) / k_item_groups;
    const int64_t n_items = d.n_batch * per_batch;
    const size_t group_bytes = static_cast<size_t>(d.K) * G * esize<T>();
    work_queue queue(p, n_items, chunk_for_bytes(k_item_groups * group_bytes, n_items, p.nth));
    batch_view bv;
    int64_t loaded = -1;
    const size_t pf = tuning().stream_prefetch;
    // Into L1 even where quantized streams go to L2 (stream_prefetch_l2):
    // for F16 weights L2 measured 1-1.5% slower (tuning.cpp).
    const stream_pf kind = stream_pf_of(tuning()) == stream_pf::none ? stream_pf::none : stream_pf::l1;
    for (item_range items{}; queue.next(items);) {
        for (int64_t it = items.begin; it < items.end; ++it) {
            const int64_t batch = it / per_batch, g0 = it % per_batch * k_item_groups;
            if (batch != loaded) {
                bv.load(d, in_place, batch, xbuf);
#ifdef TSR_CPU_BF16DOT
                if constexpr (T == TSR_TYPE_BF16) bv.load_pairs(d, xpairs);
#endif
                loaded = batch;
            }
            const int64_t ng = std::min(k_item_groups, n_groups - g0);
            const char * w = bv.a + static_cast<size_t>(g0) * group_bytes;
            for (int64_t n = 0; n < d.N; ++n) {
                float * y = bv.y[n] + g0 * G;
                with_stream_pf(kind, [&](auto k) {
                    groups_of<T, decltype(k)::value>(ng, w, group_bytes, bv.x[n], bv.xp[n], d.K, y, pf);
                });
            }
        }
    }
}

template <int32_t T>
void run(const compute_params & p, const mm_dims & d) {
    char * base = static_cast<char *>(p.wdata);
    auto * xbuf = reinterpret_cast<float *>(base);
    auto * rowbuf = reinterpret_cast<float *>(base + align64(static_cast<size_t>(k_gemm_min_n * d.K) * sizeof(float)));
    auto * xpairs = reinterpret_cast<uint32_t *>(reinterpret_cast<char *>(rowbuf) + align64(static_cast<size_t>(d.K) * sizeof(float)));
    const size_t es = esize<T>();
    const bool aligned = reinterpret_cast<uintptr_t>(d.a->data) % es == 0 &&
                         (d.a->nb[0] | d.a->nb[1] | d.a->nb[2] | d.a->nb[3]) % es == 0;
    if (is_repacked(d.a)) {
        if constexpr (T != TSR_TYPE_F32) groups_path<T>(p, d, xbuf, xpairs);
    } else if (aligned && d.a->nb[0] == es) {
        rows_path<T>(p, d, false, xbuf, rowbuf, xpairs);
    } else if (aligned && d.a->nb[1] == es) {
        strips_path<T>(p, d, xbuf);
    } else {
        rows_path<T>(p, d, true, xbuf, rowbuf, xpairs);
    }
}

} // namespace

// Columns (F32), a gathered row, the columns' BF16 pairs (batch_view::load_pairs).
size_t matvec_f_work_size(const mm_dims & d) {
    return align64(static_cast<size_t>(k_gemm_min_n * d.K) * sizeof(float)) +
           align64(static_cast<size_t>(d.K) * sizeof(float)) +
           align64(static_cast<size_t>(k_gemm_min_n * ((d.K + 1) / 2)) * sizeof(uint32_t));
}

bool matvec_f(const compute_params & p, const mm_dims & d) {
    // Repacked weights are F16/BF16 (repack_group_rows): refuse any other
    // repacked type rather than read its layout as plain rows.
    if (is_repacked(d.a) && d.a->type == TSR_TYPE_F32) return false;
    switch (d.a->type) {
    case TSR_TYPE_F32: run<TSR_TYPE_F32>(p, d); return true;
    case TSR_TYPE_F16: run<TSR_TYPE_F16>(p, d); return true;
    case TSR_TYPE_BF16: run<TSR_TYPE_BF16>(p, d); return true;
    default: return false;
    }
}

#else // portable build: the generic kernel is used instead

size_t matvec_f_work_size(const mm_dims &) { return 0; }
bool matvec_f(const compute_params &, const mm_dims &) { return false; }

#endif

} // namespace tessera::cpu

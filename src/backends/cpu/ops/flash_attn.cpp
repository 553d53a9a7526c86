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
// The block kernels (scores, weights, accumulation; see there for the two
// score kernels) are in flash_attn_kernels.hpp; this file is the driver:
// tiling, the threads' shares, the row groups handed to the kernels, each
// row's online soft-max state and the op's entry points.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "backends/cpu/ops/flash_attn_kernels.hpp"
#include "backends/cpu/ops/ops.hpp"
#include "backends/cpu/ops/tensor_access.hpp"

namespace tessera::cpu {

namespace {

using namespace flash_attn; // the block kernels, k_block, k_neg_inf

constexpr int64_t k_tile = 12; // (query row, head) pairs of one KV head computed together
#ifdef TSR_CPU_AVX512
// Query rows whose scores and accumulations share each load of K and V
// (32 vector registers): transposed scores 6 rows x 4 key vectors,
// dimension-lane scores 3 rows x 8 keys, their transposed form 3 rows x 2
// key vectors x 2 unit classes (BM_attention 9 heads over 3, T = n_kv =
// 512, F16, medians of 5 alternated runs on Zen 5: 1 thread 5.12 -> 3.08
// ms with it, 2 threads 2.59 -> 2.13; 2 or 4 rows measured no better),
// accumulation 3 rows x 4 vectors.
constexpr int k_group = 6;
constexpr int k_group_d = 3;
constexpr int k_group_dt = 3;
constexpr int k_group_acc = 3;
#else
// 16 registers: transposed scores 2 rows x 4 key vectors, dimension-lane
// scores one row (8 keys), transposed 2 rows x 2 key vectors (haswell
// build, as above: 7.97 -> 6.89 ms, 4.05 -> 3.51), accumulation 2 rows
// (2 x 4 vectors; the same bits as one at a time).
constexpr int k_group = 2;
constexpr int k_group_d = 1;
constexpr int k_group_dt = 2;
constexpr int k_group_acc = 2;
#endif
// Heads a KV head from which the scores read transposed keys with
// scores_rows' order of sums (transposed_scores; with fewer, scores_rows_d's
// order, which prompts read transposed: transposed_d_scores). The
// transposition costs about as much per key as the dimension-lane
// kernel's folding costs per key and row, so decoding gains only with many
// rows a key: bench_ops on Zen 4, one thread, F16 cache: 32 heads over 4
// (BM_attn_decode) decode the same either way, 9 over 3 (BM_attention T =
// 1, 2048 keys) 53.9 -> 41.3 GFLOP/s, while prompts gain in both (T = n_kv
// = 512, 9 over 3: 43 -> 55).
constexpr int64_t k_min_group_t = 6;
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

// Whether a prompt's scores with dimension-lane bits (fewer heads a KV
// head than transposed_scores takes) read transposed keys (scores_rows_dt,
// the same bits as scores_rows_d): more than one tile reads each KV head,
// so the keys are transposed once for all of them. Vector builds, D %
// 8 == 0.
#ifdef TSR_CPU_AVX2
bool transposed_d_scores(const tsr_tensor * node) {
    const fa_dims dm = dims_of(node);
    return dm.D % 8 == 0 && dm.group < k_min_group_t && dm.T * dm.group > k_tile;
}
#endif

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
    if (!(transposed_scores(node) || transposed_d_scores(node)) || dm.T * dm.group <= k_tile) return 0;
    size_t bytes = 0;
    const auto blocks = static_cast<size_t>(k->ne[2]) * static_cast<size_t>((k->ne[1] + k_block - 1) / k_block);
    const size_t per_block = kt_block_bytes(D); // (F32 units whatever K's type)
    if (__builtin_mul_overflow(blocks, per_block, &bytes)) throw std::length_error("flash_attn_ext: transposed keys exceed the address space");
    return bytes;
#else
    (void)node;
    return 0;
#endif
}

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

// The same from the block's transposed keys kt (scores_rows_dt, the bits
// of scores_group_d; at most k_group_dt rows).
template <bool F16>
void scores_group_dt(int count, const float * const * q, const char * kt, int64_t D, const int64_t * n, float scale,
                     const float * const * mk, float * const * s, float * mx) {
    with_group<k_group_dt>(count, [&](auto g) {
#ifdef TSR_CPU_AVX512
        if (D == 64) return scores_rows_dt<lanes16, F16, g(), 4>(q, kt, D, n, scale, mk, s, mx);
        if (D == 128) return scores_rows_dt<lanes16, F16, g(), 8>(q, kt, D, n, scale, mk, s, mx);
        if (D % 16 == 0) return scores_rows_dt<lanes16, F16, g()>(q, kt, D, n, scale, mk, s, mx);
#endif
        if (D == 64) return scores_rows_dt<lanes8, F16, g(), 8>(q, kt, D, n, scale, mk, s, mx);
        scores_rows_dt<lanes8, F16, g()>(q, kt, D, n, scale, mk, s, mx);
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
void tile_block(const tsr_tensor * mask, row_state * st, int64_t nr, const char * ktb, bool d_bits, const char * kb,
                const char * vb, size_t k_row, size_t v_row, int64_t D, int64_t j0, float scale, const fa_scratch & w) {
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
    if (ktb != nullptr && d_bits) {
        for (int g = 0; g < na; g += k_group_dt) {
            scores_group_dt<false>(std::min(k_group_dt, na - g), q + g, ktb, D, n + g, scale, mk + g, s + g, mx + g);
        }
    } else if (ktb != nullptr) {
        for (int g = 0; g < na; g += k_group) {
            scores_group<false>(std::min(k_group, na - g), q + g, ktb, D, n + g, scale, mk + g, s + g, mx + g);
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
            ktb = kt + static_cast<size_t>(hk * key_blocks(dm.n_kv) + j0 / k_block) * kt_block_bytes(D);
        } else if (transposed) {
            transpose_block<K16>(k0 + static_cast<size_t>(j0) * k_row, k_row, std::min(k_block, dm.n_kv - j0),
                                 n_end_max - j0, D, w.kt);
            ktb = w.kt;
        }
#else
        (void)transposed;
#endif
        tile_block<K16, V16>(mask, st, np, ktb, !transposed, k0 + static_cast<size_t>(j0) * k_row,
                             v0 + static_cast<size_t>(j0) * v_row, k_row, v_row, D, j0, scale, w);
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
    if (dm.T == 1) {
        // Decoding: every pair sees the same keys, so each thread takes an
        // equal run of the H pairs in KV-head order, cut at KV heads and
        // after k_tile pairs (9 heads over 3 on two threads: 4 and 5
        // pairs, where whole KV heads would give 6 and 3).
        const int64_t total = dm.H_kv * pairs;
        const int64_t lo = total * p.ith / p.nth, hi = total * (p.ith + 1) / p.nth;
        for (int64_t a = lo; a < hi;) {
            const int64_t hk = a / pairs, p0 = a % pairs;
            const int64_t np = std::min({k_tile, pairs - p0, hi - a});
            attend_tile<K16, V16>(dst, dm, scale, hk, p0, np, kt, w);
            a += np;
        }
        return;
    }
    const int64_t step = transposed_scores(dst) ? k_group : kt != nullptr ? k_group_dt : k_group_d;
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

int64_t flash_attn_ext_visible_keys(const tsr_tensor * node) {
    return visible_keys(node);
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

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
// Threads: tiles of up to k_tile consecutive query rows of one head are
// dealt round-robin (tile r to thread r % nth), which balances causal rows
// of different lengths; within a tile the key blocks are the outer loop, so
// each block of K/V is reused from cache by all the tile's rows. Every
// (row, head) pair is computed with the same fixed order of operations
// whatever the tiling and thread count, so the result does not depend on
// the thread count.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/ops/ops.hpp"
#include "backends/cpu/ops/tensor_access.hpp"
#include "backends/cpu/ops/vec_dot.hpp"
#include "backends/cpu/ops/vec_math.hpp"

namespace tessera::cpu {

namespace {

constexpr int64_t k_block = 64; // keys per online soft-max step
constexpr int64_t k_tile = 8;   // query rows of one head computed together
constexpr float k_neg_inf = -std::numeric_limits<float>::infinity();

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
    float * s;   // [k_block] scores, then weights exp(s - m)
    float * row; // [D] one K row widened to F32 (portable path only)
};

size_t tile_bytes(int64_t D) {
    return align64(static_cast<size_t>(k_tile * D) * sizeof(float));
}

size_t scratch_bytes(int64_t D) {
    return 2 * tile_bytes(D) + align64(k_block * sizeof(float)) + align64(static_cast<size_t>(D) * sizeof(float));
}

fa_scratch carve(void * wdata, int64_t D) {
    auto * base = static_cast<char *>(wdata);
    const size_t tile = tile_bytes(D);
    fa_scratch s{};
    s.q = reinterpret_cast<float *>(base);
    s.acc = reinterpret_cast<float *>(base + tile);
    s.s = reinterpret_cast<float *>(base + 2 * tile);
    s.row = reinterpret_cast<float *>(base + 2 * tile + align64(k_block * sizeof(float)));
    return s;
}

#ifdef TSR_CPU_AVX2

template <bool F16>
inline __m256 load8(const char * p) {
    if constexpr (F16) {
        return simd::load_f16x8(p);
    } else {
        return _mm256_loadu_ps(reinterpret_cast<const float *>(p));
    }
}

// s[j] = scale * (q . K_j) + s[j] for j < n (s holds the mask on entry);
// returns the largest s[j]. D % 8 == 0. Eight keys at a time: one vector
// accumulator per key, the 8x8 block of partial sums transposed and added
// so lane r is key r's dot.
template <bool F16>
float block_scores(const float * q, const char * k0, size_t k_row, int64_t D, int64_t n, float scale, float * s) {
    constexpr size_t esz = F16 ? 2 : 4;
    const __m256 vscale = _mm256_set1_ps(scale);
    __m256 vmax = _mm256_set1_ps(k_neg_inf);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 a[8];
        for (auto & v : a) v = _mm256_setzero_ps();
        const char * kj = k0 + static_cast<size_t>(j) * k_row;
        for (int64_t d = 0; d < D; d += 8) {
            const __m256 qv = _mm256_loadu_ps(q + d);
            const size_t off = static_cast<size_t>(d) * esz;
            for (int r = 0; r < 8; ++r) a[r] = _mm256_fmadd_ps(qv, load8<F16>(kj + r * k_row + off), a[r]);
        }
        simd::transpose8x8(a);
        const __m256 dot = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])),
                                         _mm256_add_ps(_mm256_add_ps(a[4], a[5]), _mm256_add_ps(a[6], a[7])));
        const __m256 sj = _mm256_add_ps(_mm256_mul_ps(dot, vscale), _mm256_loadu_ps(s + j));
        _mm256_storeu_ps(s + j, sj);
        vmax = _mm256_max_ps(vmax, sj);
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, vmax);
    float mx = k_neg_inf;
    for (float x : lanes) mx = x > mx ? x : mx;
    for (; j < n; ++j) {
        __m256 a = _mm256_setzero_ps();
        const char * kj = k0 + static_cast<size_t>(j) * k_row;
        for (int64_t d = 0; d < D; d += 8) {
            a = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load8<F16>(kj + static_cast<size_t>(d) * esz), a);
        }
        s[j] = simd::hsum8(a) * scale + s[j];
        mx = s[j] > mx ? s[j] : mx;
    }
    return mx;
}

// acc[d0 .. d0 + 8 NV) += sum_j w[j] * V_j[same range] for j < n, in order
// of j: NV independent accumulator vectors, so NV FMAs per key overlap.
template <bool F16, int NV>
void accumulate_chunk(float * acc, const float * w, const char * vd, size_t v_row, int64_t n) {
    constexpr size_t esz = F16 ? 2 : 4;
    __m256 a[NV];
    for (int r = 0; r < NV; ++r) a[r] = _mm256_loadu_ps(acc + 8 * r);
    for (int64_t j = 0; j < n; ++j) {
        const __m256 wj = _mm256_set1_ps(w[j]);
        const char * row = vd + static_cast<size_t>(j) * v_row;
        for (int r = 0; r < NV; ++r) a[r] = _mm256_fmadd_ps(wj, load8<F16>(row + 8 * r * esz), a[r]);
    }
    for (int r = 0; r < NV; ++r) _mm256_storeu_ps(acc + 8 * r, a[r]);
}

// acc[d] += sum_j w[j] * V_j[d] for j < n, in order of j; D % 8 == 0.
// Chunks of 64 elements (8 vectors), then one chunk of the rest.
template <bool F16>
void block_accumulate(float * acc, const float * w, const char * v0, size_t v_row, int64_t D, int64_t n) {
    constexpr size_t esz = F16 ? 2 : 4;
    int64_t d = 0;
    for (; d + 64 <= D; d += 64) accumulate_chunk<F16, 8>(acc + d, w, v0 + static_cast<size_t>(d) * esz, v_row, n);
    const char * vd = v0 + static_cast<size_t>(d) * esz;
    switch ((D - d) / 8) {
    case 1: accumulate_chunk<F16, 1>(acc + d, w, vd, v_row, n); break;
    case 2: accumulate_chunk<F16, 2>(acc + d, w, vd, v_row, n); break;
    case 3: accumulate_chunk<F16, 3>(acc + d, w, vd, v_row, n); break;
    case 4: accumulate_chunk<F16, 4>(acc + d, w, vd, v_row, n); break;
    case 5: accumulate_chunk<F16, 5>(acc + d, w, vd, v_row, n); break;
    case 6: accumulate_chunk<F16, 6>(acc + d, w, vd, v_row, n); break;
    case 7: accumulate_chunk<F16, 7>(acc + d, w, vd, v_row, n); break;
    default: break;
    }
}

// w[j] = exp(w[j] - m) for j < n (masked -inf gives 0); returns their sum
// (eight lanes, then hsum8, then the tail in order).
float block_exp_sum(float * w, int64_t n, float m) {
    const __m256 mv = _mm256_set1_ps(m);
    __m256 sum = _mm256_setzero_ps();
    int64_t j = 0;
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
                            float * s, float * row) {
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
        s[j] = dot * scale + s[j];
        mx = s[j] > mx ? s[j] : mx;
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
// not -inf; 0 when all are. Eight entries at a time for a packed row.
int64_t visible_end(const char * mrow, size_t nb0, int64_t n) {
    if (nb0 == sizeof(float)) {
        for (; n >= 8; n -= 8) {
            float v[8];
            std::memcpy(v, mrow + static_cast<size_t>(n - 8) * sizeof(float), sizeof v);
            bool all_masked = true;
            for (float x : v) all_masked &= x == k_neg_inf;
            if (!all_masked) break;
        }
    }
    while (n > 0 && read_f32(mrow + static_cast<size_t>(n - 1) * nb0) == k_neg_inf) --n;
    return n;
}

// The online soft-max state of one (query row, head) pair.
struct row_state {
    const char * mrow; // mask row or null
    int64_t n_end;     // keys after n_end - 1 are all masked
    float m, l;        // running maximum and sum
};

// One block of keys [j0, j0 + n) for one row: scores, rescale, weights,
// accumulation (the steps in the header comment).
template <bool K16, bool V16>
void row_block(const tsr_tensor * mask, const float * qrow, float * acc, row_state & st, const char * kb,
               const char * vb, size_t k_row, size_t v_row, int64_t D, int64_t j0, int64_t n, float scale,
               const fa_scratch & w) {
    if (st.mrow == nullptr) {
        std::fill(w.s, w.s + n, 0.0f);
    } else if (mask->nb[0] == sizeof(float)) {
        std::memcpy(w.s, st.mrow + static_cast<size_t>(j0) * sizeof(float), static_cast<size_t>(n) * sizeof(float));
    } else {
        for (int64_t j = 0; j < n; ++j) w.s[j] = read_f32(st.mrow + static_cast<size_t>(j0 + j) * mask->nb[0]);
    }
#ifdef TSR_CPU_AVX2
    const bool vec = D % 8 == 0;
    const float bmax = vec ? block_scores<K16>(qrow, kb, k_row, D, n, scale, w.s)
                           : block_scores_portable<K16>(qrow, kb, k_row, D, n, scale, w.s, w.row);
#else
    const float bmax = block_scores_portable<K16>(qrow, kb, k_row, D, n, scale, w.s, w.row);
#endif
    if (bmax == k_neg_inf) return; // every key of the block is masked
    if (bmax > st.m) {
        const float c = std::exp(st.m - bmax); // 0 on the first visible block (m = -inf)
        for (int64_t d = 0; d < D; ++d) acc[d] *= c;
        st.l *= c;
        st.m = bmax;
    }
#ifdef TSR_CPU_AVX2
    if (vec) {
        st.l += block_exp_sum(w.s, n, st.m);
        block_accumulate<V16>(acc, w.s, vb, v_row, D, n);
        return;
    }
#endif
    st.l += block_exp_sum_portable(w.s, n, st.m);
    block_accumulate_portable<V16>(acc, w.s, vb, v_row, D, n);
}

// Query rows i0 .. i0 + nr - 1 (nr <= k_tile) of head h. Key blocks are the
// outer loop so a block of K and V (k_block rows) is read from memory once
// and reused from cache by every row of the tile; each row still sees its
// blocks in order j0 = 0, k_block, ..., so its arithmetic is that of a
// single row.
template <bool K16, bool V16>
void attend_tile(const tsr_tensor * dst, const fa_dims & dm, float scale, int64_t i0, int64_t nr, int64_t h,
                 const fa_scratch & w) {
    const tsr_tensor * q = dst->src[0];
    const tsr_tensor * k = dst->src[1];
    const tsr_tensor * v = dst->src[2];
    const tsr_tensor * mask = dst->src[3];
    const int64_t D = dm.D;
    const int64_t hk = h / dm.group;

    row_state st[k_tile];
    int64_t n_end_max = 0;
    for (int64_t r = 0; r < nr; ++r) {
        const char * qrow = row_ptr(q, i0 + r, h, 0);
        float * qf = w.q + r * D;
        if (q->nb[0] == sizeof(float)) {
            std::memcpy(qf, qrow, static_cast<size_t>(D) * sizeof(float));
        } else {
            for (int64_t d = 0; d < D; ++d) qf[d] = read_f32(qrow + static_cast<size_t>(d) * q->nb[0]);
        }
        std::fill(w.acc + r * D, w.acc + (r + 1) * D, 0.0f);
        row_state & sr = st[r];
        sr.mrow = mask != nullptr ? row_ptr(mask, i0 + r, h % mask->ne[2], 0) : nullptr;
        sr.n_end = sr.mrow != nullptr ? visible_end(sr.mrow, mask->nb[0], dm.n_kv) : dm.n_kv;
        sr.m = k_neg_inf;
        sr.l = 0.0f;
        n_end_max = std::max(n_end_max, sr.n_end);
    }

    const char * k0 = row_ptr(k, 0, hk, 0);
    const char * v0 = row_ptr(v, 0, hk, 0);
    const size_t k_row = k->nb[1], v_row = v->nb[1];
    for (int64_t j0 = 0; j0 < n_end_max; j0 += k_block) {
        const char * kb = k0 + static_cast<size_t>(j0) * k_row;
        const char * vb = v0 + static_cast<size_t>(j0) * v_row;
        for (int64_t r = 0; r < nr; ++r) {
            if (j0 >= st[r].n_end) continue;
            const int64_t n = std::min(k_block, st[r].n_end - j0);
            row_block<K16, V16>(mask, w.q + r * D, w.acc + r * D, st[r], kb, vb, k_row, v_row, D, j0, n, scale, w);
        }
    }

    for (int64_t r = 0; r < nr; ++r) {
        char * out = row_ptr(dst, h, i0 + r, 0);
        const float * acc = w.acc + r * D;
        const float inv = st[r].l > 0.0f ? 1.0f / st[r].l : 0.0f; // no visible key: zeros
        for (int64_t d = 0; d < D; ++d) write_f32(out + static_cast<size_t>(d) * dst->nb[0], acc[d] * inv);
    }
}

// Work items: (tile of k_tile query rows, head), dealt round-robin.
template <bool K16, bool V16>
void attend_rows(const compute_params & p, const tsr_tensor * dst, const fa_dims & dm, float scale) {
    const fa_scratch w = carve(p.wdata, dm.D);
    const int64_t n_tiles = (dm.T + k_tile - 1) / k_tile;
    for (int64_t item = p.ith; item < n_tiles * dm.H; item += p.nth) {
        const int64_t i0 = (item / dm.H) * k_tile, h = item % dm.H;
        attend_tile<K16, V16>(dst, dm, scale, i0, std::min(k_tile, dm.T - i0), h, w);
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

bool compute_flash_attn_ext(const compute_params & p, tsr_tensor * dst) {
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

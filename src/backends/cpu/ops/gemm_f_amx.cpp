// backends/cpu/ops/gemm_f_amx.cpp — MUL_MAT of repacked F16 and BF16
// weights with N >= k_gemm_min_n columns (prompt processing) on AMX-BF16
// tiles
// (TSR_CPU_AMX_BF16 builds, where Linux grants the tile state and
// cpu_tuning::amx is on: gemm_f_amx_use).
//
// TDPBF16PS (Intel SDM, "TDPBF16PS") adds to C (M x N F32) the products
// A (M x 2K BF16) . B (2K x N BF16), B stored as K rows of N pairs: dword n
// of row q holds B's elements (2q, 2q + 1) of column n. Here A is 16
// columns of the activations (a tile row per column, 32 consecutive k) and
// B is 16 weight rows (a tile row per pair of k steps, the group's 16 rows
// side by side), so C row j holds column j's dot products with the 16 rows.
//
// F16 has 11 significant bits and BF16 8, so each operand is split into a
// sum of two BF16 values (the "bf16x3" scheme: Henry, Tang & Heinecke,
// "Leveraging the bfloat16 artificial intelligence datatype for
// higher-precision computations", ARITH 2019):
//   w = w_hi + w_lo   exactly (w_hi = bf16(w) to nearest even; the rest has
//                     at most 3 significant bits)
//   x = x_hi + x_lo + r, x_hi = bf16(x), x_lo = bf16(x - x_hi): 16 bits of
//                     x, |r| <= 2^-17 |x| (the reference rounds the
//                     activations of F16 weights to F16: 11 bits)
// and w x ~ w_hi x_hi + w_lo x_hi + w_hi x_lo (the dropped w_lo x_lo is
// below 2^-16 |w x|): three TDPBF16PS per 32 k, in that order, into one C
// that accumulates the whole of K. The products are exact in F32; the
// tile unit adds them with its own rounding (it keeps more than F32 within
// an instruction: measured, it matches no sequence of F32 FMAs), so the
// bits differ from the AVX-512 kernels' F32 chains (gemm_f.cpp,
// matvec_f.cpp): a column's products here depend on neither the tiling,
// the column count (>= k_gemm_min_n) nor the threads, but a token computed
// alone (one column, matvec_f) differs from the same token in a prompt in
// the last bits. TESSERA_CPU_AMX=0 restores the AVX-512 GEMM.
//
// BF16 weights need no split: w = w_hi. Their activations are rounded to
// BF16 as by the AVX512-BF16 kernels (bf16_dot.hpp, and the reference for
// BF16 weights): x_hi alone, one TDPBF16PS per 32 k, so the products are
// those of vdpbf16ps, summed by the tile unit.
//
// Layouts (K padded with zeros to whole steps of 32):
//   activations (gemm_f_amx_prepare, shared by the threads): per batch,
//     tile of 16 columns and step, 2 KiB: the hi tile (16 rows x 32 BF16,
//     row j = column j's x_hi) then the lo tile; columns past N zero.
//   weights (per work item, in the thread's scratch): per group of 16 rows
//     and step, 2 KiB: the hi tile (16 rows of 16 pairs) then the lo tile.
//   (BF16: the hi tiles alone, 1 KiB per step.)
// Tiles: C in tmm0..3 (2 column tiles x 2 groups), A in tmm4..5, B in
// tmm6..7: per step 10 tile loads and 12 TDPBF16PS for 32 x 32 outputs.
#include <algorithm>
#include <cstring>

#include "backends/cpu/ops/amx_tiles.hpp"
#include "backends/cpu/ops/mul_mat_impl.hpp"
#include "backends/cpu/ops/mul_mat_repack.hpp"
#include "backends/cpu/ops/repack.hpp"
#include "backends/cpu/ops/work_queue.hpp"

namespace tessera::cpu {

#ifdef TSR_CPU_AMX_BF16

namespace {

constexpr int64_t k_cols = 16;          // columns per A tile
constexpr int64_t k_step = 32;          // k per tile step
constexpr size_t k_tile = 1024;         // one 16 x 64-byte tile

// Tiles per operand and step: F16 hi and lo, BF16 hi alone.
template <int32_t T>
constexpr int parts() {
    return T == TSR_TYPE_F16 ? 2 : 1;
}
size_t step_bytes(const mm_dims & d) {
    return d.a->type == TSR_TYPE_F16 ? 2 * k_tile : k_tile;
}
constexpr int64_t k_max_groups = 4;     // groups of 16 rows per work item
constexpr size_t k_item_bytes = 768 << 10; // converted weights of an item, at most (L2)

int64_t steps_of(const mm_dims & d) {
    return (d.K + k_step - 1) / k_step;
}
int64_t col_tiles_of(const mm_dims & d) {
    return (d.N + k_cols - 1) / k_cols;
}

// Groups per work item: up to k_max_groups, fewer when their converted
// rows would not fit k_item_bytes (long K), at least one.
int64_t groups_per_item(const mm_dims & d) {
    const size_t per_group = static_cast<size_t>(steps_of(d)) * step_bytes(d);
    return std::clamp<int64_t>(static_cast<int64_t>(k_item_bytes / per_group), 1, k_max_groups);
}

// 16 lanes as BF16 (to nearest even) and that value back in F32.
inline __m512 bf16_value(__m512 v) {
    const __m256i h = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// The hi and lo parts of e (lanes 0..15) and o (lanes 16..31) as 32 BF16
// each, e's first: hi = bf16(v), lo = bf16(v - hi).
inline void split(__m512 e, __m512 o, __m512i & hi, __m512i & lo) {
    hi = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(o, e));
    const __m512 le = _mm512_sub_ps(e, bf16_value(e));
    const __m512 lo_o = _mm512_sub_ps(o, bf16_value(o));
    lo = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(lo_o, le));
}

// Converts one group of 16 repacked F16 or BF16 rows (repack.hpp: [k][16])
// into B tiles: step s at out + s parts k_tile, row q = the pairs (2q,
// 2q + 1) of the 16 rows, hi then (F16) lo; k >= K zero.
template <int32_t T>
void convert_group(const char * g, int64_t K, int64_t n_steps, char * out) {
    const __m512i inter = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                           21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const auto raw = [&](int64_t k) { // step k's 16 values, 0 past K
        if (k >= K) return _mm256_setzero_si256();
        return _mm256_loadu_si256(reinterpret_cast<const __m256i *>(g + static_cast<size_t>(k) * 32));
    };
    for (int64_t s = 0; s < n_steps; ++s) {
        char * o = out + static_cast<size_t>(s) * parts<T>() * k_tile;
        for (int q = 0; q < 16; ++q) {
            const int64_t k = s * k_step + 2 * q;
            if constexpr (T == TSR_TYPE_F16) {
                __m512i hi, lo;
                split(_mm512_cvtph_ps(raw(k)), _mm512_cvtph_ps(raw(k + 1)), hi, lo);
                _mm512_store_si512(o + q * 64, _mm512_permutexvar_epi16(inter, hi));
                _mm512_store_si512(o + k_tile + q * 64, _mm512_permutexvar_epi16(inter, lo));
            } else {
                const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(raw(k)), raw(k + 1), 1);
                _mm512_store_si512(o + q * 64, _mm512_permutexvar_epi16(inter, both));
            }
        }
    }
}

// Column x (K values, element k at x + k nb0 bytes) as row `row` of its
// tile's A tiles at t (step s at t + s Parts k_tile): hi, then with Parts
// 2 lo; k >= K zero.
template <int Parts>
void convert_column(const char * x, size_t nb0, int64_t K, int64_t n_steps, int row, char * t) {
    alignas(64) float v[k_step];
    for (int64_t s = 0; s < n_steps; ++s) {
        const int64_t k0 = s * k_step, n = std::min(k_step, K - k0);
        __m512 e, o;
        if (nb0 == sizeof(float)) {
            const auto * f = reinterpret_cast<const float *>(x) + k0;
            const auto m_e = static_cast<__mmask16>(n >= 16 ? 0xffff : (1u << n) - 1);
            const auto m_o = static_cast<__mmask16>(n >= 32 ? 0xffff : n <= 16 ? 0 : (1u << (n - 16)) - 1);
            e = _mm512_maskz_loadu_ps(m_e, f);
            o = _mm512_maskz_loadu_ps(m_o, f + 16);
        } else {
            for (int64_t i = 0; i < k_step; ++i) v[i] = i < n ? read_f32(x + static_cast<size_t>(k0 + i) * nb0) : 0.0f;
            e = _mm512_load_ps(v);
            o = _mm512_load_ps(v + 16);
        }
        __m512i hi, lo;
        split(e, o, hi, lo);
        char * dst = t + static_cast<size_t>(s) * Parts * k_tile + static_cast<size_t>(row) * 64;
        _mm512_store_si512(dst, hi);
        if constexpr (Parts == 2) _mm512_store_si512(dst + k_tile, lo);
    }
}

// The activation tiles of column tile t of batch `batch`.
char * a_tiles(const compute_params & p, const mm_dims & d, int64_t batch, int64_t t) {
    return static_cast<char *>(p.shared) + static_cast<size_t>((batch * col_tiles_of(d) + t) * steps_of(d)) * step_bytes(d);
}

amx_tiles::tile_config make_config() {
    amx_tiles::tile_config c;
    for (int t = 0; t < 8; ++t) {
        c.rows[t] = 16;
        c.colsb[t] = 64;
    }
    return c;
}

// C tiles (column tile i, group j) = tmm(2 i + j) += A tiles of I column
// tiles (a[i]) . B tiles of J groups (b[j]) over n_steps steps, each step
// hi.hi, then (Parts 2) lo.hi and hi.lo (the tile numbers are immediates,
// hence the constant I, J); then C to c[i][j] (16 x 16 F32, row = column).
template <int Parts, int I, int J>
void kernel(const char * const * a, const char * const * b, int64_t n_steps, float (*c)[2][k_cols * 16]) {
    _tile_zero(0);
    if constexpr (J > 1) _tile_zero(1);
    if constexpr (I > 1) _tile_zero(2);
    if constexpr (I > 1 && J > 1) _tile_zero(3);
    const auto products = [] {
        _tile_dpbf16ps(0, 4, 6);
        if constexpr (J > 1) _tile_dpbf16ps(1, 4, 7);
        if constexpr (I > 1) _tile_dpbf16ps(2, 5, 6);
        if constexpr (I > 1 && J > 1) _tile_dpbf16ps(3, 5, 7);
    };
    for (int64_t s = 0; s < n_steps; ++s) {
        const size_t off = static_cast<size_t>(s) * Parts * k_tile;
        _tile_loadd(4, a[0] + off, 64);
        if constexpr (I > 1) _tile_loadd(5, a[1] + off, 64);
        _tile_loadd(6, b[0] + off, 64);
        if constexpr (J > 1) _tile_loadd(7, b[1] + off, 64);
        products(); // hi . hi
        if constexpr (Parts == 1) continue;
        _tile_loadd(4, a[0] + off + k_tile, 64);
        if constexpr (I > 1) _tile_loadd(5, a[1] + off + k_tile, 64);
        products(); // lo . hi
        _tile_loadd(4, a[0] + off, 64);
        if constexpr (I > 1) _tile_loadd(5, a[1] + off, 64);
        _tile_loadd(6, b[0] + off + k_tile, 64);
        if constexpr (J > 1) _tile_loadd(7, b[1] + off + k_tile, 64);
        products(); // hi . lo
    }
    _tile_stored(0, c[0][0], 64);
    if constexpr (J > 1) _tile_stored(1, c[0][1], 64);
    if constexpr (I > 1) _tile_stored(2, c[1][0], 64);
    if constexpr (I > 1 && J > 1) _tile_stored(3, c[1][1], 64);
}

// Items of up to groups_per_item groups x the columns (make_mm_grid); an
// item converts its rows once, then for each pair of column tiles runs the
// kernel over its pairs of groups (the columns' A tiles stay in L2 while
// the converted rows are read again).
template <int32_t T>
void run(const compute_params & p, const mm_dims & d) {
    constexpr int P = parts<T>();
    const int64_t n_steps = steps_of(d);
    const size_t sb = static_cast<size_t>(P) * k_tile;
    const int64_t G = k_repack_float_rows;
    char * bt = static_cast<char *>(p.wdata);
    const mm_grid g = make_mm_grid(d, p.nth, G, G * groups_per_item(d), k_cols, d.N);
    work_queue queue(p, g.n_items, 1);
    static const amx_tiles::tile_config config = make_config();
    _tile_loadconfig(&config);
    alignas(64) float c[2][2][k_cols * 16];
    for (item_range items{}; queue.next(items);) {
        for (int64_t it = items.begin; it < items.end; ++it) {
            const mm_item item = item_of(g, d, it);
            const char * a = a_matrix(d, item.batch);
            const int64_t n_groups = (item.m1 - item.m0) / G;
            for (int64_t j = 0; j < n_groups; ++j) {
                const int64_t grp = item.m0 / G + j;
                convert_group<T>(a + static_cast<size_t>(grp * d.K * G) * sizeof(uint16_t), d.K, n_steps,
                                 bt + static_cast<size_t>(j * n_steps) * sb);
            }
            const int64_t t0 = item.n0 / k_cols, t1 = (item.n1 + k_cols - 1) / k_cols;
            for (int64_t t = t0; t < t1; t += 2) {
                const int n_i = t + 1 < t1 ? 2 : 1;
                const char * at[2] = {a_tiles(p, d, item.batch, t), a_tiles(p, d, item.batch, std::min(t + 1, t1 - 1))};
                for (int64_t j = 0; j < n_groups; j += 2) {
                    const int n_j = j + 1 < n_groups ? 2 : 1;
                    const char * btj[2] = {bt + static_cast<size_t>(j * n_steps) * sb,
                                           bt + static_cast<size_t>(std::min(j + 1, n_groups - 1) * n_steps) * sb};
                    if (n_i == 2 && n_j == 2) {
                        kernel<P, 2, 2>(at, btj, n_steps, c);
                    } else if (n_i == 2) {
                        kernel<P, 2, 1>(at, btj, n_steps, c);
                    } else if (n_j == 2) {
                        kernel<P, 1, 2>(at, btj, n_steps, c);
                    } else {
                        kernel<P, 1, 1>(at, btj, n_steps, c);
                    }
                    for (int i = 0; i < n_i; ++i) {
                        const int64_t n_first = (t + i) * k_cols;
                        const int64_t cols = std::min(k_cols, item.n1 - n_first);
                        for (int jj = 0; jj < n_j; ++jj) {
                            const int64_t m = item.m0 + (j + jj) * G;
                            for (int64_t col = 0; col < cols; ++col) {
                                copy_column(c[i][jj] + col * 16, 16, dst_column(d, item.batch, n_first + col) + m);
                            }
                        }
                    }
                }
            }
        }
    }
    _tile_release(); // back to the init state: no tile data for the OS to save
}

} // namespace

bool mul_mat_repack_float_uses_amx() {
    return mul_mat_repack_uses_amx();
}

bool gemm_f_amx_use(const mm_dims & d) {
    return (d.a->type == TSR_TYPE_F16 || d.a->type == TSR_TYPE_BF16) && is_repacked(d.a) && d.N >= k_gemm_min_n &&
           mul_mat_repack_float_uses_amx();
}

size_t gemm_f_amx_work_size(const mm_dims & d) {
    return static_cast<size_t>(groups_per_item(d) * steps_of(d)) * step_bytes(d);
}

size_t gemm_f_amx_shared_size(const mm_dims & d) {
    size_t bytes = 0;
    const auto tiles = static_cast<size_t>(d.n_batch * col_tiles_of(d));
    if (__builtin_mul_overflow(tiles, static_cast<size_t>(steps_of(d)) * step_bytes(d), &bytes)) {
        throw std::length_error("gemm_f_amx: converted activations exceed the address space");
    }
    return bytes;
}

void gemm_f_amx_prepare(const compute_params & p, const mm_dims & d) {
    const int64_t n_tiles = col_tiles_of(d), n_steps = steps_of(d);
    const size_t sb = step_bytes(d);
    const bool split = d.a->type == TSR_TYPE_F16;
    const int64_t total = d.n_batch * n_tiles;
    for (int64_t t = total * p.ith / p.nth; t < total * (p.ith + 1) / p.nth; ++t) {
        const int64_t batch = t / n_tiles, n0 = (t % n_tiles) * k_cols;
        char * tiles = a_tiles(p, d, batch, t % n_tiles);
        for (int64_t j = 0; j < k_cols; ++j) {
            if (n0 + j < d.N) {
                const char * x = row_ptr(d.b, n0 + j, batch % d.B2, batch / d.B2);
                if (split) {
                    convert_column<2>(x, d.b->nb[0], d.K, n_steps, static_cast<int>(j), tiles);
                } else {
                    convert_column<1>(x, d.b->nb[0], d.K, n_steps, static_cast<int>(j), tiles);
                }
                continue;
            }
            for (int64_t s = 0; s < n_steps; ++s) { // a column past N: zero rows
                for (size_t part = 0; part < sb / k_tile; ++part) {
                    std::memset(tiles + static_cast<size_t>(s) * sb + part * k_tile + static_cast<size_t>(j) * 64, 0, 64);
                }
            }
        }
    }
}

void gemm_f_amx(const compute_params & p, const mm_dims & d) {
    if (d.a->type == TSR_TYPE_F16) {
        run<TSR_TYPE_F16>(p, d);
    } else {
        run<TSR_TYPE_BF16>(p, d);
    }
}

#else // no AMX-BF16 in this build: never used

bool mul_mat_repack_float_uses_amx() { return false; }
bool gemm_f_amx_use(const mm_dims &) { return false; }
size_t gemm_f_amx_work_size(const mm_dims &) { return 0; }
size_t gemm_f_amx_shared_size(const mm_dims &) { return 0; }
void gemm_f_amx_prepare(const compute_params &, const mm_dims &) {}
void gemm_f_amx(const compute_params &, const mm_dims &) {}

#endif // TSR_CPU_AMX_BF16

} // namespace tessera::cpu

// backends/cpu/ops/gemm_f.cpp — MUL_MAT with float weights (F32, F16,
// BF16) and N >= k_gemm_min_n columns (prompt processing): a blocked GEMM
// in the manner of Goto & van de Geijn ("Anatomy of high-performance matrix
// multiplication", ACM TOMS 34(3), 2008).
//
//   - A block of k_mc weight rows x k_kc of K is packed (and widened to F32)
//     into micro-panels of k_mr rows stored k-major ([k][k_mr]), so the
//     micro-kernel reads one contiguous vector pair per k. Any weight
//     layout packs: row-contiguous rows through 8x8 transposes,
//     m-contiguous (transposed V cache views) by plain vector copies,
//     anything else element by element. Repacked F16/BF16 weights
//     (repack.hpp: groups of 16 rows, k-major) are already panel-shaped:
//     they pack by plain widening copies, or (AVX-512 where
//     cpu_tuning::gemm_float_in_place, tuning.hpp: AMD) the micro-kernel
//     reads three groups in place and widens them in registers. On Intel
//     the widening (vcvtph2ps) takes the FMA ports, once per group load
//     and activation tile, where packing widens once per block.
//   - The activations b are packed once per node, before the products,
//     into tiles of k_nr columns stored k-major ([k][k_nr], 8x8
//     transposes; strided b element by element), in scratch shared by the
//     threads (gemm_f_prepare: each thread packs a part, then a barrier).
//     A tile's k_kc-chunk (8 KiB) stays in L1 while the micro-kernel runs
//     over the k_mc / k_mr weight micro-panels. (Packing per thread and
//     row block instead cost 7% of a 1B F16 prompt: b was transposed once
//     per item, from L3.)
//   - The micro-kernel keeps a k_mr x k_nr tile of dst in registers
//     (AVX2: 16 x 6 in 12 ymm; AVX-512: 48 x 8 in 24 zmm) and for each k
//     multiplies the panel's k_mr weights by k_nr activation values
//     broadcast from the packed tile. A full tile goes from the registers
//     straight to dst; an edge tile through a scratch tile.
//   - Each dst element is the sum, over K in chunks of k_kc, of a chunk
//     computed as a sequential FMA chain from zero, the chunk sums added
//     to dst in order: the same operations whatever the tile or thread.
//   - BF16 weights on AVX512-BF16 builds (bf16_dot.hpp): the same blocks
//     and tiles, but the weights packed as BF16 pairs ([k/2][k_mr] 32-bit
//     words, from the repacked groups or plain rows alike), the
//     activations as BF16 pairs ([k/2][k_nr]), and the micro-kernel's
//     chain is vdpbf16ps: two products per lane and instruction, twice the
//     F32 FMA rate (run_bf16).
#include <algorithm>
#include <stdexcept>
#include <type_traits>

#include "backends/cpu/ops/mul_mat_impl.hpp"
#include "backends/cpu/ops/bf16_dot.hpp"
#include "backends/cpu/ops/block_prefetch.hpp"
#include "backends/cpu/ops/float_load.hpp"
#include "backends/cpu/ops/pack_columns.hpp"
#include "backends/cpu/ops/repack.hpp"
#include "backends/cpu/ops/simd.hpp"
#include "backends/cpu/ops/tuning.hpp"

namespace tessera::cpu {

#ifdef TSR_CPU_AVX2

namespace {

using namespace float_load;

#ifdef TSR_CPU_AVX512
// Tile and block sizes measured on Zen 5 (bench_blas, 4096x512x4096, one
// thread): 48 x 8 (3 zmm x 8 columns: 11 loads per 24 FMAs) ran at 0.80-0.88
// of the FMA peak, steadier than 32 x 12 (0.71-0.82); k_mc 576 (a 576 KiB
// packed block in the 1 MiB L2): 2 threads 345-358 GFLOP/s against 340-348
// with 288 (and one thread the same).
constexpr int k_mr = 48; // rows per micro-panel (3 zmm)
constexpr int k_nr = 8;  // columns per micro-tile
constexpr int64_t k_mc = 576; // weight rows per packed block (multiple of k_mr)
#else
constexpr int k_mr = 16; // rows per micro-panel (2 ymm)
constexpr int k_nr = 6;  // columns per micro-tile
// k_mc 256 (a 256 KiB packed block, half of Zen 3's L2) over 128: 0.87
// instead of 0.83 of the FMA peak (bench_blas_haswell).
constexpr int64_t k_mc = 256; // weight rows per packed block (multiple of k_mr)
#endif
constexpr int64_t k_kc = k_gemm_f_kc; // K chunk

// Packs rows [m0, m0 + rows) x k [k0, k0 + kc) of matrix a (type T, byte
// strides nb0 along k, nb1 along m) into micro-panels: panel p holds rows
// m0 + p k_mr .. + k_mr - 1 at ap + p kc k_mr, element (k, r) at
// [k k_mr + r]; rows past `rows` are zero.
template <int32_t T>
void pack_a(const char * a, size_t nb0, size_t nb1, int64_t m0, int64_t rows, int64_t k0, int64_t kc, float * ap) {
    const int64_t n_panels = (rows + k_mr - 1) / k_mr;
    const size_t es = esize<T>();
    for (int64_t pnl = 0; pnl < n_panels; ++pnl) {
        float * dst = ap + pnl * kc * k_mr;
        const int64_t r0 = pnl * k_mr;
        const int64_t valid = std::min<int64_t>(k_mr, rows - r0);
        if (nb0 == es) {
            // Row-contiguous: 8 rows x 8 k at a time through a transpose.
            for (int g = 0; g < k_mr / 8; ++g) {
                const int64_t gvalid = std::clamp<int64_t>(rows - (r0 + g * 8), 0, 8);
                if (gvalid == 0) { // rows past the end: zero
                    for (int64_t k = 0; k < kc; ++k) _mm256_store_ps(dst + k * k_mr + g * 8, _mm256_setzero_ps());
                    continue;
                }
                const char * rp[8];
                __m256 keep[8]; // all ones for a row of the matrix, zero for a missing row
                for (int i = 0; i < 8; ++i) {
                    const int64_t m = m0 + r0 + g * 8 + std::min<int64_t>(i, gvalid - 1); // missing rows: any valid one
                    rp[i] = a + static_cast<size_t>(m) * nb1 + static_cast<size_t>(k0) * es;
                    keep[i] = _mm256_castsi256_ps(_mm256_set1_epi32(i < gvalid ? -1 : 0));
                }
                int64_t k = 0;
                // No per-row test in the loop (it cost a branch per row and step).
                for (; k + 8 <= kc; k += 8) {
                    __m256 v[8];
                    for (int i = 0; i < 8; ++i) v[i] = _mm256_and_ps(load8<T>(rp[i] + k * es), keep[i]);
                    simd::transpose8x8(v);
                    for (int j = 0; j < 8; ++j) _mm256_store_ps(dst + (k + j) * k_mr + g * 8, v[j]);
                }
                for (; k < kc; ++k) {
                    for (int i = 0; i < 8; ++i) dst[k * k_mr + g * 8 + i] = i < gvalid ? load1<T>(rp[i] + k * es) : 0.0f;
                }
            }
        } else if (nb1 == es && valid == k_mr) {
            // m-contiguous: k_mr consecutive weights per k.
            const char * base = a + static_cast<size_t>(m0 + r0) * es;
            for (int64_t k = 0; k < kc; ++k) {
                const char * src = base + static_cast<size_t>(k0 + k) * nb0;
                for (int v = 0; v < k_mr / 8; ++v) _mm256_store_ps(dst + k * k_mr + v * 8, load8<T>(src + v * 8 * es));
            }
        } else {
            for (int64_t k = 0; k < kc; ++k) {
                for (int r = 0; r < k_mr; ++r) {
                    dst[k * k_mr + r] = r < valid ? load1<T>(a + static_cast<size_t>(m0 + r0 + r) * nb1 + static_cast<size_t>(k0 + k) * nb0) : 0.0f;
                }
            }
        }
    }
}

// The same panels from a matrix in the repacked float layout (repack.hpp:
// groups of 16 rows, [k][16] within a group; m0 and rows multiples of 16):
// each panel column k is the k-th steps of k_mr / 16 consecutive groups,
// widened to F32 without transposes; groups past `rows` are zero.
template <int32_t T>
void pack_a_repacked(const char * a, int64_t K, int64_t m0, int64_t rows, int64_t k0, int64_t kc, float * ap) {
    static_assert(k_mr % k_repack_float_rows == 0, "a micro-panel holds whole groups");
    constexpr int64_t G = k_repack_float_rows;
    constexpr size_t step = G * esize<T>();
    const int64_t n_panels = (rows + k_mr - 1) / k_mr;
    for (int64_t pnl = 0; pnl < n_panels; ++pnl) {
        float * dst = ap + pnl * kc * k_mr;
        for (int gi = 0; gi < k_mr / G; ++gi) {
            const int64_t r0 = pnl * k_mr + gi * G;
            float * out = dst + gi * G;
            if (r0 >= rows) {
                for (int64_t k = 0; k < kc; ++k) {
                    for (int v = 0; v < G / 8; ++v) _mm256_store_ps(out + k * k_mr + 8 * v, _mm256_setzero_ps());
                }
                continue;
            }
            const char * src = a + static_cast<size_t>((m0 + r0) / G * K + k0) * step;
            for (int64_t k = 0; k < kc; ++k) {
                _mm256_store_ps(out + k * k_mr, load8<T>(src + static_cast<size_t>(k) * step));
                _mm256_store_ps(out + k * k_mr + 8, load8<T>(src + static_cast<size_t>(k) * step + 8 * esize<T>()));
            }
        }
    }
}

#ifdef TSR_CPU_AVX512
// The micro-kernel's step for F32 panels (micro_kernel): an activation
// value broadcast, then acc + a * b by FMA.
struct f32_madd {
    static __m512 bcast(float b) { return _mm512_set1_ps(b); }
    static __m512 madd(__m512 acc, __m512 a, __m512 b) { return _mm512_fmadd_ps(a, b, acc); }
};
#endif

// A micro-panel packed by pack_a: [k][k_mr] F32.
struct packed_panel {
    const float * ap;
#ifdef TSR_CPU_AVX512
    using step = f32_madd;
    __m512 load(int64_t k, int v) const { return _mm512_load_ps(ap + k * k_mr + 16 * v); }
#endif
};

// Where a micro-kernel's k_mr x k_nr tile goes. tile_to_dst: straight into
// dst columns y[j] at row m (a full tile), stored for the first K chunk and
// added to what is there for the others; tile_to_scratch: into c[j][r]
// (an edge tile, then store_tile).
struct tile_to_dst {
    float * const * y;
    int64_t m;
    bool first;
#ifdef TSR_CPU_AVX512
    void put(int j, int r, __m512 v) const {
        float * o = y[j] + m + r;
        _mm512_storeu_ps(o, first ? v : _mm512_add_ps(_mm512_loadu_ps(o), v));
    }
#else
    void put(int j, int r, __m256 v) const {
        float * o = y[j] + m + r;
        _mm256_storeu_ps(o, first ? v : _mm256_add_ps(_mm256_loadu_ps(o), v));
    }
#endif
};
struct tile_to_scratch {
    float * c;
#ifdef TSR_CPU_AVX512
    void put(int j, int r, __m512 v) const { _mm512_store_ps(c + j * k_mr + r, v); }
#else
    void put(int j, int r, __m256 v) const { _mm256_store_ps(c + j * k_mr + r, v); }
#endif
};

#ifdef TSR_CPU_AVX512
// Where the micro-kernel reads a panel's weights: load(k, v) is rows
// 16 v .. 16 v + 15 of panel column k as F32. packed_panel: a pack_a
// panel ([k][k_mr] F32); group_panel: k_mr / 16 groups of a repacked
// float matrix (repack.hpp), widened in registers (the same F32 values
// pack_a would store, so the same bits). Reading the groups in place
// skips the packing and keeps half the bytes in L2 (2048 x 2048 x 512
// F16 on 2 threads: 323-351 against 305-336 GFLOP/s, four interleaved
// pairs).
template <int32_t T>
struct group_panel {
    using step = f32_madd;
    const char * g[k_mr / k_repack_float_rows]; // step 0 of each group's chunk
    __m512 load(int64_t k, int v) const {
        return load16<T>(g[v] + static_cast<size_t>(k) * k_repack_float_rows * esize<T>());
    }
};

// t[j][0..16 MV-1] = sum over k < kc of a[k][0..16 MV-1] * bp[k][j],
// j < k_nr; then out.put(...) (see tile_to_dst). The Panel gives the
// weights (load(k, v): zmm v of panel column k) and its step type (bcast
// of an activation element of bp, madd(acc, a, b)): F32 FMA for the float panels,
// vdpbf16ps for pair_panel, whose columns and activation elements are BF16
// pairs (run_bf16). MV zmm per panel column:
// k_mr / 16 for a full panel; fewer for the last panel of M when it has at
// most 16 or 32 valid rows, which then costs 1/3 or 2/3 of a full one.
// (Cutting the threads' shares at 16 rows as well, to balance 2048 rows on
// 2 threads, made 2048x256x512 F16 on 2 threads 12% slower: 8 items of 32
// rows, each reading all of the packed activations.)
template <int MV = k_mr / 16, class Panel, class B, class Out>
void micro_kernel(const Panel & pa, const B * bp, int64_t kc, const Out & out) {
    static_assert(MV >= 1 && MV <= k_mr / 16, "MV zmm of a k_mr-row panel");
    constexpr int k_mv = MV; // zmm per panel column
    __m512 acc[k_nr][k_mv];
#pragma GCC unroll 16
    for (int j = 0; j < k_nr; ++j) {
#pragma GCC unroll 4
        for (int v = 0; v < k_mv; ++v) acc[j][v] = _mm512_setzero_ps();
    }
    for (int64_t k = 0; k < kc; ++k) {
        decltype(pa.load(0, 0)) a[k_mv];
#pragma GCC unroll 4
        for (int v = 0; v < k_mv; ++v) a[v] = pa.load(k, v);
#pragma GCC unroll 16
        for (int j = 0; j < k_nr; ++j) {
            const auto bv = Panel::step::bcast(bp[k * k_nr + j]);
#pragma GCC unroll 4
            for (int v = 0; v < k_mv; ++v) acc[j][v] = Panel::step::madd(acc[j][v], a[v], bv);
        }
    }
#pragma GCC unroll 16
    for (int j = 0; j < k_nr; ++j) {
#pragma GCC unroll 4
        for (int v = 0; v < k_mv; ++v) out.put(j, 16 * v, acc[j][v]);
    }
}
#else
// t[j][0..15] = sum over k < kc of ap[k][0..15] * bp[k][j], j < 6; then
// out.put(...) (see tile_out).
template <class Out>
void micro_kernel(const packed_panel & pa, const float * bp, int64_t kc, const Out & out) {
    const float * ap = pa.ap;
    __m256 acc[k_nr][2];
#pragma GCC unroll 6
    for (int j = 0; j < k_nr; ++j) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
    // Unrolled by 4 (the loop's counter, pointer steps and branch once per
    // 48 FMAs instead of 12): bench_blas_haswell, 1 thread, best of 5 in 6
    // alternations on a Sapphire Rapids-class Xeon, 80.8-86.0 -> 82.3-89.2
    // GFLOP/s, never slower (OpenBLAS Haswell core 82-86 in the same runs).
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; ++k) {
        const __m256 a0 = _mm256_load_ps(ap + k * k_mr);
        const __m256 a1 = _mm256_load_ps(ap + k * k_mr + 8);
#pragma GCC unroll 6
        for (int j = 0; j < k_nr; ++j) {
            const __m256 bv = _mm256_broadcast_ss(bp + k * k_nr + j);
            acc[j][0] = _mm256_fmadd_ps(a0, bv, acc[j][0]);
            acc[j][1] = _mm256_fmadd_ps(a1, bv, acc[j][1]);
        }
    }
#pragma GCC unroll 6
    for (int j = 0; j < k_nr; ++j) {
        out.put(j, 0, acc[j][0]);
        out.put(j, 8, acc[j][1]);
    }
}
#endif

// Adds (or, for the first K chunk, stores) the valid part of tile c into
// dst columns y[j] at rows m .. m + rows - 1.
void store_tile(const float * c, float * const * y, int64_t m, int rows, int cols, bool first) {
    for (int j = 0; j < cols; ++j) {
        float * out = y[j] + m;
        const float * t = c + j * k_mr;
        if (rows == k_mr) {
            for (int v = 0; v < k_mr / 8; ++v) {
                __m256 r = _mm256_load_ps(t + v * 8);
                if (!first) r = _mm256_add_ps(_mm256_loadu_ps(out + v * 8), r);
                _mm256_storeu_ps(out + v * 8, r);
            }
        } else {
            for (int i = 0; i < rows; ++i) out[i] = first ? t[i] : out[i] + t[i];
        }
    }
}

// Packed activations: tile t (columns t k_nr .. t k_nr + k_nr - 1) of
// batch `batch` at shared + (batch n_tiles + t) K k_nr floats, [k][k_nr];
// a short last tile repeats its last column.
int64_t n_tiles_of(const mm_dims & d) {
    return (d.N + k_nr - 1) / k_nr;
}

float * b_tile(const compute_params & p, const mm_dims & d, int64_t batch, int64_t n) {
    const int64_t t = batch * n_tiles_of(d) + n / k_nr;
    return static_cast<float *>(p.shared) + t * d.K * k_nr;
}

// The GEMM's loop nest, shared by run and run_bf16: the threads' items
// (make_mm_grid) in column parts (for_each_item_part), each item's blocks
// of up to k_mc rows, each block's K chunks of up to k_kc in order;
// block(item, a, mb, rows, k0, kc) packs the block's chunk and runs the
// micro-kernels over the item's column tiles (a: the item's weight matrix).
template <class Block>
void for_each_block(const compute_params & p, const mm_dims & d, const Block & block) {
    const mm_grid g = make_mm_grid(d, p.nth, k_mr, k_mc, k_nr, d.N);
    for_each_item_part(p, d, g, k_nr, [&](const mm_item & item) {
        const char * a = a_matrix(d, item.batch);
        for (int64_t mb = item.m0; mb < item.m1; mb += k_mc) {
            const int64_t rows = std::min(k_mc, item.m1 - mb);
            for (int64_t k0 = 0; k0 < d.K; k0 += k_kc) block(item, a, mb, rows, k0, std::min(k_kc, d.K - k0));
        }
    });
}

#ifdef TSR_CPU_AVX512
// One micro-tile of `valid` rows and `cols` columns at dst rows m of
// columns y, shared by run and run_bf16: kernel(MV, out) runs the
// micro-kernel with MV zmm per panel column into `out`. A full tile goes
// straight to dst (tile_to_dst); an edge tile, with as few zmm as its rows
// need (1/3 or 2/3 of the work for at most 16 or 32 rows), through ctile
// and store_tile. `first`: the block's first K chunk (store, not add).
template <class Kernel>
void full_or_edge_tile(int valid, int cols, float * const * y, int64_t m, bool first, float * ctile, const Kernel & kernel) {
    if (valid == k_mr && cols == k_nr) return kernel(std::integral_constant<int, k_mr / 16>{}, tile_to_dst{y, m, first});
    if (valid <= 16) {
        kernel(std::integral_constant<int, 1>{}, tile_to_scratch{ctile});
    } else if (valid <= 32) {
        kernel(std::integral_constant<int, 2>{}, tile_to_scratch{ctile});
    } else {
        kernel(std::integral_constant<int, k_mr / 16>{}, tile_to_scratch{ctile});
    }
    store_tile(ctile, y, m, valid, cols, first);
}
#endif

#ifdef TSR_CPU_BF16DOT
// Pair panels (bf16_dot.hpp) of rows [m0, m0 + rows) x k [k0, k0 + kc) of
// a BF16 matrix with byte strides nb0 along k, nb1 along m: panel p at ap +
// p kc2 k_mr words (kc2 = (kc + 1) / 2), pair q of row r at [q k_mr + r];
// rows past `rows` and the element past an odd kc are 0. Row-contiguous
// rows: a row's pairs are its own consecutive 32-bit words, moved by 8 x 8
// transposes of words; any other layout element by element.
void pack_a_pairs(const char * a, size_t nb0, size_t nb1, int64_t m0, int64_t rows, int64_t k0, int64_t kc, uint32_t * ap) {
    const int64_t kc2 = (kc + 1) / 2, full = kc / 2; // pairs, and those with both elements
    const int64_t n_panels = (rows + k_mr - 1) / k_mr;
    // Pair q of the row at `row` (its element k0): two elements nb0 apart.
    const auto pair_at = [&](const char * row, int64_t q) {
        const uint32_t lo = read_u16(row + static_cast<size_t>(2 * q) * nb0);
        const uint32_t hi = 2 * q + 1 < kc ? read_u16(row + static_cast<size_t>(2 * q + 1) * nb0) : 0u;
        return lo | hi << 16;
    };
    for (int64_t pnl = 0; pnl < n_panels; ++pnl) {
        uint32_t * dst = ap + pnl * kc2 * k_mr;
        const int64_t r0 = pnl * k_mr;
        for (int64_t r = 0; r < k_mr; ++r) {
            const bool valid = r0 + r < rows;
            const char * row = a + static_cast<size_t>(m0 + r0 + std::min(r, rows - 1 - r0)) * nb1 + static_cast<size_t>(k0) * nb0;
            int64_t q = 0;
            if (valid && nb0 == 2) {
                // 8 rows x 8 pairs at a time where the next 7 rows are valid too
                if (r % 8 == 0 && r0 + r + 8 <= rows) {
                    for (; q + 8 <= full; q += 8) {
                        __m256 v[8];
                        for (int i = 0; i < 8; ++i) {
                            v[i] = _mm256_loadu_ps(reinterpret_cast<const float *>(row + static_cast<size_t>(i) * nb1 + static_cast<size_t>(q) * 4));
                        }
                        simd::transpose8x8(v); // moves 32-bit words: the pairs' bits are kept
                        for (int j = 0; j < 8; ++j) _mm256_storeu_ps(reinterpret_cast<float *>(dst + (q + j) * k_mr + r), v[j]);
                    }
                    for (int i = 0; i < 8; ++i) { // the rest of the 8 rows' pairs
                        for (int64_t qq = q; qq < kc2; ++qq) dst[qq * k_mr + r + i] = pair_at(row + static_cast<size_t>(i) * nb1, qq);
                    }
                    r += 7;
                    continue;
                }
            }
            for (; q < kc2; ++q) dst[q * k_mr + r] = valid ? pair_at(row, q) : 0u;
        }
    }
}

// The same panels from a repacked BF16 matrix (repack.hpp: groups of 16
// rows, [k][16]; m0 and rows multiples of 16): one vpermw per group and
// pair of steps (bf16_dot::group_pairs); groups past `rows` are 0.
void pack_a_pairs_repacked(const char * a, int64_t K, int64_t m0, int64_t rows, int64_t k0, int64_t kc, uint32_t * ap) {
    constexpr int64_t G = k_repack_float_rows;
    constexpr size_t step = G * 2;
    const int64_t kc2 = (kc + 1) / 2;
    const int64_t n_panels = (rows + k_mr - 1) / k_mr;
    for (int64_t pnl = 0; pnl < n_panels; ++pnl) {
        uint32_t * dst = ap + pnl * kc2 * k_mr;
        for (int gi = 0; gi < k_mr / G; ++gi) {
            const int64_t r0 = pnl * k_mr + gi * G;
            uint32_t * out = dst + gi * G;
            if (r0 >= rows) {
                for (int64_t q = 0; q < kc2; ++q) _mm512_storeu_si512(out + q * k_mr, _mm512_setzero_si512());
                continue;
            }
            const char * src = a + static_cast<size_t>((m0 + r0) / G * K + k0) * step;
            for (int64_t q = 0; q < kc2; ++q) {
                _mm512_storeu_si512(out + q * k_mr, bf16_dot::group_pairs(src + static_cast<size_t>(2 * q) * step, 2 * q + 1 < kc));
            }
        }
    }
}

// A pair panel (pack_a_pairs, pack_a_pairs_repacked): column q holds the
// pairs (k0 + 2q, k0 + 2q + 1) of k_mr rows, [q][k_mr] words; the
// micro-kernel's step is vdpbf16ps with a broadcast activation pair.
struct pair_madd {
    static __m512i bcast(uint32_t b) { return _mm512_set1_epi32(static_cast<int>(b)); }
    static __m512 madd(__m512 acc, __m512i a, __m512i b) { return bf16_dot::dot(acc, a, b); }
};
struct pair_panel {
    using step = pair_madd;
    const uint32_t * ap;
    __m512i load(int64_t q, int v) const { return _mm512_loadu_si512(ap + q * k_mr + 16 * v); }
};

// Activation pair tiles: tile t at shared + t K2 k_nr words ([q][k_nr],
// K2 = (K + 1) / 2; within the F32 tiles' space, gemm_f_shared_size).
uint32_t * b_pair_tile(const compute_params & p, const mm_dims & d, int64_t batch, int64_t n) {
    const int64_t t = batch * n_tiles_of(d) + n / k_nr;
    return static_cast<uint32_t *>(p.shared) + t * ((d.K + 1) / 2) * k_nr;
}

// Packs k_nr activation columns (col[j]: element k at col[j] + k nb0
// bytes) into a pair tile: each column's pairs by bf16_dot::to_pairs (32
// values at a time, gathered first when strided), then spread to
// [q][k_nr].
void pack_b_pairs(const char * const * col, size_t nb0, int64_t K, uint32_t * bp) {
    alignas(64) float xs[32];
    alignas(64) uint32_t pairs[16];
    for (int j = 0; j < k_nr; ++j) {
        for (int64_t k = 0; k < K; k += 32) {
            const int64_t n = std::min<int64_t>(32, K - k);
            const float * x = reinterpret_cast<const float *>(col[j] + static_cast<size_t>(k) * nb0);
            if (nb0 != sizeof(float)) {
                for (int64_t i = 0; i < n; ++i) xs[i] = read_f32(col[j] + static_cast<size_t>(k + i) * nb0);
                x = xs;
            }
            bf16_dot::to_pairs(x, n, pairs);
            for (int64_t q = 0; q < (n + 1) / 2; ++q) bp[(k / 2 + q) * k_nr + j] = pairs[q];
        }
    }
}

// gemm_f for BF16 weights on AVX512-BF16 builds: run's blocks, items and
// tiles with pair panels (pack_a_pairs, pack_a_pairs_repacked) and pair
// tiles (gemm_f_prepare) through micro_kernel (pair_panel). (No in-place reading
// of the repacked groups: they need vpermw to become pairs, done once per
// block by the packing rather than once per activation tile.) bench_ops
// BM_mul_mat_repack BF16 2048 x 2048 x 512, 1 thread on Zen 4: 151.6-206.5
// GFLOP/s, 1.38-1.78 of the F32 FMA peak (F16 in the same runs 76.4-108.8);
// 135M BF16 pp512, 1 thread: 407-416 -> 647-656 t/s.
void run_bf16(const compute_params & p, const mm_dims & d) {
    auto * ap_block = static_cast<uint32_t *>(p.wdata); // k_mc x k_kc / 2 pairs: within k_mc x k_kc floats
    const size_t nb0 = d.a->nb[0], nb1 = d.a->nb[1];
    const bool repacked = is_repacked(d.a);
    alignas(64) float ctile[k_nr * k_mr];
    for_each_block(p, d, [&](const mm_item & item, const char * a, int64_t mb, int64_t rows, int64_t k0, int64_t kc) {
        const int64_t kc2 = (kc + 1) / 2;
        if (repacked) {
            pack_a_pairs_repacked(a, d.K, mb, rows, k0, kc, ap_block);
        } else {
            pack_a_pairs(a, nb0, nb1, mb, rows, k0, kc, ap_block);
        }
        for (int64_t n = item.n0; n < item.n1; n += k_nr) {
            const int cols = static_cast<int>(std::min<int64_t>(k_nr, item.n1 - n));
            const uint32_t * bp = b_pair_tile(p, d, item.batch, n) + (k0 / 2) * k_nr;
            float * y[k_nr];
            for (int j = 0; j < k_nr; ++j) y[j] = dst_column(d, item.batch, n + std::min(j, cols - 1));
            for (int64_t r = 0; r < rows; r += k_mr) {
                const int valid = static_cast<int>(std::min<int64_t>(k_mr, rows - r));
                const uint32_t * ap = ap_block + (r / k_mr) * kc2 * k_mr;
                full_or_edge_tile(valid, cols, y, mb + r, k0 == 0, ctile, [&](auto mv, const auto & out) {
                    micro_kernel<decltype(mv)::value>(pair_panel{ap}, bp, kc2, out);
                });
            }
        }
    });
}
#endif // TSR_CPU_BF16DOT

template <int32_t T>
void run(const compute_params & p, const mm_dims & d) {
    auto * ap_block = static_cast<float *>(p.wdata); // k_mc x k_kc packed weights
    const size_t nb0 = d.a->nb[0], nb1 = d.a->nb[1];
    const bool repacked = is_repacked(d.a); // 2-D, rows a multiple of 16 (repack_eligible)
#ifdef TSR_CPU_AVX512
    const bool in_place = repacked && tuning().gemm_float_in_place; // else widened into ap_block
#endif
    constexpr size_t group_step = k_repack_float_rows * esize<T>(); // bytes per k of a repacked group
    alignas(64) float ctile[k_nr * k_mr];
    for_each_block(p, d, [&](const mm_item & item, const char * a, int64_t mb, int64_t rows, int64_t k0, int64_t kc) {
        const int64_t batch = item.batch, n0 = item.n0, n1 = item.n1;
        a_prefetch next_a; // the next K chunk of these rows
        const int64_t next_k0 = k0 + kc, next_kc = std::min(k_kc, d.K - next_k0);
        const int64_t slices = (n1 - n0 + k_nr - 1) / k_nr;
        if constexpr (T != TSR_TYPE_F32) {
            if (repacked) {
#ifdef TSR_CPU_AVX512
                if (!in_place) pack_a_repacked<T>(a, d.K, mb, rows, k0, kc, ap_block);
#else
                pack_a_repacked<T>(a, d.K, mb, rows, k0, kc, ap_block);
#endif
                if (next_k0 < d.K) {
                    next_a = a_prefetch(a + static_cast<size_t>(mb / k_repack_float_rows * d.K + next_k0) * group_step,
                                        static_cast<size_t>(d.K) * group_step, static_cast<size_t>(next_kc) * group_step,
                                        rows / k_repack_float_rows, slices);
                }
            }
        }
        if (!repacked) {
            pack_a<T>(a, nb0, nb1, mb, rows, k0, kc, ap_block);
            if (nb0 == esize<T>() && next_k0 < d.K) {
                next_a = a_prefetch(a + static_cast<size_t>(mb) * nb1 + static_cast<size_t>(next_k0) * esize<T>(), nb1,
                                    static_cast<size_t>(next_kc) * esize<T>(), rows, slices);
            }
        }
        for (int64_t n = n0; n < n1; n += k_nr) {
            next_a.slice((n - n0) / k_nr);
            const int cols = static_cast<int>(std::min<int64_t>(k_nr, n1 - n));
            const float * bp = b_tile(p, d, batch, n) + k0 * k_nr;
            float * y[k_nr];
            for (int j = 0; j < k_nr; ++j) y[j] = dst_column(d, batch, n + std::min(j, cols - 1));
            // The next tile's chunk, a slice per panel, into L1.
            const char * next_b =
                n + k_nr < n1 ? reinterpret_cast<const char *>(b_tile(p, d, batch, n + k_nr) + k0 * k_nr) : nullptr;
            const int64_t b_lines = kc * k_nr * 4 / 64, n_panels = (rows + k_mr - 1) / k_mr;
            for (int64_t r = 0; r < rows; r += k_mr) {
                if (next_b != nullptr) {
                    const int64_t pi = r / k_mr;
                    for (int64_t l = b_lines * pi / n_panels; l < b_lines * (pi + 1) / n_panels; ++l) {
                        _mm_prefetch(next_b + l * 64, _MM_HINT_T0);
                    }
                }
                const int valid = static_cast<int>(std::min<int64_t>(k_mr, rows - r));
                auto tile = [&](const auto & panel) {
#ifdef TSR_CPU_AVX512
                    full_or_edge_tile(valid, cols, y, mb + r, k0 == 0, ctile, [&](auto mv, const auto & out) {
                        micro_kernel<decltype(mv)::value>(panel, bp, kc, out);
                    });
#else
                    if (valid == k_mr && cols == k_nr) {
                        micro_kernel(panel, bp, kc, tile_to_dst{y, mb + r, k0 == 0});
                    } else {
                        micro_kernel(panel, bp, kc, tile_to_scratch{ctile});
                        store_tile(ctile, y, mb + r, valid, cols, k0 == 0);
                    }
#endif
                };
#ifdef TSR_CPU_AVX512
                if constexpr (T != TSR_TYPE_F32) {
                    if (in_place) { // the panel's groups; a short panel repeats its last group
                        group_panel<T> gp;
                        const int64_t last = (valid - 1) / k_repack_float_rows;
                        for (int64_t v = 0; v < k_mr / k_repack_float_rows; ++v) {
                            const int64_t grp = (mb + r) / k_repack_float_rows + std::min(v, last);
                            gp.g[v] = a + static_cast<size_t>(grp * d.K + k0) * group_step;
                        }
                        tile(gp);
                        continue;
                    }
                }
#endif
                tile(packed_panel{ap_block + (r / k_mr) * kc * k_mr});
            }
        }
    });
}

} // namespace

size_t gemm_f_work_size(const mm_dims & d) {
    if (gemm_f_amx_use(d)) return gemm_f_amx_work_size(d);
    if (gemm_f32_rows_use(d)) return gemm_f32_rows_work_size(d);
    return static_cast<size_t>(k_mc * k_kc) * sizeof(float);
}

size_t gemm_f_shared_size(const mm_dims & d) {
    if (gemm_f_amx_use(d)) return gemm_f_amx_shared_size(d);
    if (gemm_f32_rows_use(d)) return gemm_f32_rows_shared_size(d);
    size_t bytes = 0;
    const auto tiles = static_cast<size_t>(d.n_batch * n_tiles_of(d));
    if (__builtin_mul_overflow(tiles, static_cast<size_t>(d.K) * k_nr * sizeof(float), &bytes)) {
        throw std::length_error("gemm_f: packed activations exceed the address space");
    }
    return bytes;
}

int gemm_f_prepared_layout(const mm_dims & d) {
    if (gemm_f_amx_use(d)) return d.a->type == TSR_TYPE_F16 ? 2 : 3; // hi and lo tiles, or hi alone
    if (gemm_f32_rows_use(d)) return 4;
#ifdef TSR_CPU_BF16DOT
    return d.a->type == TSR_TYPE_BF16 ? 1 : 0;
#else
    return 0;
#endif
}

bool gemm_f_prepare(const compute_params & p, const mm_dims & d) {
    if (gemm_f_amx_use(d)) {
        gemm_f_amx_prepare(p, d);
        return true;
    }
    if (gemm_f32_rows_use(d)) {
        gemm_f32_rows_prepare(p, d);
        return true;
    }
    const int64_t n_tiles = n_tiles_of(d);
    const int64_t total = d.n_batch * n_tiles;
    const int64_t t0 = total * p.ith / p.nth, t1 = total * (p.ith + 1) / p.nth;
    const bool in_place = b_in_place(d);
    for (int64_t t = t0; t < t1; ++t) {
        const int64_t batch = t / n_tiles, n = (t % n_tiles) * k_nr;
        const char * col[k_nr];
        activation_columns(d, batch, n, col);
#ifdef TSR_CPU_BF16DOT
        if (d.a->type == TSR_TYPE_BF16) {
            pack_b_pairs(col, d.b->nb[0], d.K, b_pair_tile(p, d, batch, n));
            continue;
        }
#endif
        pack_activation_tile<k_nr>(d, col, in_place, b_tile(p, d, batch, n));
    }
    return true;
}

bool gemm_f(const compute_params & p, const mm_dims & d) {
    // Repacked weights are F16/BF16 (repack_group_rows): refuse any other
    // repacked type rather than read its layout as plain rows.
    if (is_repacked(d.a) && d.a->type == TSR_TYPE_F32) return false;
    if (gemm_f_amx_use(d)) {
        gemm_f_amx(p, d);
        return true;
    }
    if (gemm_f32_rows_use(d)) {
        gemm_f32_rows(p, d);
        return true;
    }
    switch (d.a->type) {
    case TSR_TYPE_F32: run<TSR_TYPE_F32>(p, d); return true;
    case TSR_TYPE_F16: run<TSR_TYPE_F16>(p, d); return true;
#ifdef TSR_CPU_BF16DOT
    case TSR_TYPE_BF16: run_bf16(p, d); return true;
#else
    case TSR_TYPE_BF16: run<TSR_TYPE_BF16>(p, d); return true;
#endif
    default: return false;
    }
}

#else // portable build: the generic kernel is used instead

size_t gemm_f_work_size(const mm_dims &) { return 0; }
size_t gemm_f_shared_size(const mm_dims &) { return 0; }
bool gemm_f_prepare(const compute_params &, const mm_dims &) { return false; }
int gemm_f_prepared_layout(const mm_dims &) { return 0; }
bool gemm_f(const compute_params &, const mm_dims &) { return false; }

#endif

} // namespace tessera::cpu

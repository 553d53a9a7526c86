// backends/cpu/ops/mul_mat_impl.hpp — the pieces of MUL_MAT shared by its
// paths (mul_mat.cpp chooses one per node):
//
//   generic   mul_mat_generic.cpp: portable dot products, any layout
//   matvec_f  matvec_f.cpp: float weights, N < k_gemm_min_n columns;
//             weights streamed once, row-contiguous, m-contiguous
//             (transposed, e.g. the V view of a KV cache) or repacked
//   matvec_q  matvec_q.cpp: Q8_0/Q4_0/Q5_0/Q5_1 weights, N < k_gemm_min_n; the
//             columns quantized to Q8_0 (q8_act.hpp), integer block dots
//   gemm_f    gemm_f.cpp: float weights, N >= k_gemm_min_n; packed panels,
//             register-blocked FMA micro-kernel
//   gemm_q    gemm_q.cpp: Q8_0/Q4_0/Q5_0/Q5_1 weights, N >= k_gemm_min_n; weight
//             rows interleaved into panels, integer micro-kernel
//   matvec_k  mul_mat_k.cpp: Q4_K/Q6_K weights, N < k_gemm_min_n; columns
//             quantized to Q8_K, the integer sums of vec_dot_k.hpp
//   gemm_k    gemm_k.cpp: Q4_K/Q6_K weights, N >= k_gemm_min_n; rows
//             unpacked into panels (from plain rows or repacked Q4_K
//             groups), integer micro-kernel, the same sums
//   matvec_k_repack  mul_mat_k_repack.cpp: repacked Q4_K weights,
//             N < k_gemm_min_n; the same sums, G rows per vector
//
// The path depends only on the node (types, shapes, strides), never on the
// thread count; within a path every output element is computed by the same
// operations in the same order however the work is split, so results are
// bit-identical for any number of threads. Internal to the CPU kernels.
#pragma once

#include <algorithm>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backends/cpu/compute.hpp"
#include "backends/cpu/ops/q8_act.hpp"
#include "backends/cpu/ops/tensor_access.hpp"
#include "backends/cpu/ops/work_queue.hpp"

namespace tessera::cpu {

// Columns per batch from which the GEMM paths are used.
constexpr int64_t k_gemm_min_n = 4;

// K chunk of the float GEMM's FMA chains (gemm_f.cpp). The one-token
// kernel for repacked float weights (matvec_f.cpp) chains over the same
// chunks, so that both give a row the same bits.
constexpr int64_t k_gemm_f_kc = 256;

// Elements per quantization block (Q8_0, Q4_0, Q5_0, Q5_1) and bytes per block.
constexpr int64_t k_qblock = 32;
constexpr size_t k_q8_0_block_bytes = 34;
constexpr size_t k_q4_0_block_bytes = 18;
constexpr size_t k_q5_0_block_bytes = 22;
constexpr size_t k_q5_1_block_bytes = 24;

// Bytes per block of one of those types (Q8_0 for any other).
constexpr size_t q_block_bytes(int32_t t) {
    return t == TSR_TYPE_Q4_0 ? k_q4_0_block_bytes
           : t == TSR_TYPE_Q5_0 ? k_q5_0_block_bytes
           : t == TSR_TYPE_Q5_1 ? k_q5_1_block_bytes
                                : k_q8_0_block_bytes;
}

// The portable path (mul_mat_generic.cpp).
size_t mul_mat_generic_work_size(const tsr_tensor * node);
bool compute_mul_mat_generic(const compute_params & p, tsr_tensor * dst);

// Shape of a supported MUL_MAT node: dst[M, N, B2, B3] = a[K, M, A2, A3]^T
// x b[K, N, B2, B3]; batch index = i2 + B2 * i3 (i2 < B2, i3 < B3) uses
// a's batch (i2 / r2, i3 / r3).
struct mm_dims {
    const tsr_tensor * a;
    const tsr_tensor * b;
    tsr_tensor * dst;
    int64_t K, M, N, B2, B3, r2, r3;
    int64_t n_batch;
};

// f(std::integral_constant<int32_t, T>{}) for `type` T one of the four
// block types of the integer kernels (Q4_0, Q5_0, Q5_1, Q8_0: matvec_q,
// gemm_q, mul_mat_repack); `other` for any other type.
template <class R, class F>
R for_q_type(int32_t type, R other, F f) {
    switch (type) {
    case TSR_TYPE_Q4_0: return f(std::integral_constant<int32_t, TSR_TYPE_Q4_0>{});
    case TSR_TYPE_Q5_0: return f(std::integral_constant<int32_t, TSR_TYPE_Q5_0>{});
    case TSR_TYPE_Q5_1: return f(std::integral_constant<int32_t, TSR_TYPE_Q5_1>{});
    case TSR_TYPE_Q8_0: return f(std::integral_constant<int32_t, TSR_TYPE_Q8_0>{});
    default: return other;
    }
}

inline mm_dims mm_dims_of(tsr_tensor * dst) {
    mm_dims d{};
    d.a = dst->src[0];
    d.b = dst->src[1];
    d.dst = dst;
    d.K = d.a->ne[0];
    d.M = d.a->ne[1];
    d.N = d.b->ne[1];
    d.B2 = d.b->ne[2];
    d.B3 = d.b->ne[3];
    d.r2 = d.b->ne[2] / d.a->ne[2];
    d.r3 = d.b->ne[3] / d.a->ne[3];
    d.n_batch = d.B2 * d.B3;
    return d;
}

// Start of the weight matrix used by batch `batch`.
inline const char * a_matrix(const mm_dims & d, int64_t batch) {
    const int64_t i2 = batch % d.B2, i3 = batch / d.B2;
    return row_ptr(d.a, 0, i2 / d.r2, i3 / d.r3);
}

// Start of dst column n of batch `batch` (elements packed along m).
inline float * dst_column(const mm_dims & d, int64_t batch, int64_t n) {
    // (No division for the first B2 batches, batch 0 of every 2-D product:
    // the GEMMs call this per column of every micro-tile.)
    const int64_t i2 = batch < d.B2 ? batch : batch % d.B2, i3 = batch < d.B2 ? 0 : batch / d.B2;
    return reinterpret_cast<float *>(row_ptr(d.dst, n, i2, i3));
}

// Copies `rows` floats of a micro-tile's column to dst column y: whole
// columns of 16 or 8 rows as fixed-size copies (vector moves). A copy of a
// run-time length went through rep movs, and with dst_column's division
// per column (now gone) took 11% of the samples of bench_ops' Q4_K AMX
// GEMM 2048 x 2048 x 512 (perf; 7% after, the rest packing).
inline void copy_column(const float * src, int rows, float * y) {
    switch (rows) {
    case 16: std::memcpy(y, src, 16 * sizeof(float)); return;
    case 8: std::memcpy(y, src, 8 * sizeof(float)); return;
    default: std::copy(src, src + rows, y);
    }
}

// True when b's columns can be read in place as packed, aligned F32.
inline bool b_in_place(const mm_dims & d) {
    return packed_aligned_rows(d.b, sizeof(float), alignof(float));
}

// Column n of b's batch as packed F32: in place when b_in_place, else
// gathered into buf (K floats).
inline const float * b_column(const mm_dims & d, bool in_place, int64_t batch, int64_t n, float * buf) {
    const int64_t i2 = batch % d.B2, i3 = batch / d.B2;
    const char * col = row_ptr(d.b, n, i2, i3);
    if (in_place) return reinterpret_cast<const float *>(col);
    for (int64_t i = 0; i < d.K; ++i) buf[i] = read_f32(col + static_cast<size_t>(i) * d.b->nb[0]);
    return buf;
}

// Quantizes columns [n0, n1) of batch `batch` of b into micro-tiles of
// layout `tile` at `tiles`, tile_bytes apart: column n goes to tile
// (n - n0) / tile.cols, slot (n - n0) % tile.cols. xbuf: d.K floats of
// scratch for a strided column. sum_shift as quantize_q8_act.
inline void quantize_q8_tiles(const mm_dims & d, bool in_place, int64_t batch, int64_t n0, int64_t n1, q8_tile tile,
                              char * tiles, size_t tile_bytes, float * xbuf, int sum_shift) {
    for (int64_t n = n0; n < n1; ++n) {
        char * t = tiles + static_cast<size_t>((n - n0) / tile.cols) * tile_bytes;
        quantize_q8_act(b_column(d, in_place, batch, n, xbuf), d.K / k_qblock, tile.column(t, static_cast<int>((n - n0) % tile.cols)),
                        sum_shift);
    }
}

// The quantized GEMMs' activations in the node's shared scratch (gemm_k,
// mul_mat_repack): micro-tiles of `cols` columns of tile_bytes each, tile
// t = batch * ceil(N / cols) + n / cols at p.shared + t * tile_bytes.
// shared_tiles: the first tile of the column block starting at n0 (a
// multiple of cols). for_each_shared_tile: calls fill(batch, n0, n1, tile)
// for thread p.ith's share of the tiles (columns [n0, n1) of the batch),
// a short last tile zeroed first (the AMX kernels read all its columns).
inline const char * shared_tiles(const compute_params & p, const mm_dims & d, int cols, size_t tile_bytes, int64_t batch,
                                 int64_t n0) {
    const int64_t per_batch = (d.N + cols - 1) / cols;
    return static_cast<const char *>(p.shared) + static_cast<size_t>(batch * per_batch + n0 / cols) * tile_bytes;
}
template <class Fill>
void for_each_shared_tile(const compute_params & p, const mm_dims & d, int cols, size_t tile_bytes, const Fill & fill) {
    const int64_t per_batch = (d.N + cols - 1) / cols, total = d.n_batch * per_batch;
    const int64_t t0 = total * p.ith / p.nth, t1 = total * (p.ith + 1) / p.nth;
    for (int64_t t = t0; t < t1; ++t) {
        const int64_t batch = t / per_batch, n0 = (t % per_batch) * cols, n1 = std::min<int64_t>(d.N, n0 + cols);
        char * tile = static_cast<char *>(p.shared) + static_cast<size_t>(t) * tile_bytes;
        if (n1 - n0 < cols) std::memset(tile, 0, tile_bytes);
        fill(batch, n0, n1, tile);
    }
}

// The vector paths. Each *_work_size is the per-thread scratch for the
// node (independent of the thread count); each compute function does
// thread p.ith's share and returns false only on a data error.
size_t matvec_f_work_size(const mm_dims & d);
bool matvec_f(const compute_params & p, const mm_dims & d);
size_t matvec_q_work_size(const mm_dims & d);
bool matvec_q(const compute_params & p, const mm_dims & d);
size_t gemm_f_work_size(const mm_dims & d);
// gemm_f packs b once for all threads into p.shared (gemm_f_shared_size
// bytes): each thread packs its part in gemm_f_prepare, then, after a
// barrier, gemm_f reads all of it.
size_t gemm_f_shared_size(const mm_dims & d);
bool gemm_f_prepare(const compute_params & p, const mm_dims & d);
// Which layout gemm_f_prepare packs b into for the product d: 2 and 3 for
// the AMX tiles of gemm_f_amx (F16, BF16 weights), 1 for BF16 pairs (BF16 weights on AVX512-BF16
// builds), 4 for gemm_f32_rows' 16-column tiles, 0 for F32 tiles. Two
// products over the same b with the same layout pack the same bytes.
int gemm_f_prepared_layout(const mm_dims & d);
bool gemm_f(const compute_params & p, const mm_dims & d);
// gemm_f of repacked F16 and BF16 weights on AMX-BF16 tiles (gemm_f_amx.cpp), which
// gemm_f and its work, shared and prepare functions hand over to where
// gemm_f_amx_use(d): TSR_CPU_AMX_BF16 builds, N >= k_gemm_min_n, the tile
// state granted and cpu_tuning::amx on. Never used in other builds.
bool gemm_f_amx_use(const mm_dims & d);
size_t gemm_f_amx_work_size(const mm_dims & d);
size_t gemm_f_amx_shared_size(const mm_dims & d);
void gemm_f_amx_prepare(const compute_params & p, const mm_dims & d);
void gemm_f_amx(const compute_params & p, const mm_dims & d);
// gemm_f of F32 weights in plain rows with the weights broadcast
// (gemm_f32_rows.cpp), which gemm_f and its work, shared and prepare
// functions hand over to where gemm_f32_rows_use(d): AVX-512 builds, F32
// row-contiguous weights not repacked, K > 0, N >= k_gemm_min_n and
// cpu_tuning::gemm_f32_rows on. The same bits as gemm_f's own F32 kernel.
// gemm_f32_rows_shared_size throws std::length_error when the size
// overflows.
bool gemm_f32_rows_use(const mm_dims & d);
// Whether this build uses gemm_f32_rows at all: AVX-512 and
// cpu_tuning::gemm_f32_rows (the device's GEMM_F32_ROWS feature).
bool gemm_f32_rows_enabled();
size_t gemm_f32_rows_work_size(const mm_dims & d);
size_t gemm_f32_rows_shared_size(const mm_dims & d);
void gemm_f32_rows_prepare(const compute_params & p, const mm_dims & d);
void gemm_f32_rows(const compute_params & p, const mm_dims & d);
size_t gemm_q_work_size(const mm_dims & d);
bool gemm_q(const compute_params & p, const mm_dims & d);
size_t mul_mat_k_work_size(const mm_dims & d);
bool mul_mat_k(const compute_params & p, const mm_dims & d);
size_t gemm_k_work_size(const mm_dims & d);
// gemm_k quantizes b once for all threads into p.shared (gemm_k_shared_size
// bytes), as gemm_f packs it: each thread its part in gemm_k_prepare, then
// gemm_k reads all of it. Layouts (gemm_k_prepared_layout): the micro-tile
// width and whether the block-sum pair words are those of Q4_K/Q5_K or of
// Q6_K (on AMX always Q4_K's: its Q6_K kernel reads none); two products
// over the same b with the same layout quantize the same bytes.
// gemm_k_shared_size throws std::length_error when the size overflows.
size_t gemm_k_shared_size(const mm_dims & d);
bool gemm_k_prepare(const compute_params & p, const mm_dims & d);
int gemm_k_prepared_layout(const mm_dims & d);
bool gemm_k(const compute_params & p, const mm_dims & d);
size_t mul_mat_k_repack_work_size(const mm_dims & d);
bool mul_mat_k_repack(const compute_params & p, const mm_dims & d);

// A grid of work items (batch, row block, column block), row block
// fastest, cut into contiguous per-thread ranges. Only the amount of work
// per item depends on the sizes chosen here, never the arithmetic.
struct mm_grid {
    int64_t rows_per_item;  // most rows of an item, a multiple of the caller's row granule
    int64_t cols_per_item;  // multiple of the caller's column granule
    int64_t n_rblocks, n_cblocks, n_items;
    int64_t row_granule, row_granules; // rows = row_granules granules (the last may be short)
};

// rows_max / cols_max: the preferred item size; the items are made smaller
// (down to the granules) when there would be fewer than 4 per thread, and
// the row blocks are evened out (sizes differ by one granule at most) and,
// where nth more blocks at most do it, counted so that nth divides the
// number of items.
mm_grid make_mm_grid(const mm_dims & d, int nth, int64_t row_granule, int64_t rows_max, int64_t col_granule,
                     int64_t cols_max);

// Item `it` of grid g: dst rows [m0, m1) x columns [n0, n1) of batch
// `batch`; items of one column block (`bc`, unique across batches) follow
// each other, so a kernel prepares a block's columns once for all its rows.
struct mm_item {
    int64_t batch, bc;
    int64_t m0, m1, n0, n1;
};
inline mm_item item_of(const mm_grid & g, const mm_dims & d, int64_t it) {
    mm_item r{};
    const int64_t rb = it % g.n_rblocks;
    r.bc = it / g.n_rblocks; // batch * n_cblocks + column block
    const int64_t cb = r.bc % g.n_cblocks;
    r.batch = r.bc / g.n_cblocks;
    // Row block rb: granules [rb q + floor(rb e / n_rblocks), the same for
    // rb + 1): q = row_granules / n_rblocks each, the e (remainder) longer
    // blocks spread evenly, so that every thread's contiguous share of the
    // items holds as many granules as another's, give or take one. (With
    // the e longer blocks first, 1B's 2048-row F16 products on 2 threads
    // gave one thread 23 granules and the other 20.)
    const int64_t q = g.row_granules / g.n_rblocks, e = g.row_granules % g.n_rblocks;
    r.m0 = (rb * q + rb * e / g.n_rblocks) * g.row_granule;
    r.m1 = std::min(d.M, ((rb + 1) * q + (rb + 1) * e / g.n_rblocks) * g.row_granule);
    r.n0 = cb * g.cols_per_item;
    r.n1 = std::min(d.N, r.n0 + g.cols_per_item);
    return r;
}

// The item loop of the float GEMMs (gemm_f.cpp, gemm_f32_rows.cpp): the
// items of grid g (columns in whole tiles of `tile` columns) from a
// work_queue, each as k_item_parts column parts, cut at whole tiles, an
// item's parts consecutive; fn(item) gets the item narrowed to the parts
// a thread took in one go (never empty). A thread's consecutive parts of
// one item are computed as one (its rows packed once), so an owner taking
// half its share at a time still packs each item once, while a thread
// that has finished steals a quarter of an item instead of a whole one,
// so the threads finish together. With whole items (1B F16 pp512 on 2
// threads: 8 to 10 items a product), the thread that finished first
// waited for the other's last item: 6.9% of thread 0's time. Parts change
// which thread computes which columns, never the arithmetic.
constexpr int64_t k_item_parts = 4;
template <class Fn>
void for_each_item_part(const compute_params & p, const mm_dims & d, const mm_grid & g, int64_t tile, const Fn & fn) {
    const int64_t tiles = (g.cols_per_item + tile - 1) / tile; // tiles of a full item
    const int64_t parts = p.nth > 1 ? std::min<int64_t>(k_item_parts, std::max<int64_t>(tiles, 1)) : 1;
    work_queue queue(p, g.n_items * parts, 1);
    for (item_range units{}; queue.next(units);) {
        for (int64_t u = units.begin; u < units.end;) {
            const int64_t it = u / parts;
            const int64_t u_end = std::min(units.end, (it + 1) * parts); // this item's parts in the range
            mm_item item = item_of(g, d, it);
            // Parts [u, u_end) of the item: tiles [t0, t1) of its columns.
            const int64_t t0 = (u - it * parts) * tiles / parts, t1 = (u_end - it * parts) * tiles / parts;
            const int64_t n_first = item.n0;
            item.n0 = std::min(item.n1, n_first + t0 * tile);
            item.n1 = std::min(item.n1, n_first + t1 * tile);
            u = u_end;
            if (item.n0 < item.n1) fn(item);
        }
    }
}

// The item loop of the panel GEMMs (gemm_q.cpp, gemm_k.cpp): items of KP
// rows x up to cols_max columns (make_mm_grid, row and column granules KP
// and KC), taken from a work_queue. Per item: the column block's
// activations prepared once (prepare_cols(batch, n0, n1); items of one
// block follow each other), the rows packed KP at a time
// (pack(a_matrix, m0, rows)), each packed panel multiplied with the
// block's micro-tiles of KC columns (tile(ncols, tile_index, out): out[c *
// KP + r] = row m0 + r . column n0 + KC tile_index + c) and the results
// copied to dst.
template <int KP, int KC, class Prepare, class Pack, class Tile>
void run_panel_gemm(const compute_params & p, const mm_dims & d, int64_t cols_max, Prepare && prepare_cols, Pack && pack,
                    Tile && tile) {
    const mm_grid g = make_mm_grid(d, p.nth, KP, KP, KC, cols_max);
    work_queue queue(p, g.n_items, 1);
    alignas(64) float otile[KC * KP];
    int64_t have_cols = -1; // (batch, column block) prepared
    for (item_range items{}; queue.next(items);) {
        for (int64_t it = items.begin; it < items.end; ++it) {
            const mm_item item = item_of(g, d, it);
            if (item.bc != have_cols) {
                prepare_cols(item.batch, item.n0, item.n1);
                have_cols = item.bc;
            }
            const char * a = a_matrix(d, item.batch);
            for (int64_t mp = item.m0; mp < item.m1; mp += KP) {
                const int64_t rows = std::min<int64_t>(KP, item.m1 - mp);
                pack(a, mp, rows);
                for (int64_t n = item.n0; n < item.n1; n += KC) {
                    const int ncols = static_cast<int>(std::min<int64_t>(KC, item.n1 - n));
                    tile(ncols, (n - item.n0) / KC, otile);
                    for (int c = 0; c < ncols; ++c) {
                        copy_column(otile + c * KP, static_cast<int>(rows), dst_column(d, item.batch, n + c) + mp);
                    }
                }
            }
        }
    }
}

} // namespace tessera::cpu

// backends/cpu/ops/gemm_f32_rows.cpp — MUL_MAT of F32 weights in plain
// rows with N >= k_gemm_min_n columns on AVX-512 builds, the operands'
// roles swapped against gemm_f.cpp: the weights are broadcast, the
// activations are the vectors.
//
// gemm_f.cpp packs a block of weight rows into k-major panels ([k][48]),
// which for row-major F32 weights means 8 x 8 transposes of every weight
// once per product: 6.5% of a 4096 x 512 x 4096 product on one thread
// (perf, stop 50), most of it waiting for the rows to come from memory.
// Here the micro-kernel keeps an 8-row x 48-column tile of dst^T in 24 zmm
// and for each k broadcasts the 8 weights W[m][k] (one per row) and
// multiplies them with 48 activation values loaded as 3 zmm from the
// packed activations ([k][16] tiles, packed once per node by
// gemm_f32_rows_prepare). The 8 rows' K chunk is only copied, as rows,
// into a contiguous 8 KiB panel in L1 (rows 16 KiB apart in the matrix
// would share L1 sets). The dst tile comes out transposed (a row's 48
// columns in 3 zmm), so an item's products are kept, row-major, in the
// thread's scratch and transposed into dst once, after its last K chunk.
//
// Loop nest per item (rows [m0, m1) x columns [n0, n1), make_mm_grid,
// for_each_item_part): K chunks of k_gemm_f_kc outermost, so the chunk of
// the item's packed activations (up to k_cols_max x 256 floats, 512 KiB)
// stays in L2 while every 8-row panel of the item passes over it, and the
// scratch (up to k_rows_max x k_cols_max floats, 512 KiB) is in L2 as
// well; each weight is read once per item.
//
// Measured (bench_blas_native, 4096 x 512 x 4096, an Emerald Rapids-class
// Xeon without AMX, 2 vCPUs under KVM, a noisy host: OpenBLAS itself
// varied by up to 1.5x between runs), five runs alternating
// TESSERA_CPU_GEMM_F32_ROWS 0 and 1, GFLOP/s panels -> rows: 1 thread
// best 145.8 -> 148.8, median of the pairs' ratios 1.03; 2 threads best
// 285.7 -> 290.8, median ratio 1.06. OpenBLAS's best in those runs: 150.0
// and 292.1. On a Zen 4 EPYC (family 0x19 model 0x11, 2 vCPUs, 1 MiB L2,
// stop 52), three runs alternating: 1 thread 104.4 -> 105.6, 107.7 ->
// 105.1, 106.1 -> 102.6 GFLOP/s (0.97-1.01); 2 threads 198.3 -> 209.6,
// 204.6 -> 209.5, 199.5 -> 200.1 (1.00-1.06); both paths 0.90-0.92 of
// the FMA peak on 1 thread and 1.03-1.15x OpenBLAS. Not a clear gain
// there, so on AMD the default stays gemm_f.cpp (cpu_tuning).
//
// Arithmetic: each dst element is, per K chunk of k_gemm_f_kc, a
// sequential FMA chain from zero, the chunk sums added in order: the same
// operations as gemm_f.cpp's run<F32> and matvec_f.cpp's repacked kernel,
// so the same bits whichever path, tile or thread computes it.
#include <algorithm>
#include <stdexcept>

#include "backends/cpu/ops/block_prefetch.hpp"
#include "backends/cpu/ops/mul_mat_impl.hpp"
#include "backends/cpu/ops/pack_columns.hpp"
#include "backends/cpu/ops/repack.hpp"
#include "backends/cpu/ops/simd.hpp"
#include "backends/cpu/ops/tuning.hpp"

namespace tessera::cpu {

#ifdef TSR_CPU_AVX512

namespace {

constexpr int k_rows = 8;              // weight rows per micro-panel (broadcast)
constexpr int k_tile = 16;             // columns per packed activation tile (one zmm)
constexpr int k_cols = 3 * k_tile;     // columns per micro-tile (3 zmm)
constexpr int64_t k_kc = k_gemm_f_kc;  // K chunk
// Rows per item (the scratch's rows): 256 rather than 512 leaves L2 room
// beside the scratch (512 KiB) and the activations' chunk (512 KiB):
// bench_blas 4096 x 512 x 4096 on 2 threads, runs alternating with the
// panels of gemm_f.cpp: 512 rows 2-5% slower in each of 3 pairs, 256 rows
// 2-10% faster in each of 5 (below).
constexpr int64_t k_rows_max = 256;
constexpr int64_t k_cols_max = 512;    // columns per item (scratch columns)

int64_t n_tiles_of(const mm_dims & d) { return (d.N + k_tile - 1) / k_tile; }

// Packed activations: tile t (columns 16 t .. 16 t + 15 of a batch) of
// batch `batch` at shared + (batch n_tiles + t) K 16 floats, [k][16]; a
// short last tile repeats its last column.
float * b_tile(const compute_params & p, const mm_dims & d, int64_t batch, int64_t n) {
    const int64_t t = batch * n_tiles_of(d) + n / k_tile;
    return static_cast<float *>(p.shared) + t * d.K * k_tile;
}

// t[r][16 v .. 16 v + 15] (+)= sum over k < kc of w[r][k] * bp_v[k][0..15],
// r < 8, v < MV: w is the panel (8 rows of k_kc floats), bp the first of
// MV consecutive activation tiles (tile_stride floats apart) at the chunk;
// t rows ld floats apart. first: store instead of add (the first chunk).
template <int MV>
void micro_kernel(const float * w, const float * bp, size_t tile_stride, int64_t kc, float * t, int64_t ld, bool first) {
    __m512 acc[k_rows][MV];
#pragma GCC unroll 8
    for (int r = 0; r < k_rows; ++r) {
#pragma GCC unroll 3
        for (int v = 0; v < MV; ++v) acc[r][v] = _mm512_setzero_ps();
    }
    for (int64_t k = 0; k < kc; ++k) {
        __m512 b[MV];
#pragma GCC unroll 3
        for (int v = 0; v < MV; ++v) b[v] = _mm512_load_ps(bp + v * tile_stride + k * k_tile);
#pragma GCC unroll 8
        for (int r = 0; r < k_rows; ++r) {
            const __m512 a = _mm512_set1_ps(w[r * k_kc + k]);
#pragma GCC unroll 3
            for (int v = 0; v < MV; ++v) acc[r][v] = _mm512_fmadd_ps(a, b[v], acc[r][v]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < k_rows; ++r) {
#pragma GCC unroll 3
        for (int v = 0; v < MV; ++v) {
            float * o = t + r * ld + 16 * v;
            _mm512_store_ps(o, first ? acc[r][v] : _mm512_add_ps(_mm512_load_ps(o), acc[r][v]));
        }
    }
}

// Copies rows [m, m + rows) x k [k0, k0 + kc) of the row-major matrix a
// (row stride nb1 bytes) into the panel w ([8][k_kc]); missing rows are 0.
void copy_panel(const char * a, size_t nb1, int64_t m, int64_t rows, int64_t k0, int64_t kc, float * w) {
    for (int r = 0; r < k_rows; ++r) {
        float * out = w + r * k_kc;
        if (r < rows) {
            std::memcpy(out, a + static_cast<size_t>(m + r) * nb1 + static_cast<size_t>(k0) * sizeof(float),
                        static_cast<size_t>(kc) * sizeof(float));
        } else {
            std::fill(out, out + kc, 0.0f);
        }
    }
}

// Writes the item's scratch t (rows x cols, row r at t + r ld) into dst
// columns n0 .. n0 + cols - 1 at rows m0 .. m0 + rows - 1: 8 x 8
// transposes, the edges element by element.
void store_transposed(const mm_dims & d, int64_t batch, const float * t, int64_t ld, int64_t m0, int64_t rows, int64_t n0,
                      int64_t cols) {
    int64_t c = 0;
    for (; c + 8 <= cols; c += 8) {
        float * y[8];
        for (int j = 0; j < 8; ++j) y[j] = dst_column(d, batch, n0 + c + j) + m0;
        int64_t r = 0;
        for (; r + 8 <= rows; r += 8) {
            __m256 v[8];
            for (int i = 0; i < 8; ++i) v[i] = _mm256_load_ps(t + (r + i) * ld + c);
            simd::transpose8x8(v);
            for (int j = 0; j < 8; ++j) _mm256_storeu_ps(y[j] + r, v[j]);
        }
        for (; r < rows; ++r) {
            for (int j = 0; j < 8; ++j) y[j][r] = t[r * ld + c + j];
        }
    }
    for (; c < cols; ++c) {
        float * y = dst_column(d, batch, n0 + c) + m0;
        for (int64_t r = 0; r < rows; ++r) y[r] = t[r * ld + c];
    }
}

// The item's products into the scratch t (ld = its columns rounded up to
// 16), then into dst.
void run_item(const compute_params & p, const mm_dims & d, const mm_item & item, float * w, float * t) {
    const char * a = a_matrix(d, item.batch);
    const size_t nb1 = d.a->nb[1];
    const int64_t cols = item.n1 - item.n0, ld = (cols + k_tile - 1) / k_tile * k_tile;
    const size_t tile_stride = static_cast<size_t>(d.K) * k_tile;
    const float * b0 = b_tile(p, d, item.batch, item.n0);
    const int64_t n_micro = (cols + k_cols - 1) / k_cols; // micro-tiles per panel
    for (int64_t k0 = 0; k0 < d.K; k0 += k_kc) {
        const int64_t kc = std::min(k_kc, d.K - k0);
        for (int64_t m = item.m0; m < item.m1; m += k_rows) {
            copy_panel(a, nb1, m, std::min<int64_t>(k_rows, item.m1 - m), k0, kc, w);
            // The next panel's rows (the item's first panel of the next K
            // chunk after its last), prefetched a slice per micro-tile.
            a_prefetch next;
            const bool last = m + k_rows >= item.m1;
            const int64_t pm = last ? item.m0 : m + k_rows, pk = last ? k0 + k_kc : k0;
            if (pk < d.K) {
                next = a_prefetch(a + static_cast<size_t>(pm) * nb1 + static_cast<size_t>(pk) * sizeof(float), nb1,
                                  static_cast<size_t>(std::min(k_kc, d.K - pk)) * sizeof(float),
                                  std::min<int64_t>(k_rows, item.m1 - pm), n_micro);
            }
            float * trow = t + (m - item.m0) * ld;
            for (int64_t n = 0; n < cols; n += k_cols) {
                next.slice(n / k_cols);
                const float * bp = b0 + (n / k_tile) * tile_stride + k0 * k_tile;
                switch (std::min<int64_t>(3, (cols - n + k_tile - 1) / k_tile)) {
                case 3: micro_kernel<3>(w, bp, tile_stride, kc, trow + n, ld, k0 == 0); break;
                case 2: micro_kernel<2>(w, bp, tile_stride, kc, trow + n, ld, k0 == 0); break;
                default: micro_kernel<1>(w, bp, tile_stride, kc, trow + n, ld, k0 == 0); break;
                }
            }
        }
    }
    store_transposed(d, item.batch, t, ld, item.m0, item.m1 - item.m0, item.n0, cols);
}

} // namespace

bool gemm_f32_rows_enabled() { return tuning().gemm_f32_rows; }

bool gemm_f32_rows_use(const mm_dims & d) {
    return d.a->type == TSR_TYPE_F32 && !is_repacked(d.a) && d.a->nb[0] == sizeof(float) && d.K > 0 &&
           d.N >= k_gemm_min_n && gemm_f32_rows_enabled();
}

size_t gemm_f32_rows_work_size(const mm_dims &) {
    // The panel, then the scratch (64-byte aligned: the panel is 8 KiB).
    return static_cast<size_t>(k_rows * k_kc + k_rows_max * k_cols_max) * sizeof(float);
}

size_t gemm_f32_rows_shared_size(const mm_dims & d) {
    size_t bytes = 0;
    const auto tiles = static_cast<size_t>(d.n_batch * n_tiles_of(d));
    if (__builtin_mul_overflow(tiles, static_cast<size_t>(d.K) * k_tile * sizeof(float), &bytes)) {
        throw std::length_error("gemm_f32_rows: packed activations exceed the address space");
    }
    return bytes;
}

void gemm_f32_rows_prepare(const compute_params & p, const mm_dims & d) {
    const int64_t n_tiles = n_tiles_of(d), total = d.n_batch * n_tiles;
    const bool in_place = b_in_place(d);
    for (int64_t t = total * p.ith / p.nth; t < total * (p.ith + 1) / p.nth; ++t) {
        const int64_t batch = t / n_tiles, n = (t % n_tiles) * k_tile;
        const char * col[k_tile];
        activation_columns(d, batch, n, col);
        pack_activation_tile<k_tile>(d, col, in_place, b_tile(p, d, batch, n));
    }
}

void gemm_f32_rows(const compute_params & p, const mm_dims & d) {
    auto * w = static_cast<float *>(p.wdata);
    float * t = w + k_rows * k_kc;
    const mm_grid g = make_mm_grid(d, p.nth, k_rows, k_rows_max, k_tile, k_cols_max);
    for_each_item_part(p, d, g, k_tile, [&](const mm_item & item) { run_item(p, d, item, w, t); });
}

#else // builds without AVX-512: gemm_f.cpp's kernels

bool gemm_f32_rows_enabled() { return false; }
bool gemm_f32_rows_use(const mm_dims &) { return false; }
size_t gemm_f32_rows_work_size(const mm_dims &) { return 0; }
size_t gemm_f32_rows_shared_size(const mm_dims &) { return 0; }
void gemm_f32_rows_prepare(const compute_params &, const mm_dims &) {}
void gemm_f32_rows(const compute_params &, const mm_dims &) {}

#endif

} // namespace tessera::cpu

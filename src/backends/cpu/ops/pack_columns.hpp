// backends/cpu/ops/pack_columns.hpp — packing of F32 activation columns
// into k-major tiles ([k][W] floats) for the float GEMMs (gemm_f.cpp: W =
// its micro-tile width, 6 or 8; gemm_f32_rows.cpp: W = 16, one zmm).
// Vector builds only (TSR_CPU_AVX2); in an unnamed namespace (internal
// linkage, one copy per instruction-set variant, as the kernels that use
// it). Internal to the CPU kernels.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "backends/cpu/ops/mul_mat_impl.hpp"
#include "backends/cpu/ops/simd.hpp"

#ifdef TSR_CPU_AVX2

namespace tessera::cpu {

namespace {

// Packs k [0, K) of W packed F32 columns (col[j] points at the column's
// first element) into bp[k][W]: a contiguous tile the micro-kernels load
// or broadcast from. (Reading the columns in place instead makes W
// streams whose strides are often multiples of 4 KiB, which share L1 sets
// and evict each other.) Columns go through 8 x 8 transposes in groups of
// up to 8; a group's width is 8, or 6 (AVX2 gemm_f) at the end.
template <int W>
void pack_columns(const float * const * col, int64_t K, float * bp) {
    static_assert(W % 8 == 0 || W % 8 == 6, "groups of 8 columns and at most one of 6");
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
        for (int g = 0; g < W; g += 8) {
            const int gw = std::min(W - g, 8);
            __m256 v[8];
            for (int i = 0; i < 8; ++i) v[i] = i < gw ? _mm256_loadu_ps(col[g + i] + k) : _mm256_setzero_ps();
            simd::transpose8x8(v);
            for (int j = 0; j < 8; ++j) {
                float * dst = bp + (k + j) * W + g;
                if (gw == 8) {
                    _mm256_storeu_ps(dst, v[j]);
                } else {
                    _mm_storeu_ps(dst, _mm256_castps256_ps128(v[j]));
                    _mm_storel_pi(reinterpret_cast<__m64 *>(dst + 4), _mm256_extractf128_ps(v[j], 1));
                }
            }
        }
    }
    for (; k < K; ++k) {
        for (int j = 0; j < W; ++j) bp[k * W + j] = col[j][k];
    }
}

// The W columns n .. n + W - 1 of batch `batch` of d.b (row_ptr; past
// d.N the last column repeats, so a short last tile holds valid numbers).
template <int W>
void activation_columns(const mm_dims & d, int64_t batch, int64_t n, const char * (&col)[W]) {
    for (int j = 0; j < W; ++j) col[j] = row_ptr(d.b, std::min(n + j, d.N - 1), batch % d.B2, batch / d.B2);
}

// Packs the K elements of the W columns col (activation_columns) into
// tile[k][W] as F32: by pack_columns when in_place (b_in_place: packed,
// aligned F32), else element by element through read_f32 (strided or
// non-F32 activations).
template <int W>
void pack_activation_tile(const mm_dims & d, const char * const * col, bool in_place, float * tile) {
    if (in_place) {
        const float * c[W];
        for (int j = 0; j < W; ++j) c[j] = reinterpret_cast<const float *>(col[j]);
        pack_columns<W>(c, d.K, tile);
        return;
    }
    const size_t nb0 = d.b->nb[0];
    for (int64_t k = 0; k < d.K; ++k) {
        for (int j = 0; j < W; ++j) tile[k * W + j] = read_f32(col[j] + static_cast<size_t>(k) * nb0);
    }
}

} // namespace

} // namespace tessera::cpu

#endif // TSR_CPU_AVX2

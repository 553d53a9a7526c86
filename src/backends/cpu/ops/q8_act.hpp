// backends/cpu/ops/q8_act.hpp — activations quantized on the fly for the
// integer MUL_MAT kernels: the Q8_0 quantization (core/types.hpp: per block
// of 32 values d = amax / 127 stored as F16, q = round(x / d) in -127..127)
// in a split layout the vector kernels read directly. Per block b:
//
//   qs   32 int8 at qs + b * qs_stride        the quants
//   d    float at d + b * aux_stride (bytes)  F16(amax / 127) widened to F32
//   sum  int32 at sum + b * aux_stride        (sum of the 32 quants) << sum_shift,
//                                             for kernels that feed weights to
//                                             vpmaddubsw/vpdpbusd as unsigned
//                                             bytes w + 2^shift and subtract it
//
// Plain columns (q8_col_at) keep the parts apart (qs_stride 32, aux_stride
// 4); the GEMM kernels interleave the columns of a micro-tile instead
// (q8_tile: gemm_q.cpp, mul_mat_repack.cpp).
// The values are bit-identical to quantize_row_q8_0_ref (same scale, same
// round-half-away-from-zero, clamped to -127..127) whatever the
// instruction set, so the quantization step never differs between
// variants; except that a block holding a NaN gets a NaN scale (and zero
// quants), so that every product it enters is NaN: the reference
// quantizer (for weights) skips NaN values, and a NaN activation would
// vanish into finite logits. The same for Q8_K (quantize_q8_k_act).
// Internal to the CPU kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tessera/core/types.hpp"

namespace tessera::cpu {

// Where one quantized column lives.
struct q8_col {
    int8_t * qs;
    float * d;
    int32_t * sum;
    size_t qs_stride;  // bytes between blocks' quants
    size_t aux_stride; // bytes between blocks' d (and sum)

    int8_t * qs_of(int64_t b) const { return qs + static_cast<size_t>(b) * qs_stride; }
    float * d_of(int64_t b) const {
        return reinterpret_cast<float *>(reinterpret_cast<char *>(d) + static_cast<size_t>(b) * aux_stride);
    }
    int32_t * sum_of(int64_t b) const {
        return reinterpret_cast<int32_t *>(reinterpret_cast<char *>(sum) + static_cast<size_t>(b) * aux_stride);
    }
};

// A micro-tile of `cols` columns quantized together, per block of 32:
// [cols x 32 quants][cols scales (F32)][cols sums << shift (int32)], so a
// GEMM micro-kernel reads one block of all its columns from one place.
struct q8_tile {
    int cols;
    constexpr size_t block_bytes() const { return static_cast<size_t>(cols) * 40; }
    constexpr size_t d_offset() const { return static_cast<size_t>(cols) * 32; }   // of the scales in a block
    constexpr size_t sum_offset() const { return static_cast<size_t>(cols) * 36; } // of the sums in a block
    // Column c (0 <= c < cols) of the tile at `tile`.
    q8_col column(char * tile, int c) const {
        const auto cs = static_cast<size_t>(c);
        return q8_col{reinterpret_cast<int8_t *>(tile + cs * 32), reinterpret_cast<float *>(tile + d_offset() + cs * 4),
                      reinterpret_cast<int32_t *>(tile + sum_offset() + cs * 4), block_bytes(), block_bytes()};
    }
};

// Bytes of one plain quantized column of n_blocks blocks (each part 64-byte
// aligned when the column starts 64-byte aligned).
size_t q8_col_bytes(int64_t n_blocks);

// The parts of the plain column stored at `base` (64-byte aligned).
q8_col q8_col_at(void * base, int64_t n_blocks);

// Quantizes x[0 .. 32 n_blocks) (packed F32) into col; the block sums are
// stored multiplied by 2^sum_shift (0 <= sum_shift <= 7).
void quantize_q8_act(const float * x, int64_t n_blocks, const q8_col & col, int sum_shift);

// Quantizes x[0 .. 256 n_super) (packed F32) to Q8_K blocks (core/types.hpp),
// bit-identical to quantize_row_q8_k_ref: the activations of the K-quant
// kernels (vec_dot_k.hpp).
void quantize_q8_k_act(const float * x, int64_t n_super, block_q8_k * y);

} // namespace tessera::cpu

// tessera/core/types.hpp — element types: the traits table, F16/BF16
// conversion and reference (scalar) quantize/dequantize.
//
// Block layouts are byte-identical to GGUF (the GGUF specification in the
// ggml repository, docs/gguf.md, and its ggml_type block definitions):
//   Q8_0: 32 elements per block = { f16 d; int8 qs[32]; }           34 bytes
//         x[i] = d * qs[i]
//   Q4_0: 32 elements per block = { f16 d; uint8 qs[16]; }          18 bytes
//         element j (0..15) is the low nibble of qs[j], element j+16 the
//         high nibble; x = d * (nibble - 8)
//   Q5_0: 32 elements per block = { f16 d; uint8 qh[4]; uint8 qs[16]; } 22 bytes
//         (GGUF type id 6) the low four bits of element j as in Q4_0, its
//         fifth bit is bit j of qh read as a little-endian uint32;
//         x = d * (q - 16), q = 0..31
//   Q5_1: 32 elements per block = { f16 d; f16 m; uint8 qh[4]; uint8 qs[16]; }
//         24 bytes (GGUF type id 7): q as in Q5_0; x = d * q + m
//   Q4_K, Q5_K, Q6_K, Q8_K: super-blocks of 256 elements, see block_q4_k,
//         block_q5_k, block_q6_k and block_q8_k below.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "tessera/tensor.h"

namespace tessera {

using type = tsr_type;

// Converts n elements of one block-quantized or float row to F32.
// x points at n / block_size blocks; n must be a multiple of block_size.
using to_float_fn = void (*)(const void * x, float * y, int64_t n);
// Quantizes/converts n F32 values into the type's blocks (reference, scalar).
using from_float_fn = void (*)(const float * x, void * y, int64_t n);

struct type_traits {
    const char * name;      // GGUF type name, e.g. "Q8_0"
    int64_t block_size;     // elements per block (1 for plain types)
    size_t type_size;       // bytes per block
    bool is_quantized;
    to_float_fn to_float;       // null where not implemented yet
    from_float_fn from_float;   // null where not implemented yet
};

// True when `t` is a type id this build knows the layout of (every id the
// GGUF format currently defines).
bool type_is_valid(int32_t t);

// Traits of a valid type. Throws tessera::error for an unknown id.
const type_traits & get_type_traits(int32_t t);

// Name of a type, or "unknown(<id>)" for an invalid id. Never throws.
std::string_view type_name(int32_t t);

// Type id from its GGUF name ("F32", "Q4_0", ... case-sensitive); throws
// tessera::error naming the string when unknown.
type type_from_name(std::string_view name);

// Bytes of a row of n elements; throws when n is not a multiple of the block size.
size_t row_size(type t, int64_t n);

// --- F16 / BF16 (IEEE 754 binary16 and bfloat16) ----------------------------
// Conversions are exact: to_f32 is exact for every bit pattern; from_f32
// rounds to nearest, ties to even; Inf stays Inf, NaN stays NaN (quiet).
using f16_bits = uint16_t;
using bf16_bits = uint16_t;

float f16_to_f32(f16_bits h);
f16_bits f32_to_f16(float f);
float bf16_to_f32(bf16_bits h);
bf16_bits f32_to_bf16(float f);

// Block structs, byte-identical to GGUF.
struct block_q8_0 {
    f16_bits d;
    int8_t qs[32];
};
static_assert(sizeof(block_q8_0) == 34);

struct block_q4_0 {
    f16_bits d;
    uint8_t qs[16];
};
static_assert(sizeof(block_q4_0) == 18);

struct block_q5_0 {
    f16_bits d;
    uint8_t qh[4]; // fifth bits: bit j (little-endian uint32) belongs to element j
    uint8_t qs[16];
};
static_assert(sizeof(block_q5_0) == 22);

struct block_q5_1 {
    f16_bits d;    // scale
    f16_bits m;    // offset (the block's minimum)
    uint8_t qh[4]; // fifth bits, as in block_q5_0
    uint8_t qs[16];
};
static_assert(sizeof(block_q5_1) == 24);

// Reference quantization (round to nearest), with id = 1 / d (0 when d is
// 0) computed once per block in F32 and x * id, not x / d (the two differ
// in the last bit, and then q can differ by 1), as the reference does:
//   Q8_0: d = amax / 127, q = round(x * id), stored d = F16(d)
//   Q4_0: d = max / -8 where max is the signed value of largest magnitude,
//         q = min(15, (int)(x * id + 8.5)), stored d = F16(d)
//   Q5_0: d = max / -16 (max as for Q4_0: the first element of largest
//         |x|, its sign kept, becomes q = 0), id = 1 / d (0 when d is 0),
//         q = min(31, (int)(x * id + 16.5)) truncated toward zero; the
//         bytes of the format's reference quantizer (quantize_row_q5_0_ref
//         in ggml's ggml-quants.c, the definition used to write GGUF files)
// n must be a multiple of 32 (throws tessera::error otherwise).
void quantize_row_q8_0_ref(const float * x, block_q8_0 * y, int64_t n);
void dequantize_row_q8_0(const block_q8_0 * x, float * y, int64_t n);
void quantize_row_q4_0_ref(const float * x, block_q4_0 * y, int64_t n);
void dequantize_row_q4_0(const block_q4_0 * x, float * y, int64_t n);
void quantize_row_q5_0_ref(const float * x, block_q5_0 * y, int64_t n);
void dequantize_row_q5_0(const block_q5_0 * x, float * y, int64_t n);
//   Q5_1: per block lo = min x, hi = max x, d = (hi - lo) / 31, id = 1 / d
//         (0 when d is 0), q = (int)((x - lo) * id + 0.5) (nearest, halves
//         up), stored d = F16(d), m = F16(lo): the bytes of the format's
//         reference quantizer (quantize_row_q5_1_ref in ggml-quants.c).
void quantize_row_q5_1_ref(const float * x, block_q5_1 * y, int64_t n);
void dequantize_row_q5_1(const block_q5_1 * x, float * y, int64_t n);

// --- K-quants: super-blocks of 256 elements (GGUF block layouts) ------------
inline constexpr int64_t qk_k = 256; // elements per super-block

// Q4_K, 144 bytes: 8 sub-blocks of 32 elements, each with a 6-bit scale
// sc[j] and a 6-bit min m[j] (0..63) packed into scales[12]:
//   j < 4:  sc = scales[j] & 63,  m = scales[j + 4] & 63
//   j >= 4: sc = (scales[j + 4] & 15) | (scales[j - 4] >> 6) << 4
//           m  = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4
// qs[32 i .. 32 i + 32) hold sub-block 2i in their low nibbles and sub-block
// 2i + 1 in their high nibbles (element order). Element value:
//   x = (d * sc[j]) * q - (dmin * m[j]),  q = 0..15
struct block_q4_k {
    f16_bits d;    // super-block scale of the scales
    f16_bits dmin; // super-block scale of the mins
    uint8_t scales[12];
    uint8_t qs[128];
};
static_assert(sizeof(block_q4_k) == 144);

// Q5_K, 176 bytes: Q4_K's d, dmin and packed 6-bit scales and mins, and a
// fifth bit per element: qh[l] bit j is the fifth bit of element l of
// sub-block j (element 32 j + l). Element value:
//   x = (d * sc[j]) * q - (dmin * m[j]),  q = nibble | fifth bit << 4 = 0..31
// (the nibble as in Q4_K: qs[32 i + l], low for sub-block 2i, high for 2i + 1)
struct block_q5_k {
    f16_bits d;
    f16_bits dmin;
    uint8_t scales[12];
    uint8_t qh[32];
    uint8_t qs[128];
};
static_assert(sizeof(block_q5_k) == 176);

// Q6_K, 210 bytes: 16 sub-blocks of 16 elements with int8 scales sc[16].
// Quants q = 0..63: low 4 bits in ql, high 2 bits in qh. In each half h
// (elements 128 h .. 128 h + 127; ql + 64 h, qh + 32 h) for l = 0..31:
//   element l      : ql[l] & 15       | (qh[l] >> 0 & 3) << 4
//   element l + 32 : ql[l + 32] & 15  | (qh[l] >> 2 & 3) << 4
//   element l + 64 : ql[l] >> 4       | (qh[l] >> 4 & 3) << 4
//   element l + 96 : ql[l + 32] >> 4  | (qh[l] >> 6 & 3) << 4
// Element value: x = (d * sc[e / 16]) * (q - 32).
struct block_q6_k {
    uint8_t ql[128];
    uint8_t qh[64];
    int8_t scales[16];
    f16_bits d;
};
static_assert(sizeof(block_q6_k) == 210);

// Q8_K, 292 bytes: the 8-bit intermediate format of K-quant dot products.
// x = d * qs[i]; bsums[j] = sum of qs[16 j .. 16 j + 16).
struct block_q8_k {
    float d;
    int8_t qs[256];
    int16_t bsums[16];
};
static_assert(sizeof(block_q8_k) == 292);

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K (or Q5_K) block.
inline void q4_k_scale_min(const uint8_t * scales, int j, uint8_t & sc, uint8_t & m) {
    if (j < 4) {
        sc = scales[j] & 63;
        m = scales[j + 4] & 63;
    } else {
        sc = static_cast<uint8_t>((scales[j + 4] & 15) | ((scales[j - 4] >> 6) << 4));
        m = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
    }
}

// Dequantization as the element values above define it (F32 products in
// the order written). n must be a multiple of 256; throws tessera::error
// otherwise.
void dequantize_row_q4_k(const block_q4_k * x, float * y, int64_t n);
void dequantize_row_q5_k(const block_q5_k * x, float * y, int64_t n);
void dequantize_row_q6_k(const block_q6_k * x, float * y, int64_t n);
void dequantize_row_q8_k(const block_q8_k * x, float * y, int64_t n);

// Reference quantizers (scalar). Any valid blocks decode the same way in
// every reader; these choose them as follows:
//   Q4_K: per sub-block of 32, lo = min(0, min x), hi = max(0, max x),
//         scale (hi - lo) / 15 and min -lo; d = max scale / 63 and
//         dmin = max min / 63 (stored as F16), sc and m rounded to the
//         nearest of 0..63, then q = round((x + dmin m) / (d sc)) clamped
//         to 0..15 using the stored F16 values.
//   Q5_K: as Q4_K with 31 levels: scale (hi - lo) / 31, q clamped to 0..31.
//   Q6_K: per sub-block of 16, s = v / -32 with v the value of largest
//         magnitude; d = max |s| / 127 (F16), sc = round(s / d), then
//         q = round(x / (d sc)) clamped to -32..31, stored as q + 32.
//   Q8_K: the activation format of the K-quant kernels, chosen as the
//         reference implementation (llama.cpp's quantize_row_q8_K_ref)
//         does, so that activations quantize identically: with v the first
//         value of largest magnitude (sign kept), iscale = -127 / v (F32),
//         q = round(iscale x) with ties to even, clamped to -127..127 (NaN
//         to 0), d = 1 / iscale (so v maps to -127 and d < 0 when v > 0);
//         an all-zero super-block gets d = 0.
void quantize_row_q4_k_ref(const float * x, block_q4_k * y, int64_t n);
void quantize_row_q5_k_ref(const float * x, block_q5_k * y, int64_t n);
void quantize_row_q6_k_ref(const float * x, block_q6_k * y, int64_t n);
void quantize_row_q8_k_ref(const float * x, block_q8_k * y, int64_t n);

} // namespace tessera

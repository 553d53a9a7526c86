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

// Reference quantization (round to nearest):
//   Q8_0: d = amax / 127, q = round(x / d)
//   Q4_0: d = max / -8 where max is the signed value of largest magnitude,
//         q = min(15, (int)(x / d + 8.5))
void quantize_row_q8_0_ref(const float * x, block_q8_0 * y, int64_t n);
void dequantize_row_q8_0(const block_q8_0 * x, float * y, int64_t n);
void quantize_row_q4_0_ref(const float * x, block_q4_0 * y, int64_t n);
void dequantize_row_q4_0(const block_q4_0 * x, float * y, int64_t n);

} // namespace tessera

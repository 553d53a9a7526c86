// backends/cpu/ops/tensor_access.hpp — small inline helpers the kernels share:
// strided element addressing, row enumeration, splitting work between
// threads, and scalar F16/BF16 loads that the compiler can vectorize.
// Internal to the CPU backend.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "tessera/core/types.hpp"
#include "tessera/tensor.h"

namespace tessera::cpu {

// Half-open range [begin, end) of work items.
struct item_range {
    int64_t begin;
    int64_t end;
};

// Thread ith's share of n items: contiguous, sizes differ by at most one.
inline item_range split_items(int64_t n, int ith, int nth) {
    const int64_t base = n / nth;
    const int64_t extra = n % nth;
    const int64_t begin = ith * base + (ith < extra ? ith : extra);
    return {begin, begin + base + (ith < extra ? 1 : 0)};
}

// Row number r (0 .. ne[1]*ne[2]*ne[3]-1) split into its (i1, i2, i3) indices.
struct row_index {
    int64_t i1;
    int64_t i2;
    int64_t i3;
};

inline row_index unravel_row(const tsr_tensor * t, int64_t r) {
    const int64_t i1 = r % t->ne[1];
    const int64_t r2 = r / t->ne[1];
    return {i1, r2 % t->ne[2], r2 / t->ne[2]};
}

inline int64_t count_rows(const tsr_tensor * t) {
    return t->ne[1] * t->ne[2] * t->ne[3];
}

inline int64_t count_elements(const tsr_tensor * t) {
    return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
}

// Address of element (0, i1, i2, i3), i.e. the start of a row.
inline char * row_ptr(const tsr_tensor * t, int64_t i1, int64_t i2, int64_t i3) {
    return static_cast<char *>(t->data) + static_cast<size_t>(i1) * t->nb[1] +
           static_cast<size_t>(i2) * t->nb[2] + static_cast<size_t>(i3) * t->nb[3];
}

inline char * row_ptr(const tsr_tensor * t, const row_index & r) {
    return row_ptr(t, r.i1, r.i2, r.i3);
}

// True when every row start of t is aligned to `align` bytes and elements
// are packed within rows (nb[0] == elem_size), so a row can be read through
// a typed pointer.
inline bool packed_aligned_rows(const tsr_tensor * t, size_t elem_size, size_t align) {
    const auto bits = reinterpret_cast<uintptr_t>(t->data) | t->nb[1] | t->nb[2] | t->nb[3];
    return t->nb[0] == elem_size && bits % align == 0;
}

// F16 (IEEE 754 binary16) -> F32, exact for every bit pattern. Branch-free
// so loops over it vectorize: the sign and magnitude bits moved into F32
// position and scaled by 2^112 rebias normals and normalize subnormals
// exactly; for Inf/NaN (F16 exponent 31) the scaled exponent is then forced
// to all ones, keeping the payload.
inline float f16_to_f32_inline(uint16_t h) {
    const uint32_t mag = static_cast<uint32_t>(h & 0x7fffu) << 13;
    const uint32_t bits = mag | (static_cast<uint32_t>(h & 0x8000u) << 16);
    const float scaled = std::bit_cast<float>(bits) * 0x1p112f;
    const uint32_t special = 0u - static_cast<uint32_t>(mag >= (0x7c00u << 13));
    return std::bit_cast<float>(std::bit_cast<uint32_t>(scaled) | (special & 0x7f800000u));
}

// BF16 -> F32: bfloat16 is the upper half of a binary32.
inline float bf16_to_f32_inline(uint16_t h) {
    return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

inline float read_f32(const char * p) {
    float v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

inline void write_f32(char * p, float v) {
    std::memcpy(p, &v, sizeof v);
}

inline uint16_t read_u16(const char * p) {
    uint16_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// True for the element types whose single elements the kernels load and
// store directly (F32, F16, BF16).
inline bool is_float_type(int32_t t) {
    return t == TSR_TYPE_F32 || t == TSR_TYPE_F16 || t == TSR_TYPE_BF16;
}

// Loads one element of a float type (F32/F16/BF16) as F32.
inline float load_as_f32(int32_t type, const char * p) {
    switch (type) {
    case TSR_TYPE_F16: return f16_to_f32_inline(read_u16(p));
    case TSR_TYPE_BF16: return bf16_to_f32_inline(read_u16(p));
    default: return read_f32(p);
    }
}

// Stores v into one element of a float type (F32/F16/BF16), rounding to
// nearest even for F16/BF16 (the core's conversions).
inline void store_from_f32(int32_t type, char * p, float v) {
    switch (type) {
    case TSR_TYPE_F16: {
        const uint16_t h = f32_to_f16(v);
        std::memcpy(p, &h, sizeof h);
        break;
    }
    case TSR_TYPE_BF16: {
        const uint16_t h = f32_to_bf16(v);
        std::memcpy(p, &h, sizeof h);
        break;
    }
    default: write_f32(p, v);
    }
}

// Bytes of one element of a float type.
inline size_t float_type_size(int32_t t) {
    return t == TSR_TYPE_F32 ? 4 : 2;
}

// Reads element (i0, i1, i2) of an I32 or I64 index tensor as int64.
inline int64_t read_index(const tsr_tensor * idx, int64_t i0, int64_t i1, int64_t i2) {
    const char * p = static_cast<const char *>(idx->data) + static_cast<size_t>(i0) * idx->nb[0] +
                     static_cast<size_t>(i1) * idx->nb[1] + static_cast<size_t>(i2) * idx->nb[2];
    if (idx->type == TSR_TYPE_I64) {
        int64_t v;
        std::memcpy(&v, p, sizeof v);
        return v;
    }
    int32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// Rounds n up to a multiple of 64 (scratch regions keep cache-line alignment).
inline size_t align64(size_t n) {
    return (n + 63) & ~static_cast<size_t>(63);
}

} // namespace tessera::cpu

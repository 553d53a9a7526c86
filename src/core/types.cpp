// core/types.cpp — the element-type traits table, F16/BF16 conversion and
// the reference Q8_0/Q4_0/Q5_0/Q5_1 quantization (K-quants: types_k.cpp).
//
// Block sizes and byte sizes are facts of the GGUF format (ggml_type block
// definitions, ggml-common.h in the ggml repository; GGUF spec docs/gguf.md).
// This file is compiled for the baseline ISA: conversions are portable bit
// manipulation, no F16C or other intrinsics.
#include "tessera/core/types.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "tessera/core/error.hpp"

namespace tessera {

namespace {

uint32_t f32_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

float bits_f32(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

// Float -> int conversion guarded against NaN/out-of-range (UB in C++); for
// finite inputs of the reference quantizers the value is always in range.
int to_int_trunc(float v, int lo, int hi) {
    if (!(v >= static_cast<float>(lo) && v <= static_cast<float>(hi))) {
        return v > 0 ? hi : (v < 0 ? lo : 0); // NaN -> 0
    }
    return static_cast<int>(v);
}

// --- per-type row converters -------------------------------------------------

void f32_to_float(const void * x, float * y, int64_t n) {
    std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float));
}
void f32_from_float(const float * x, void * y, int64_t n) {
    std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float));
}

void f16_row_to_float(const void * x, float * y, int64_t n) {
    const auto * h = static_cast<const f16_bits *>(x);
    for (int64_t i = 0; i < n; ++i) y[i] = f16_to_f32(h[i]);
}
void f16_row_from_float(const float * x, void * y, int64_t n) {
    auto * h = static_cast<f16_bits *>(y);
    for (int64_t i = 0; i < n; ++i) h[i] = f32_to_f16(x[i]);
}

void bf16_row_to_float(const void * x, float * y, int64_t n) {
    const auto * h = static_cast<const bf16_bits *>(x);
    for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(h[i]);
}
void bf16_row_from_float(const float * x, void * y, int64_t n) {
    auto * h = static_cast<bf16_bits *>(y);
    for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(x[i]);
}

void q8_0_to_float(const void * x, float * y, int64_t n) {
    dequantize_row_q8_0(static_cast<const block_q8_0 *>(x), y, n);
}
void q8_0_from_float(const float * x, void * y, int64_t n) {
    quantize_row_q8_0_ref(x, static_cast<block_q8_0 *>(y), n);
}
void q4_0_to_float(const void * x, float * y, int64_t n) {
    dequantize_row_q4_0(static_cast<const block_q4_0 *>(x), y, n);
}
void q4_0_from_float(const float * x, void * y, int64_t n) {
    quantize_row_q4_0_ref(x, static_cast<block_q4_0 *>(y), n);
}

void q5_0_to_float(const void * x, float * y, int64_t n) {
    dequantize_row_q5_0(static_cast<const block_q5_0 *>(x), y, n);
}
void q5_0_from_float(const float * x, void * y, int64_t n) {
    quantize_row_q5_0_ref(x, static_cast<block_q5_0 *>(y), n);
}
void q5_1_to_float(const void * x, float * y, int64_t n) {
    dequantize_row_q5_1(static_cast<const block_q5_1 *>(x), y, n);
}
void q5_1_from_float(const float * x, void * y, int64_t n) {
    quantize_row_q5_1_ref(x, static_cast<block_q5_1 *>(y), n);
}

void q4_k_to_float(const void * x, float * y, int64_t n) {
    dequantize_row_q4_k(static_cast<const block_q4_k *>(x), y, n);
}
void q4_k_from_float(const float * x, void * y, int64_t n) {
    quantize_row_q4_k_ref(x, static_cast<block_q4_k *>(y), n);
}
void q6_k_to_float(const void * x, float * y, int64_t n) {
    dequantize_row_q6_k(static_cast<const block_q6_k *>(x), y, n);
}
void q5_k_to_float(const void * x, float * y, int64_t n) {
    dequantize_row_q5_k(static_cast<const block_q5_k *>(x), y, n);
}
void q5_k_from_float(const float * x, void * y, int64_t n) {
    quantize_row_q5_k_ref(x, static_cast<block_q5_k *>(y), n);
}
void q6_k_from_float(const float * x, void * y, int64_t n) {
    quantize_row_q6_k_ref(x, static_cast<block_q6_k *>(y), n);
}
void q8_k_to_float(const void * x, float * y, int64_t n) {
    dequantize_row_q8_k(static_cast<const block_q8_k *>(x), y, n);
}
void q8_k_from_float(const float * x, void * y, int64_t n) {
    quantize_row_q8_k_ref(x, static_cast<block_q8_k *>(y), n);
}

// --- the table ----------------------------------------------------------------

constexpr int64_t QK = 32;   // elements per block of the "legacy" quants
constexpr int64_t QK_K = 256; // elements per super-block of the K/IQ/TQ quants

using table_t = std::array<type_traits, TSR_TYPE_COUNT>;

constexpr table_t make_table() {
    table_t t{}; // name == nullptr marks an id retired by the format
    auto set = [&](tsr_type id, const char * name, int64_t bs, size_t ts, bool q,
                   to_float_fn tf = nullptr, from_float_fn ff = nullptr) {
        t[id] = type_traits{name, bs, ts, q, tf, ff};
    };
    set(TSR_TYPE_F32, "F32", 1, 4, false, f32_to_float, f32_from_float);
    set(TSR_TYPE_F16, "F16", 1, 2, false, f16_row_to_float, f16_row_from_float);
    set(TSR_TYPE_Q4_0, "Q4_0", QK, 2 + QK / 2, true, q4_0_to_float, q4_0_from_float);   // 18
    set(TSR_TYPE_Q4_1, "Q4_1", QK, 2 * 2 + QK / 2, true);                                 // 20
    set(TSR_TYPE_Q5_0, "Q5_0", QK, 2 + 4 + QK / 2, true, q5_0_to_float, q5_0_from_float);   // 22
    set(TSR_TYPE_Q5_1, "Q5_1", QK, 2 * 2 + 4 + QK / 2, true, q5_1_to_float, q5_1_from_float); // 24
    set(TSR_TYPE_Q8_0, "Q8_0", QK, 2 + QK, true, q8_0_to_float, q8_0_from_float);         // 34
    set(TSR_TYPE_Q8_1, "Q8_1", QK, 2 * 2 + QK, true);                                     // 36
    set(TSR_TYPE_Q2_K, "Q2_K", QK_K, QK_K / 16 + QK_K / 4 + 2 * 2, true);                 // 84
    set(TSR_TYPE_Q3_K, "Q3_K", QK_K, QK_K / 8 + QK_K / 4 + 12 + 2, true);                 // 110
    set(TSR_TYPE_Q4_K, "Q4_K", QK_K, 2 * 2 + 12 + QK_K / 2, true, q4_k_to_float, q4_k_from_float); // 144
    set(TSR_TYPE_Q5_K, "Q5_K", QK_K, 2 * 2 + 12 + QK_K / 8 + QK_K / 2, true, q5_k_to_float, q5_k_from_float); // 176
    set(TSR_TYPE_Q6_K, "Q6_K", QK_K, QK_K / 2 + QK_K / 4 + QK_K / 16 + 2, true, q6_k_to_float, q6_k_from_float); // 210
    set(TSR_TYPE_Q8_K, "Q8_K", QK_K, 4 + QK_K + (QK_K / 16) * 2, true, q8_k_to_float, q8_k_from_float); // 292
    set(TSR_TYPE_IQ2_XXS, "IQ2_XXS", QK_K, 2 + (QK_K / 8) * 2, true);                     // 66
    set(TSR_TYPE_IQ2_XS, "IQ2_XS", QK_K, 2 + (QK_K / 8) * 2 + QK_K / 32, true);           // 74
    set(TSR_TYPE_IQ3_XXS, "IQ3_XXS", QK_K, 2 + 3 * QK_K / 8, true);                       // 98
    set(TSR_TYPE_IQ1_S, "IQ1_S", QK_K, 2 + QK_K / 8 + (QK_K / 32) * 2, true);             // 50
    set(TSR_TYPE_IQ4_NL, "IQ4_NL", QK, 2 + QK / 2, true);                                 // 18
    set(TSR_TYPE_IQ3_S, "IQ3_S", QK_K, 2 + QK_K / 4 + QK_K / 32 + QK_K / 8 + QK_K / 64, true); // 110
    set(TSR_TYPE_IQ2_S, "IQ2_S", QK_K, 2 + QK_K / 4 + QK_K / 32 + QK_K / 32, true);       // 82
    set(TSR_TYPE_IQ4_XS, "IQ4_XS", QK_K, 2 + 2 + QK_K / 64 + QK_K / 2, true);             // 136
    set(TSR_TYPE_I8, "I8", 1, 1, false);
    set(TSR_TYPE_I16, "I16", 1, 2, false);
    set(TSR_TYPE_I32, "I32", 1, 4, false);
    set(TSR_TYPE_I64, "I64", 1, 8, false);
    set(TSR_TYPE_F64, "F64", 1, 8, false);
    set(TSR_TYPE_IQ1_M, "IQ1_M", QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32, true);           // 56
    set(TSR_TYPE_BF16, "BF16", 1, 2, false, bf16_row_to_float, bf16_row_from_float);
    set(TSR_TYPE_TQ1_0, "TQ1_0", QK_K, (QK_K - 4 * QK_K / 64) / 5 + QK_K / 64 + 2, true); // 54
    set(TSR_TYPE_TQ2_0, "TQ2_0", QK_K, QK_K / 4 + 2, true);                               // 66
    set(TSR_TYPE_MXFP4, "MXFP4", QK, 1 + QK / 2, true);                                   // 17
    return t;
}

const table_t k_table = make_table();

} // namespace

bool type_is_valid(int32_t t) {
    return t >= 0 && t < TSR_TYPE_COUNT && k_table[static_cast<size_t>(t)].name != nullptr;
}

const type_traits & get_type_traits(int32_t t) {
    if (!type_is_valid(t)) {
        throw error(fmt::format("unknown tensor type id {}", t));
    }
    return k_table[static_cast<size_t>(t)];
}

std::string_view type_name(int32_t t) {
    if (type_is_valid(t)) return k_table[static_cast<size_t>(t)].name;
    // Per-thread buffer: the view stays valid until this thread's next call.
    static thread_local std::string buf;
    buf = fmt::format("unknown({})", t);
    return buf;
}

type type_from_name(std::string_view name) {
    for (size_t i = 0; i < k_table.size(); ++i) {
        if (k_table[i].name != nullptr && name == k_table[i].name) {
            return static_cast<type>(i);
        }
    }
    throw error(fmt::format("unknown tensor type name '{}'", name));
}

size_t row_size(type t, int64_t n) {
    const type_traits & tr = get_type_traits(t);
    if (n < 0 || n % tr.block_size != 0) {
        throw error(fmt::format("row_size: {} elements is not a multiple of the {} block size {}", n,
                                tr.name, tr.block_size));
    }
    size_t bytes = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(n / tr.block_size), tr.type_size, &bytes)) {
        throw error(fmt::format("row_size: {} elements of {} overflow the byte size", n, tr.name));
    }
    return bytes;
}

// --- F16 / BF16 ------------------------------------------------------------------
// IEEE 754-2008 binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
// bfloat16: the upper 16 bits of a binary32.

float f16_to_f32(f16_bits h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1fu;
    const uint32_t m = h & 0x3ffu;
    if (e == 0x1f) { // Inf / NaN: payload moves to the top of the f32 mantissa
        return bits_f32(sign | 0x7f800000u | (m << 13));
    }
    if (e == 0) { // zero / subnormal: m * 2^-24, exact in f32
        const float v = static_cast<float>(m) * 0x1p-24f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((e + (127 - 15)) << 23) | (m << 13));
}

f16_bits f32_to_f16(float f) {
    const uint32_t x = f32_bits(f);
    const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) {
        if (ax == 0x7f800000u) return sign | 0x7c00u; // Inf
        // NaN: keep the top 10 payload bits, force the quiet bit.
        return static_cast<f16_bits>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    }
    if (ax >= 0x477ff000u) { // >= 65520 = 65504 + half an ulp: ties-to-even goes up
        return sign | 0x7c00u;
    }
    if (ax < 0x38800000u) { // below 2^-14: f16 subnormal or zero
        if (ax <= 0x33000000u) return sign; // <= 2^-25 rounds to zero (2^-25 is a tie to 0)
        // value / 2^-24 = mant * 2^(e - 126), with e in 102..112 the shift is 14..24.
        const uint32_t e = ax >> 23;
        const uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126 - e;
        uint32_t q = mant >> shift;
        const uint32_t rem = mant & ((1u << shift) - 1);
        const uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u))) ++q; // may carry into 0x400 = 2^-14: correct
        return static_cast<f16_bits>(sign | q);
    }
    // Normal: rebias the exponent (127 -> 15) and round off 13 mantissa bits;
    // a carry out of the mantissa correctly bumps the exponent.
    uint32_t h = (ax - ((127u - 15u) << 23)) >> 13;
    const uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
    return static_cast<f16_bits>(sign | h);
}

float bf16_to_f32(bf16_bits h) {
    return bits_f32(static_cast<uint32_t>(h) << 16);
}

bf16_bits f32_to_bf16(float f) {
    const uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) { // NaN: truncate payload, set the quiet bit
        return static_cast<bf16_bits>((x >> 16) | 0x0040u);
    }
    // Round to nearest even on the low 16 bits; overflow carries into Inf,
    // subnormals round the same way (bf16 has f32's exponent range).
    const uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
    return static_cast<bf16_bits>(rounded >> 16);
}

// --- Q8_0 / Q4_0 / Q5_0 reference ----------------------------------------------------
// Block definitions and the reference quantizer as defined by the format
// (ggml quantize_row_q8_0_ref / quantize_row_q4_0_ref semantics, written here
// from the definition in types.hpp).

namespace {
void check_blocks(const char * what, int64_t n) {
    if (n < 0 || n % QK != 0) {
        throw error(fmt::format("{}: n = {} is not a multiple of the block size {}", what, n, QK));
    }
}
} // namespace

void quantize_row_q8_0_ref(const float * x, block_q8_0 * y, int64_t n) {
    check_blocks("quantize_row_q8_0_ref", n);
    for (int64_t b = 0; b < n / QK; ++b) {
        const float * xb = x + b * QK;
        float amax = 0.0f;
        for (int64_t j = 0; j < QK; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = f32_to_f16(d);
        for (int64_t j = 0; j < QK; ++j) {
            y[b].qs[j] = static_cast<int8_t>(to_int_trunc(std::round(xb[j] * id), -127, 127));
        }
    }
}

void dequantize_row_q8_0(const block_q8_0 * x, float * y, int64_t n) {
    check_blocks("dequantize_row_q8_0", n);
    for (int64_t b = 0; b < n / QK; ++b) {
        const float d = f16_to_f32(x[b].d);
        for (int64_t j = 0; j < QK; ++j) y[b * QK + j] = d * static_cast<float>(x[b].qs[j]);
    }
}

void quantize_row_q4_0_ref(const float * x, block_q4_0 * y, int64_t n) {
    check_blocks("quantize_row_q4_0_ref", n);
    for (int64_t b = 0; b < n / QK; ++b) {
        const float * xb = x + b * QK;
        float amax = 0.0f; // largest |x| seen so far
        float max = 0.0f;  // the signed value that has it (first one wins ties)
        for (int64_t j = 0; j < QK; ++j) {
            if (amax < std::fabs(xb[j])) {
                amax = std::fabs(xb[j]);
                max = xb[j];
            }
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = f32_to_f16(d);
        for (int64_t j = 0; j < QK / 2; ++j) {
            // (int8) truncation toward zero, then clamp to 15 (the element equal
            // to -max maps to 16.5 before the clamp).
            const int q0 = std::min(15, to_int_trunc(xb[j] * id + 8.5f, -128, 127));
            const int q1 = std::min(15, to_int_trunc(xb[j + QK / 2] * id + 8.5f, -128, 127));
            y[b].qs[j] = static_cast<uint8_t>((q0 & 0x0f) | ((q1 & 0x0f) << 4));
        }
    }
}

void dequantize_row_q4_0(const block_q4_0 * x, float * y, int64_t n) {
    check_blocks("dequantize_row_q4_0", n);
    for (int64_t b = 0; b < n / QK; ++b) {
        const float d = f16_to_f32(x[b].d);
        for (int64_t j = 0; j < QK / 2; ++j) {
            y[b * QK + j] = d * static_cast<float>((x[b].qs[j] & 0x0f) - 8);
            y[b * QK + j + QK / 2] = d * static_cast<float>((x[b].qs[j] >> 4) - 8);
        }
    }
}

// Q5_0: written from the block description in types.hpp. The scale is
// chosen like Q4_0's (the signed value of largest magnitude maps to q = 0),
// with 16 levels on either side of zero instead of 8.

namespace {
// qh as the little-endian uint32 the format defines, whatever the host order.
uint32_t q5_high_bits(const uint8_t * qh) {
    return static_cast<uint32_t>(qh[0]) | static_cast<uint32_t>(qh[1]) << 8 | static_cast<uint32_t>(qh[2]) << 16 |
           static_cast<uint32_t>(qh[3]) << 24;
}

// Stores the 5-bit quants q[0..32) of a Q5_0/Q5_1 block: nibbles into qs
// (element j in the low nibble of qs[j], j + 16 in the high one), fifth
// bits into qh.
void put_q5_quants(const int * q, uint8_t * qs, uint8_t * qh) {
    uint32_t h = 0;
    std::memset(qs, 0, 16);
    for (int j = 0; j < 32; ++j) {
        const int nibble = q[j] & 0x0f;
        qs[j % 16] = static_cast<uint8_t>(qs[j % 16] | (j < 16 ? nibble : nibble << 4));
        h |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
    }
    for (int i = 0; i < 4; ++i) qh[i] = static_cast<uint8_t>(h >> (8 * i));
}

// The 5-bit quant of element j of a Q5_0/Q5_1 block.
int q5_quant(const uint8_t * qs, uint32_t qh, int64_t j) {
    const int nibble = j < 16 ? (qs[j] & 0x0f) : (qs[j - 16] >> 4);
    return nibble | static_cast<int>((qh >> j) & 1) << 4;
}
} // namespace

void quantize_row_q5_0_ref(const float * x, block_q5_0 * y, int64_t n) {
    check_blocks("quantize_row_q5_0_ref", n);
    for (int64_t b = 0; b < n / QK; ++b) {
        const float * xb = x + b * QK;
        float amax = 0.0f; // largest |x| seen so far
        float max = 0.0f;  // the signed value that has it (first one wins ties)
        for (int64_t j = 0; j < QK; ++j) {
            if (amax < std::fabs(xb[j])) {
                amax = std::fabs(xb[j]);
                max = xb[j];
            }
        }
        const float d = max / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        block_q5_0 & out = y[b];
        out.d = f32_to_f16(d);
        int q[QK];
        for (int64_t j = 0; j < QK; ++j) {
            // x * id lies in [-16, 16]: + 16.5 and truncation toward zero
            // round to nearest; the element equal to -max reaches 32.5 and is
            // clamped to 31. (Negative results cannot occur for finite input;
            // their low five bits would be stored, as a byte cast keeps them.)
            q[j] = std::min(31, to_int_trunc(xb[j] * id + 16.5f, -128, 127));
        }
        put_q5_quants(q, out.qs, out.qh);
    }
}

void dequantize_row_q5_0(const block_q5_0 * x, float * y, int64_t n) {
    check_blocks("dequantize_row_q5_0", n);
    for (int64_t b = 0; b < n / QK; ++b) {
        const float d = f16_to_f32(x[b].d);
        const uint32_t qh = q5_high_bits(x[b].qh);
        for (int64_t j = 0; j < QK; ++j) y[b * QK + j] = d * static_cast<float>(q5_quant(x[b].qs, qh, j) - 16);
    }
}

// Q5_1: written from the block description in types.hpp; the quantizer
// spreads the block's range [min, max] over the 32 levels.

void quantize_row_q5_1_ref(const float * x, block_q5_1 * y, int64_t n) {
    check_blocks("quantize_row_q5_1_ref", n);
    for (int64_t b = 0; b < n / QK; ++b) {
        const float * xb = x + b * QK;
        float lo = std::numeric_limits<float>::max(), hi = -std::numeric_limits<float>::max();
        for (int64_t j = 0; j < QK; ++j) {
            lo = std::min(lo, xb[j]);
            hi = std::max(hi, xb[j]);
        }
        const float d = (hi - lo) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        block_q5_1 & out = y[b];
        out.d = f32_to_f16(d);
        out.m = f32_to_f16(lo);
        int q[QK];
        // (x - lo) * id lies in [0, 31]: + 0.5 and truncation round to
        // nearest; the byte the format's quantizer keeps is the low 5 bits.
        for (int64_t j = 0; j < QK; ++j) q[j] = to_int_trunc((xb[j] - lo) * id + 0.5f, 0, 255) & 31;
        put_q5_quants(q, out.qs, out.qh);
    }
}

void dequantize_row_q5_1(const block_q5_1 * x, float * y, int64_t n) {
    check_blocks("dequantize_row_q5_1", n);
    for (int64_t b = 0; b < n / QK; ++b) {
        const float d = f16_to_f32(x[b].d);
        const float m = f16_to_f32(x[b].m);
        const uint32_t qh = q5_high_bits(x[b].qh);
        for (int64_t j = 0; j < QK; ++j) y[b * QK + j] = d * static_cast<float>(q5_quant(x[b].qs, qh, j)) + m;
    }
}

} // namespace tessera

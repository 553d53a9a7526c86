// tests/backends/cpu/ref_util.hpp — test-side helpers for the CPU op tests:
// random data, element access in double through ne/nb, and decoders for
// F16, BF16, Q8_0, Q4_0 and Q5_0 written here from the format definitions
// (IEEE 754 binary16; bfloat16 = upper half of binary32; GGUF block layouts
// as documented in include/tessera/core/types.hpp). Nothing here calls the
// kernels or the core's conversions, so the reference side is independent.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/graph_compute.hpp"
#include "tessera/core/graph.hpp"
#include "tessera/core/ops.hpp"
#include "tessera/core/tensor.hpp"
#include "tessera/core/types.hpp"

namespace tessera::cpu::test {

inline double ref_f16(uint16_t h) {
    const int sign = (h >> 15) & 1;
    const int e = (h >> 10) & 0x1f;
    const int m = h & 0x3ff;
    double v;
    if (e == 0) {
        v = std::ldexp(static_cast<double>(m), -24);
    } else if (e == 31) {
        v = m == 0 ? INFINITY : NAN;
    } else {
        v = std::ldexp(1.0 + m / 1024.0, e - 15);
    }
    return sign ? -v : v;
}

inline double ref_bf16(uint16_t h) {
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

// A random F16 bit pattern of magnitude in [2^-6, 2^2), random sign.
inline uint16_t random_f16_bits(std::mt19937 & rng) {
    std::uniform_int_distribution<int> exp(9, 16), mant(0, 1023), sign(0, 1);
    return static_cast<uint16_t>((sign(rng) << 15) | (exp(rng) << 10) | mant(rng));
}

// A random BF16 bit pattern of magnitude in [2^-6, 2^2), random sign.
inline uint16_t random_bf16_bits(std::mt19937 & rng) {
    std::uniform_int_distribution<int> exp(121, 128), mant(0, 127), sign(0, 1);
    return static_cast<uint16_t>((sign(rng) << 15) | (exp(rng) << 7) | mant(rng));
}

// Address of element (i0, i1, i2, i3) for plain (block size 1) types.
// For each k, the largest |x| in k's block of 32 (the Q8_0 block the kernel
// quantizes activations in): bounds the activation quantization error.
// x.size() must be a multiple of 32; amax gets the same size.
inline void block_amax(const std::vector<double> & x, std::vector<double> & amax) {
    amax.resize(x.size());
    for (size_t k0 = 0; k0 < x.size(); k0 += 32) {
        double m = 0;
        for (size_t k = k0; k < k0 + 32; ++k) m = std::max(m, std::fabs(x[k]));
        for (size_t k = k0; k < k0 + 32; ++k) amax[k] = m;
    }
}

inline char * elem_ptr(const tsr_tensor * t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return static_cast<char *>(t->data) + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
}

// Element (i0, i1, i2, i3) of a tensor as double, decoded test-side.
inline double get(const tsr_tensor * t, int64_t i0, int64_t i1 = 0, int64_t i2 = 0, int64_t i3 = 0) {
    switch (t->type) {
    case TSR_TYPE_F32: {
        float v;
        std::memcpy(&v, elem_ptr(t, i0, i1, i2, i3), 4);
        return v;
    }
    case TSR_TYPE_F16:
    case TSR_TYPE_BF16: {
        uint16_t h;
        std::memcpy(&h, elem_ptr(t, i0, i1, i2, i3), 2);
        return t->type == TSR_TYPE_F16 ? ref_f16(h) : ref_bf16(h);
    }
    case TSR_TYPE_I32: {
        int32_t v;
        std::memcpy(&v, elem_ptr(t, i0, i1, i2, i3), 4);
        return v;
    }
    case TSR_TYPE_Q8_0:
    case TSR_TYPE_Q4_0: {
        // Block b = i0 / 32 starts at b * nb[0] within the row.
        const char * blk = static_cast<const char *>(t->data) + (i0 / 32) * t->nb[0] + i1 * t->nb[1] +
                           i2 * t->nb[2] + i3 * t->nb[3];
        uint16_t dh;
        std::memcpy(&dh, blk, 2);
        const double d = ref_f16(dh);
        const int j = static_cast<int>(i0 % 32);
        if (t->type == TSR_TYPE_Q8_0) return d * static_cast<int8_t>(blk[2 + j]);
        const auto byte = static_cast<uint8_t>(blk[2 + (j % 16)]);
        const int q = j < 16 ? (byte & 0x0f) : (byte >> 4);
        return d * (q - 8);
    }
    case TSR_TYPE_Q5_0: {
        // Block: f16 d, qh (4 bytes: bit j of the little-endian uint32 is
        // element j's fifth bit), qs (16 bytes of nibbles as in Q4_0).
        const auto * blk = reinterpret_cast<const uint8_t *>(static_cast<const char *>(t->data) + (i0 / 32) * t->nb[0] +
                                                             i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3]);
        const double d = ref_f16(static_cast<uint16_t>(blk[0] | blk[1] << 8));
        const int j = static_cast<int>(i0 % 32);
        const int low = j < 16 ? (blk[6 + j] & 0x0f) : (blk[6 + j - 16] >> 4);
        const int fifth = (blk[2 + j / 8] >> (j % 8)) & 1;
        return d * ((low | fifth << 4) - 16);
    }
    case TSR_TYPE_Q5_1: {
        // Block: f16 d, f16 m, qh and qs as in Q5_0; x = d q + m.
        const auto * blk = reinterpret_cast<const uint8_t *>(static_cast<const char *>(t->data) + (i0 / 32) * t->nb[0] +
                                                             i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3]);
        const double d = ref_f16(static_cast<uint16_t>(blk[0] | blk[1] << 8));
        const double m = ref_f16(static_cast<uint16_t>(blk[2] | blk[3] << 8));
        const int j = static_cast<int>(i0 % 32);
        const int low = j < 16 ? (blk[8 + j] & 0x0f) : (blk[8 + j - 16] >> 4);
        const int fifth = (blk[4 + j / 8] >> (j % 8)) & 1;
        return d * (low | fifth << 4) + m;
    }
    case TSR_TYPE_Q4_K:
    case TSR_TYPE_Q5_K:
    case TSR_TYPE_Q6_K: {
        // Super-block i0 / 256, decoded by the core (tested against
        // hand-built blocks in tests/core/test_types_k.cpp).
        const char * blk = static_cast<const char *>(t->data) + (i0 / 256) * t->nb[0] + i1 * t->nb[1] +
                           i2 * t->nb[2] + i3 * t->nb[3];
        float y[256];
        get_type_traits(t->type).to_float(blk, y, 256);
        return y[i0 % 256];
    }
    default: ADD_FAILURE() << "get: unsupported type " << t->type; return 0.0;
    }
}

inline void set_f32(tsr_tensor * t, float v, int64_t i0, int64_t i1 = 0, int64_t i2 = 0, int64_t i3 = 0) {
    std::memcpy(elem_ptr(t, i0, i1, i2, i3), &v, 4);
}

inline void set_i32(tsr_tensor * t, int32_t v, int64_t i0, int64_t i1 = 0, int64_t i2 = 0) {
    std::memcpy(elem_ptr(t, i0, i1, i2, 0), &v, 4);
}

inline void set_i64(tsr_tensor * t, int64_t v, int64_t i0, int64_t i1 = 0, int64_t i2 = 0) {
    std::memcpy(elem_ptr(t, i0, i1, i2, 0), &v, 8);
}

// Calls f(i0, i1, i2, i3) for every element index of t.
template <class F>
void for_each_index(const tsr_tensor * t, F f) {
    for (int64_t i3 = 0; i3 < t->ne[3]; ++i3)
        for (int64_t i2 = 0; i2 < t->ne[2]; ++i2)
            for (int64_t i1 = 0; i1 < t->ne[1]; ++i1)
                for (int64_t i0 = 0; i0 < t->ne[0]; ++i0) f(i0, i1, i2, i3);
}

// Fills every element of an F32 tensor (any strides) with uniform values.
inline void fill_uniform(tsr_tensor * t, std::mt19937 & rng, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> dist(lo, hi);
    for_each_index(t, [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) { set_f32(t, dist(rng), i0, i1, i2, i3); });
}

// Fills a packed tensor's raw bytes: F16/BF16 with random_*_bits, Q8_0/Q4_0/
// Q5_0 with random blocks (scale a random F16 in [2^-9, 2^-5), random quants),
// F32 with uniform [-1, 1).
inline void fill_weights(tsr_tensor * t, std::mt19937 & rng) {
    const size_t bytes = nbytes(t);
    auto * p = static_cast<unsigned char *>(t->data);
    switch (t->type) {
    case TSR_TYPE_F32: fill_uniform(t, rng); break;
    case TSR_TYPE_F16:
    case TSR_TYPE_BF16:
        for (size_t i = 0; i + 2 <= bytes; i += 2) {
            const uint16_t h = t->type == TSR_TYPE_F16 ? random_f16_bits(rng) : random_bf16_bits(rng);
            std::memcpy(p + i, &h, 2);
        }
        break;
    case TSR_TYPE_Q8_0:
    case TSR_TYPE_Q4_0:
    case TSR_TYPE_Q5_0: {
        const size_t bs = t->type == TSR_TYPE_Q8_0 ? 34 : t->type == TSR_TYPE_Q4_0 ? 18 : 22;
        std::uniform_int_distribution<int> byte(0, 255), exp(6, 9), mant(0, 1023);
        for (size_t b = 0; b + bs <= bytes; b += bs) {
            const auto d = static_cast<uint16_t>((exp(rng) << 10) | mant(rng));
            std::memcpy(p + b, &d, 2);
            for (size_t j = 2; j < bs; ++j) p[b + j] = static_cast<unsigned char>(byte(rng));
        }
        break;
    }
    case TSR_TYPE_Q5_1: {
        // Random quants; d in [2^-9, 2^-5) and m of either sign, |m| up to 2^-1.
        std::uniform_int_distribution<int> byte(0, 255), exp(6, 9), mexp(6, 14), mant(0, 1023), sign(0, 1);
        for (size_t b = 0; b + 24 <= bytes; b += 24) {
            const auto d = static_cast<uint16_t>((exp(rng) << 10) | mant(rng));
            const auto m = static_cast<uint16_t>((sign(rng) << 15) | (mexp(rng) << 10) | mant(rng));
            std::memcpy(p + b, &d, 2);
            std::memcpy(p + b + 2, &m, 2);
            for (size_t j = 4; j < 24; ++j) p[b + j] = static_cast<unsigned char>(byte(rng));
        }
        break;
    }
    case TSR_TYPE_Q4_K:
    case TSR_TYPE_Q5_K:
    case TSR_TYPE_Q6_K: {
        // Random scales and quants; the F16 super-block scales (Q4_K/Q5_K: d and
        // dmin at bytes 0 and 2; Q6_K: d at byte 208) of moderate size.
        const bool q4 = t->type != TSR_TYPE_Q6_K;
        const size_t bs = t->type == TSR_TYPE_Q4_K ? 144 : t->type == TSR_TYPE_Q5_K ? 176 : 210;
        std::uniform_int_distribution<int> byte(0, 255), exp(6, 9), mant(0, 1023);
        for (size_t b = 0; b + bs <= bytes; b += bs) {
            for (size_t j = 0; j < bs; ++j) p[b + j] = static_cast<unsigned char>(byte(rng));
            for (size_t off : q4 ? std::vector<size_t>{0, 2} : std::vector<size_t>{208}) {
                const auto d = static_cast<uint16_t>((exp(rng) << 10) | mant(rng));
                std::memcpy(p + b + off, &d, 2);
            }
        }
        break;
    }
    default: ADD_FAILURE() << "fill_weights: unsupported type " << t->type;
    }
}

// A context that allocates data for tensors (views alias their source).
inline context::params data_ctx(size_t max_tensors = 4096) {
    context::params p;
    p.max_tensors = max_tensors;
    p.alloc_data = true;
    return p;
}

// Builds the graph of `out` and computes it with n_threads.
inline tsr_status compute(tsr_tensor * out, int n_threads) {
    graph g;
    g.build_forward(out);
    return graph_compute(g.view(), n_threads);
}

// Counts of the thread configurations the op tests run with.
inline const std::vector<int> & thread_counts() {
    static const std::vector<int> counts = {1, 3};
    return counts;
}

} // namespace tessera::cpu::test

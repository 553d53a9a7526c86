// tests/llm/quantize_test_data.hpp — input data shared by the quantize
// tests (test_quantize.cpp, test_quantize_k.cpp).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace tessera::test {

// Deterministic values in [-scale, scale) (LCG, Knuth MMIX constants).
inline std::vector<float> lcg_values(size_t n, uint64_t seed, float scale) {
    std::vector<float> v(n);
    uint64_t s = seed;
    for (auto & x : v) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x = scale * (float(double(s >> 40) / double(1ull << 24)) * 2.0f - 1.0f);
    }
    return v;
}

// The bytes of packed F32 values.
inline std::vector<uint8_t> f32_bytes(const std::vector<float> & v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
}

} // namespace tessera::test

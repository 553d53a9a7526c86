// llm/finite.hpp — finding the first value that is not finite in a span
// of floats (the session's check of each token's logits). Internal.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

namespace tessera::llm {

// Index of the first NaN or infinite element of v; v.size() when all are
// finite.
inline size_t first_non_finite(std::span<const float> v) {
    // Blocks of 256 checked without a branch per element (an IEEE 754
    // binary32 is NaN or infinite when its exponent bits are all ones),
    // so the compiler vectorizes them; the element itself is then found in
    // the block that has one. (The loop with std::isfinite and an early
    // return ran an element a cycle: 32,000 logits a token.)
    constexpr size_t k_block = 256;
    size_t i = 0;
    for (; i + k_block <= v.size(); i += k_block) {
        uint32_t any = 0;
        for (size_t j = 0; j < k_block; ++j) {
            any |= static_cast<uint32_t>((std::bit_cast<uint32_t>(v[i + j]) & 0x7f800000u) == 0x7f800000u);
        }
        if (any != 0) break;
    }
    for (; i < v.size(); ++i) {
        if (!std::isfinite(v[i])) return i;
    }
    return v.size();
}

} // namespace tessera::llm

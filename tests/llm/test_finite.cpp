// llm::first_non_finite (llm/finite.hpp): the index of the first NaN or
// infinite float, against a plain std::isfinite scan, for one bad value at
// every kind of place (first, inside, at and around the 256-element block
// edges, last), two bad values, subnormals and the largest finite values
// (exponent bits not all ones), and spans shorter than a block.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <vector>

#include "llm/finite.hpp"

namespace {

size_t plain(std::span<const float> v) {
    for (size_t i = 0; i < v.size(); ++i) {
        if (!std::isfinite(v[i])) return i;
    }
    return v.size();
}

TEST(FirstNonFinite, MatchesAPlainScan) {
    const float bad[] = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                         std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::signaling_NaN()};
    for (size_t n : {size_t{0}, size_t{1}, size_t{255}, size_t{256}, size_t{257}, size_t{32000}}) {
        std::vector<float> v(n);
        for (size_t i = 0; i < n; ++i) {
            // finite edge values: the largest, the smallest normal, subnormals, zeros
            const float pick[] = {std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                                  std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(), -0.0f,
                                  1.5f};
            v[i] = pick[i % 6];
        }
        EXPECT_EQ(tessera::llm::first_non_finite(v), n) << n;
        for (size_t at : {size_t{0}, size_t{1}, size_t{254}, size_t{255}, size_t{256}, size_t{257}, size_t{511},
                          size_t{512}, size_t{31743}, size_t{31744}, size_t{31999}}) {
            if (at >= n) continue;
            for (float b : bad) {
                std::vector<float> w = v;
                w[at] = b;
                EXPECT_EQ(tessera::llm::first_non_finite(w), at) << "n " << n << " at " << at;
                if (at + 300 < n) {
                    w[at + 300] = b; // a second one later changes nothing
                    EXPECT_EQ(tessera::llm::first_non_finite(w), at);
                }
                EXPECT_EQ(tessera::llm::first_non_finite(w), plain(w));
            }
        }
    }
}

} // namespace

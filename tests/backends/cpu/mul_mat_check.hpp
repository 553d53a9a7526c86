// backends/cpu/mul_mat_check.hpp — the MUL_MAT check shared by the op
// tests: out = a x b (with batch broadcasting) element by element against
// a double-precision product, with the tolerances derived at the top of
// test_ops_mul_mat.cpp.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/ref_util.hpp"

namespace tessera::cpu::test {

inline bool is_quant(int32_t t) {
    return t == TSR_TYPE_Q8_0 || t == TSR_TYPE_Q4_0;
}

// Checks out = a x b (with broadcasting) element by element; `exact_q8`:
// b holds values exactly representable in Q8_0 (strict tolerance).
inline void check_mul_mat(const tsr_tensor * a, const tsr_tensor * b, const tsr_tensor * out, bool exact_q8 = false) {
    const int64_t K = a->ne[0], M = a->ne[1], N = b->ne[1];
    const int64_t r2 = b->ne[2] / a->ne[2], r3 = b->ne[3] / a->ne[3];
    const bool quant = is_quant(a->type);
    std::vector<double> w(static_cast<size_t>(K)), x(static_cast<size_t>(K)), amax(static_cast<size_t>(K));
    int checked = 0;
    for (int64_t i3 = 0; i3 < b->ne[3]; ++i3) {
        for (int64_t i2 = 0; i2 < b->ne[2]; ++i2) {
            for (int64_t n = 0; n < N; ++n) {
                for (int64_t k = 0; k < K; ++k) x[k] = get(b, k, n, i2, i3);
                if (quant) block_amax(x, amax);
                for (int64_t m = 0; m < M; ++m) {
                    double want = 0, abs_sum = 0, q_err = 0;
                    for (int64_t k = 0; k < K; ++k) {
                        w[k] = get(a, k, m, i2 / r2, i3 / r3);
                        want += w[k] * x[k];
                        abs_sum += std::fabs(w[k] * x[k]);
                        if (quant) q_err += std::fabs(w[k]) * 0.6 * amax[k] / 127.0;
                    }
                    // BF16 weights: AVX512-BF16 builds round the activations to BF16
                    // (bf16_dot.hpp): 8 significant bits, 2^-8 relative each, doubled.
                    const double act = a->type == TSR_TYPE_BF16 ? std::ldexp(abs_sum, -7) : 0.0;
                    const double tol = exact_q8 ? 1.2e-7 * (static_cast<double>(K) / 128 + 6) * abs_sum
                                       : quant ? q_err + 1e-5 * abs_sum
                                             : 1.2e-7 * static_cast<double>(std::min<int64_t>(K, 256) + (K + 255) / 256 + 6) * abs_sum + act + 1e-30;
                    const double got = get(out, m, n, i2, i3);
                    ASSERT_NEAR(got, want, tol) << "type " << a->type << " K=" << K << " M=" << M << " N=" << N << " m=" << m << " n=" << n
                                                << " batch " << i2 << "," << i3;
                    ++checked;
                }
            }
        }
    }
    ASSERT_EQ(checked, M * N * b->ne[2] * b->ne[3]);
}

} // namespace tessera::cpu::test

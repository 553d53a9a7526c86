// tests/backend/cpu_graph.hpp — a small model-like graph (MUL_MAT with F16,
// Q8_0 or Q4_0 weights, RMS_NORM, MUL, SILU, SOFT_MAX, ADD, ARGMAX) run
// through a registry backend, and its double-precision reference written
// here from the ops' definitions (include/tessera/core/ops.hpp) and the
// GGUF block layouts (Q8_0: f16 d + 32 int8, x = d*q; Q4_0: f16 d + 16
// bytes, element j the low nibble of byte j, element j+16 the high nibble,
// x = d*(nibble-8)).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "tessera/backend/graph_allocator.hpp"
#include "tessera/backend/registry.hpp"
#include "tessera/core/graph.hpp"
#include "tessera/core/ops.hpp"
#include "tessera/core/tensor.hpp"

namespace tessera::test {

// IEEE 754 binary16 -> double, decoded here (independent of the core).
inline double f16_value(uint16_t h) {
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    const double v = e == 0 ? std::ldexp(double(m), -24) : std::ldexp(1.0 + m / 1024.0, e - 15);
    return (h >> 15) ? -v : v;
}

// Random F16 bits of magnitude in [2^-4, 2): exponents 11..15.
inline uint16_t random_f16(std::mt19937 & rng) {
    std::uniform_int_distribution<int> e(11, 15), m(0, 1023), s(0, 1);
    return uint16_t((s(rng) << 15) | (e(rng) << 10) | m(rng));
}

struct small_graph {
    static constexpr int M = 11, N = 5;
    static constexpr float eps = 1e-5f, sm_scale = 0.7f;
    const tsr_type wtype;
    const int K; // 37 for F16 (odd), 64 for the 32-element block types

    context ctx{context::params{256, false}};
    tsr_tensor *x, *w, *g, *out, *idx;
    graph gr;
    std::vector<uint8_t> w_bytes;   // weight memory (wrapped zero-copy)
    std::vector<float> g_vals;      // norm weight memory (wrapped zero-copy)
    std::vector<float> x_vals;      // input values

    explicit small_graph(uint32_t seed, tsr_type wt = TSR_TYPE_F16)
        : wtype(wt), K(wt == TSR_TYPE_F16 ? 37 : 64) {
        std::mt19937 rng(seed);
        x = context::set_name(ctx.new_tensor(TSR_TYPE_F32, {K, N}), "x");
        w = context::set_name(ctx.new_tensor(wtype, {K, M}), "w");
        g = context::set_name(ctx.new_tensor(TSR_TYPE_F32, {M}), "g");
        x->flags |= TSR_FLAG_INPUT;
        w->flags |= TSR_FLAG_PARAM;
        g->flags |= TSR_FLAG_PARAM;
        tsr_tensor * y = mul_mat(ctx, w, x);
        tsr_tensor * n = rms_norm(ctx, y, eps);
        tsr_tensor * s = silu(ctx, mul(ctx, n, g));
        tsr_tensor * p = soft_max(ctx, s, nullptr, sm_scale);
        out = context::set_name(add(ctx, p, s), "out");
        idx = context::set_name(argmax(ctx, out), "idx");
        out->flags |= TSR_FLAG_OUTPUT;
        idx->flags |= TSR_FLAG_OUTPUT;
        gr.build_forward(idx);

        w_bytes.resize(nbytes(w));
        if (wtype == TSR_TYPE_F16) {
            for (size_t i = 0; i < w_bytes.size(); i += 2) {
                const uint16_t h = random_f16(rng);
                std::memcpy(&w_bytes[i], &h, 2);
            }
        } else {
            // Random blocks: scale in [2^-5, 2^-3), random quants.
            const size_t bs = wtype == TSR_TYPE_Q8_0 ? 34 : 18;
            std::uniform_int_distribution<int> byte(0, 255), e(10, 11), m(0, 1023);
            for (size_t b = 0; b < w_bytes.size(); b += bs) {
                const uint16_t d = uint16_t((e(rng) << 10) | m(rng));
                std::memcpy(&w_bytes[b], &d, 2);
                for (size_t j = 2; j < bs; ++j) w_bytes[b + j] = uint8_t(byte(rng));
            }
        }
        g_vals.resize(M);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f), pos(0.5f, 1.5f);
        for (auto & v : g_vals) v = pos(rng);
        x_vals.resize(size_t(K) * N);
        for (auto & v : x_vals) v = u(rng);
    }

    // Wraps the weight memory zero-copy with `dev` and places w and g in it.
    buffer wrap_weights(const device & dev) {
        const size_t wb = w_bytes.size(), gb = g_vals.size() * 4;
        // One host block holding both, the way a mapped model file would.
        weights_mem.assign(wb + gb, 0);
        std::memcpy(weights_mem.data(), w_bytes.data(), wb);
        std::memcpy(weights_mem.data() + wb, g_vals.data(), gb);
        buffer b = dev.buffer_from_host_ptr(weights_mem.data(), weights_mem.size(), wb);
        b.set_usage(TSR_BUFFER_USAGE_WEIGHTS);
        b.place(w, 0);
        b.place(g, wb);
        return b;
    }
    std::vector<uint8_t> weights_mem;

    // Weight element (k, m) decoded here from the bytes.
    double weight(int k, int m) const {
        const uint8_t * row = w_bytes.data() + size_t(m) * (w_bytes.size() / M);
        uint16_t h;
        if (wtype == TSR_TYPE_F16) {
            std::memcpy(&h, row + size_t(k) * 2, 2);
            return f16_value(h);
        }
        const size_t bs = wtype == TSR_TYPE_Q8_0 ? 34 : 18;
        const uint8_t * blk = row + size_t(k / 32) * bs;
        std::memcpy(&h, blk, 2);
        const int j = k % 32;
        if (wtype == TSR_TYPE_Q8_0) return f16_value(h) * int8_t(blk[2 + j]);
        const int nib = j < 16 ? (blk[2 + j] & 0xf) : (blk[2 + j - 16] >> 4);
        return f16_value(h) * (nib - 8);
    }

    // Rounds to the nearest binary16 value (ties to even), for the normal
    // range the Q8_0 scales here fall into.
    static double to_f16(double v) {
        int e = 0;
        const double m = std::frexp(v, &e); // v = m * 2^e, 0.5 <= |m| < 1
        return std::ldexp(std::nearbyint(std::ldexp(m, 11)), e - 11);
    }

    // Column n of the activations as the weights' dot product sees it: for
    // block-quantized weights the kernels quantize activations to Q8_0
    // (per 32 elements d = amax / 127, q = round(x / d), d stored as F16).
    std::vector<double> activation(int n) const {
        std::vector<double> col(K);
        for (int k = 0; k < K; ++k) col[k] = x_vals[size_t(n) * K + k];
        if (wtype == TSR_TYPE_F16) return col;
        for (int b = 0; b < K; b += 32) {
            float amax = 0;
            for (int k = b; k < b + 32; ++k) amax = std::max(amax, std::fabs(float(col[k])));
            const float d = amax / 127.0f;
            for (int k = b; k < b + 32; ++k) {
                col[k] = d == 0 ? 0.0 : to_f16(d) * std::round(float(col[k]) / d);
            }
        }
        return col;
    }

    // Reference out[m, n] in double.
    std::vector<double> reference() const {
        std::vector<double> s(size_t(M) * N), o(size_t(M) * N);
        for (int n = 0; n < N; ++n) {
            const std::vector<double> xa = activation(n);
            std::vector<double> y(M);
            double ss = 0;
            for (int m = 0; m < M; ++m) {
                double acc = 0;
                for (int k = 0; k < K; ++k) acc += weight(k, m) * xa[k];
                y[m] = acc;
                ss += acc * acc;
            }
            const double inv = 1.0 / std::sqrt(ss / M + double(eps));
            double mx = -INFINITY;
            for (int m = 0; m < M; ++m) {
                const double v = y[m] * inv * g_vals[m];
                s[size_t(n) * M + m] = v / (1.0 + std::exp(-v));
                mx = std::max(mx, sm_scale * s[size_t(n) * M + m]);
            }
            double sum = 0;
            for (int m = 0; m < M; ++m) sum += std::exp(sm_scale * s[size_t(n) * M + m] - mx);
            for (int m = 0; m < M; ++m) {
                o[size_t(n) * M + m] = std::exp(sm_scale * s[size_t(n) * M + m] - mx) / sum + s[size_t(n) * M + m];
            }
        }
        return o;
    }

    // Allocates, sets x, computes on `be`, and checks out and idx against the reference.
    void run_and_check(backend & be, graph_allocator & alloc) {
        alloc.allocate(gr);
        tensor_set(x, x_vals.data(), 0, x_vals.size() * 4);
        ASSERT_EQ(be.graph_compute(gr), TSR_STATUS_SUCCESS);
        check();
    }

    void check() const {
        const std::vector<double> ref = reference();
        std::vector<float> got(ref.size());
        tensor_get(out, got.data(), 0, got.size() * 4);
        for (size_t i = 0; i < ref.size(); ++i) {
            EXPECT_NEAR(got[i], ref[i], 1e-4 * (1 + std::fabs(ref[i]))) << "out[" << i << "]";
        }
        std::vector<int32_t> ids(N);
        tensor_get(idx, ids.data(), 0, ids.size() * 4);
        for (int n = 0; n < N; ++n) {
            int best = 0;
            for (int m = 1; m < M; ++m) {
                if (ref[size_t(n) * M + m] > ref[size_t(n) * M + best]) best = m;
            }
            // Only meaningful when the winner is clear of float rounding.
            bool clear = true;
            for (int m = 0; m < M; ++m) {
                if (m != best && ref[size_t(n) * M + best] - ref[size_t(n) * M + m] < 1e-3) clear = false;
            }
            if (clear) EXPECT_EQ(ids[n], best) << "argmax of column " << n;
        }
    }
};

} // namespace tessera::test

// bench/machine_peaks.hpp — this machine's limits, measured in-process:
// the F32 FMA peak (FLOP/s), the int8 multiply-add peak (OP/s) and the
// streaming read bandwidth (bytes/s) of n threads at once. Used by the
// microbenchmarks (machine_limits.hpp: Google Benchmark wrappers) and by
// `tessera bench --limits` (tools/cmd_bench.cpp), so a model's or kernel's
// speed is given as a fraction of a limit measured in the same run. No
// dependency but the C++ library; each loop is compiled for its
// instruction set (target attributes) and run only where the processor
// has it (cpu_has_*), so the program itself may be built for any x86-64.
// Elsewhere (not x86-64) the measure_* functions return 0 (not measured).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#define TSR_BENCH_X86 1
#include <immintrin.h>
#endif

namespace bench {

// Runs fn() on n threads at once (the caller is one of them) and returns
// the wall time in seconds.
template <class F>
double run_on_threads(int n, F fn) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> others;
    for (int i = 1; i < n; ++i) others.emplace_back([&fn, i] { fn(i); });
    fn(0);
    for (auto & t : others) t.join();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

constexpr long k_peak_iters = 20'000'000; // loop trips per thread per measurement

#ifdef TSR_BENCH_X86
// The peak loops are written in assembly: with arrays of accumulators in
// C++, GCC 12 shuffles registers (and spills) inside the loop and the
// "peak" comes out at half the machine's. Each trip issues one instruction
// per independent chain (12 chains of 256-bit, 14 of 512-bit: more than
// latency x throughput on current cores; GCC allows 30 asm operands).
#define TSR_BENCH_REPEAT12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define TSR_BENCH_REPEAT14(X) TSR_BENCH_REPEAT12(X) X(12) X(13)

// 12 chains of vfmadd231ps ymm: 16 FLOP each.
__attribute__((target("avx2,fma"), noinline)) inline float fma_chains_256(long iters) {
#define TSR_DECL(i) __m256 a##i = _mm256_set1_ps(0.001f * (i));
    TSR_BENCH_REPEAT12(TSR_DECL)
#undef TSR_DECL
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    for (long it = 0; it < iters; ++it) {
        __asm__ volatile(
#define TSR_INS(i) "vfmadd213ps %[c], %[m], %[a" #i "]\n\t"
            TSR_BENCH_REPEAT12(TSR_INS)
#undef TSR_INS
            : [a0] "+x"(a0), [a1] "+x"(a1), [a2] "+x"(a2), [a3] "+x"(a3), [a4] "+x"(a4), [a5] "+x"(a5),
              [a6] "+x"(a6), [a7] "+x"(a7), [a8] "+x"(a8), [a9] "+x"(a9), [a10] "+x"(a10), [a11] "+x"(a11)
            : [m] "x"(m), [c] "x"(c));
    }
    const __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                                   _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    return _mm256_cvtss_f32(_mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11))));
}

// 14 chains of vfmadd231ps zmm: 32 FLOP each.
__attribute__((target("avx512f"), noinline)) inline float fma_chains_512(long iters) {
#define TSR_DECL(i) __m512 a##i = _mm512_set1_ps(0.001f * (i));
    TSR_BENCH_REPEAT14(TSR_DECL)
#undef TSR_DECL
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    for (long it = 0; it < iters; ++it) {
        __asm__ volatile(
#define TSR_INS(i) "vfmadd213ps %[c], %[m], %[a" #i "]\n\t"
            TSR_BENCH_REPEAT14(TSR_INS)
#undef TSR_INS
            : [a0] "+v"(a0), [a1] "+v"(a1), [a2] "+v"(a2), [a3] "+v"(a3), [a4] "+v"(a4), [a5] "+v"(a5),
              [a6] "+v"(a6), [a7] "+v"(a7), [a8] "+v"(a8), [a9] "+v"(a9), [a10] "+v"(a10), [a11] "+v"(a11),
              [a12] "+v"(a12), [a13] "+v"(a13)
            : [m] "v"(m), [c] "v"(c));
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
    s = _mm512_add_ps(s, _mm512_add_ps(a12, a13));
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, s); // (not _mm512_reduce_add_ps: GCC 12's warns under -Wall in a target-attribute function)
    float sum = 0;
    for (float x : lanes) sum += x;
    return sum;
}

// 12 chains of vpmaddubsw ymm (32 byte pairs each; each result feeds the
// chain's next multiply).
__attribute__((target("avx2"), noinline)) inline int int8_chains_256(long iters) {
#define TSR_DECL(i) __m256i a##i = _mm256_set1_epi8(static_cast<char>((i) + 1));
    TSR_BENCH_REPEAT12(TSR_DECL)
#undef TSR_DECL
    const __m256i s = _mm256_set1_epi8(-2);
    for (long it = 0; it < iters; ++it) {
        __asm__ volatile(
#define TSR_INS(i) "vpmaddubsw %[s], %[a" #i "], %[a" #i "]\n\t"
            TSR_BENCH_REPEAT12(TSR_INS)
#undef TSR_INS
            : [a0] "+x"(a0), [a1] "+x"(a1), [a2] "+x"(a2), [a3] "+x"(a3), [a4] "+x"(a4), [a5] "+x"(a5),
              [a6] "+x"(a6), [a7] "+x"(a7), [a8] "+x"(a8), [a9] "+x"(a9), [a10] "+x"(a10), [a11] "+x"(a11)
            : [s] "x"(s));
    }
    __m256i t = _mm256_add_epi16(_mm256_add_epi16(_mm256_add_epi16(a0, a1), _mm256_add_epi16(a2, a3)),
                                 _mm256_add_epi16(_mm256_add_epi16(a4, a5), _mm256_add_epi16(a6, a7)));
    t = _mm256_add_epi16(t, _mm256_add_epi16(_mm256_add_epi16(a8, a9), _mm256_add_epi16(a10, a11)));
    return _mm256_extract_epi16(t, 0);
}

// 14 chains of vpdpbusd zmm (64 byte pairs each).
__attribute__((target("avx512f,avx512vnni"), noinline)) inline int int8_chains_512(long iters) {
#define TSR_DECL(i) __m512i a##i = _mm512_set1_epi32(i);
    TSR_BENCH_REPEAT14(TSR_DECL)
#undef TSR_DECL
    const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
    for (long it = 0; it < iters; ++it) {
        __asm__ volatile(
#define TSR_INS(i) "vpdpbusd %[s], %[u], %[a" #i "]\n\t"
            TSR_BENCH_REPEAT14(TSR_INS)
#undef TSR_INS
            : [a0] "+v"(a0), [a1] "+v"(a1), [a2] "+v"(a2), [a3] "+v"(a3), [a4] "+v"(a4), [a5] "+v"(a5),
              [a6] "+v"(a6), [a7] "+v"(a7), [a8] "+v"(a8), [a9] "+v"(a9), [a10] "+v"(a10), [a11] "+v"(a11),
              [a12] "+v"(a12), [a13] "+v"(a13)
            : [u] "v"(u), [s] "v"(s));
    }
    __m512i t = _mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3));
    t = _mm512_add_epi32(t, _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)));
    t = _mm512_add_epi32(t, _mm512_add_epi32(_mm512_add_epi32(a8, a9), _mm512_add_epi32(a10, a11)));
    t = _mm512_add_epi32(t, _mm512_add_epi32(a12, a13));
    alignas(64) int lanes[16];
    _mm512_store_si512(lanes, t);
    int sum = 0;
    for (int x : lanes) sum += x;
    return sum;
}

#undef TSR_BENCH_REPEAT14
#undef TSR_BENCH_REPEAT12

inline bool cpu_has_avx512() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
}
inline bool cpu_has_vnni512() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni");
}
inline bool cpu_has_avx2() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

// Sums `bytes` at p (a multiple of 128) in 256-bit loads; Prefetch: also
// software-prefetches each line 4096 bytes ahead (on the Intel Xeons
// measured, a core's stream read about 20% faster so; on Zen 4 about the
// same or slower), so the ceiling is the faster of the two readers.
template <bool Prefetch>
__attribute__((target("avx2"), noinline)) long long read_stream(const char * p, size_t bytes) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= bytes; i += 128) {
        if constexpr (Prefetch) {
            _mm_prefetch(p + i + 4096, _MM_HINT_T0);
            _mm_prefetch(p + i + 4096 + 64, _MM_HINT_T0);
        }
        a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i *>(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i *>(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i *>(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i *>(p + i + 96)));
    }
    const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    return _mm256_extract_epi64(s, 0);
}

#endif // TSR_BENCH_X86

// The widest F32 FMA this processor has: 512 (AVX-512F), 256 (AVX2 and
// FMA) or 0 (neither, or not x86-64).
inline int fma_bits() {
#ifdef TSR_BENCH_X86
    return cpu_has_avx512() ? 512 : cpu_has_avx2() ? 256 : 0;
#else
    return 0;
#endif
}

// F32 FLOP/s of n threads at once, each running `iters` trips of the FMA
// chains of `bits` (fma_chains_256 / fma_chains_512); 0 when this
// processor lacks them or n < 1.
inline double measure_fma_peak(int n, int bits, long iters = k_peak_iters) {
#ifdef TSR_BENCH_X86
    if (n < 1 || iters < 1 || (bits == 512 ? !cpu_has_avx512() : bits == 256 ? !cpu_has_avx2() : true)) return 0.0;
    volatile float sink = 0;
    const double seconds = run_on_threads(n, [&](int) {
        const float v = bits == 512 ? fma_chains_512(iters) : fma_chains_256(iters);
        if (v == 12345.0f) sink = v; // keeps the chains' result alive
    });
    const double chains = bits == 512 ? 14 : 12;
    return seconds > 0 ? 2.0 * chains * (bits / 32) * static_cast<double>(iters) * n / seconds : 0.0;
#else
    (void)n, (void)bits, (void)iters;
    return 0.0;
#endif
}

// Read bytes/s of n threads at once streaming `bytes` (each its own
// contiguous part; far beyond the caches: 256 MiB or more), the faster of
// plain and software-prefetched loads (read_stream), best of `reps` passes
// of each; 0 when this processor lacks AVX2, the buffer cannot be
// allocated or n < 1.
inline double measure_read_bw(int n, size_t bytes, int reps = 3) {
#ifdef TSR_BENCH_X86
    if (n < 1 || reps < 1 || !cpu_has_avx2()) return 0.0;
    const size_t part = bytes / static_cast<size_t>(n) / 4096 * 4096; // whole pages, a multiple of 128
    if (part == 0) return 0.0;
    struct free_del {
        void operator()(char * p) const { std::free(p); }
    };
    std::unique_ptr<char, free_del> buf(static_cast<char *>(std::aligned_alloc(4096, part * static_cast<size_t>(n))));
    if (!buf) return 0.0;
    run_on_threads(n, [&](int i) { std::memset(buf.get() + part * static_cast<size_t>(i), 1, part); }); // fault pages in
    volatile long long sink = 0;
    double best = 0;
    for (int r = 0; r < reps; ++r) {
        for (const bool pf : {false, true}) {
            const double s = run_on_threads(n, [&](int i) {
                const char * p = buf.get() + part * static_cast<size_t>(i);
                const long long v = pf ? read_stream<true>(p, part) : read_stream<false>(p, part);
                if (v == 12345) sink = v;
            });
            if (s > 0) best = std::max(best, static_cast<double>(part) * n / s);
        }
    }
    return best;
#else
    (void)n, (void)bytes, (void)reps;
    return 0.0;
#endif
}

} // namespace bench

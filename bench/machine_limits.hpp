// bench/machine_limits.hpp — benchmarks of this machine's limits, run in the
// same program as the kernel benchmarks so every kernel figure can be given
// as a fraction of a limit measured minutes earlier:
//   BM_fma_peak/<bits>/<threads>    F32 FMA throughput (256- or 512-bit
//                                   vfmadd on 12 / 14 independent chains
//                                   per thread): FLOP/s (2 per lane)
//   BM_int8_peak/<kind>/<threads>   int8 multiply-add throughput:
//                                   vpmaddubsw (AVX2) or vpdpbusd
//                                   (AVX512-VNNI): OP/s (2 per byte pair)
//   BM_read_bw/<threads>            streaming read of a 1 GiB buffer
//                                   (each thread its own contiguous part):
//                                   bytes/s
// Results are recorded in limits() by thread count for the kernel
// benchmarks that run later (Google Benchmark runs benchmarks in
// registration order; register these first). Needs AVX2 (and AVX-512 for
// the 512-bit ones) at run time: skipped with a message otherwise.
#pragma once

#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <thread>
#include <vector>

namespace bench {

struct machine_limits {
    std::map<int, double> fma256, fma512; // FLOP/s by thread count
    std::map<int, double> int8_256, int8_512; // OP/s by thread count
    std::map<int, double> read_bw;        // bytes/s by thread count
};

inline machine_limits & limits() {
    static machine_limits l;
    return l;
}

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
    return _mm512_reduce_add_ps(s);
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
    return _mm512_reduce_add_epi32(t);
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

// Args: vector bits (256, 512), threads.
inline void BM_fma_peak(benchmark::State & state) {
    const int bits = static_cast<int>(state.range(0));
    const int n = static_cast<int>(state.range(1));
    if (bits == 512 ? !cpu_has_avx512() : !cpu_has_avx2()) {
        state.SkipWithError("this processor lacks the instructions");
        return;
    }
    double seconds = 0;
    for (auto _ : state) {
        seconds += run_on_threads(n, [bits](int) {
            benchmark::DoNotOptimize(bits == 512 ? fma_chains_512(k_peak_iters) : fma_chains_256(k_peak_iters));
        });
    }
    const double chains = bits == 512 ? 14 : 12;
    const double flop = 2.0 * chains * (bits / 32) * static_cast<double>(k_peak_iters) * n * static_cast<double>(state.iterations());
    (bits == 512 ? limits().fma512 : limits().fma256)[n] = flop / seconds;
    state.counters["FLOP/s"] = benchmark::Counter(flop / seconds, benchmark::Counter::kDefaults, benchmark::Counter::kIs1000);
    state.counters["threads"] = n;
}

// Args: kind (256 = vpmaddubsw, 512 = vpdpbusd zmm), threads.
inline void BM_int8_peak(benchmark::State & state) {
    const int bits = static_cast<int>(state.range(0));
    const int n = static_cast<int>(state.range(1));
    if (bits == 512 ? !cpu_has_vnni512() : !cpu_has_avx2()) {
        state.SkipWithError("this processor lacks the instructions");
        return;
    }
    double seconds = 0;
    for (auto _ : state) {
        seconds += run_on_threads(n, [bits](int) {
            benchmark::DoNotOptimize(bits == 512 ? int8_chains_512(k_peak_iters) : int8_chains_256(k_peak_iters));
        });
    }
    const double chains = bits == 512 ? 14 : 12;
    const double ops = 2.0 * chains * (bits / 8) * static_cast<double>(k_peak_iters) * n * static_cast<double>(state.iterations());
    (bits == 512 ? limits().int8_512 : limits().int8_256)[n] = ops / seconds;
    state.counters["OP/s"] = benchmark::Counter(ops / seconds, benchmark::Counter::kDefaults, benchmark::Counter::kIs1000);
    state.counters["threads"] = n;
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

// Args: threads. Reads a 1 GiB buffer (far beyond the caches), with and
// without software prefetch (read_stream) in turn; the limit recorded is
// the faster. Counters: B/s (that one), plain_B/s, prefetch_B/s.
inline void BM_read_bw(benchmark::State & state) {
    if (!cpu_has_avx2()) {
        state.SkipWithError("this processor lacks AVX2");
        return;
    }
    const int n = static_cast<int>(state.range(0));
    constexpr size_t bytes = size_t{1} << 30;
    struct free_del {
        void operator()(char * p) const { std::free(p); }
    };
    std::unique_ptr<char, free_del> buf(static_cast<char *>(std::aligned_alloc(4096, bytes)));
    if (!buf) {
        state.SkipWithError("cannot allocate 1 GiB");
        return;
    }
    run_on_threads(n, [&](int i) { std::memset(buf.get() + bytes / n * i, 1, bytes / n); }); // fault pages in
    double plain = 0, prefetched = 0; // seconds
    for (auto _ : state) {
        plain += run_on_threads(n, [&](int i) {
            benchmark::DoNotOptimize(read_stream<false>(buf.get() + bytes / n * i, bytes / n));
        });
        prefetched += run_on_threads(n, [&](int i) {
            benchmark::DoNotOptimize(read_stream<true>(buf.get() + bytes / n * i, bytes / n));
        });
    }
    const double total = static_cast<double>(bytes) * static_cast<double>(state.iterations());
    const double rate = total / std::min(plain, prefetched);
    limits().read_bw[n] = rate;
    state.counters["B/s"] = benchmark::Counter(rate, benchmark::Counter::kDefaults, benchmark::Counter::kIs1000);
    state.counters["plain_B/s"] = benchmark::Counter(total / plain, benchmark::Counter::kDefaults, benchmark::Counter::kIs1000);
    state.counters["prefetch_B/s"] = benchmark::Counter(total / prefetched, benchmark::Counter::kDefaults, benchmark::Counter::kIs1000);
    state.counters["threads"] = n;
}

} // namespace bench

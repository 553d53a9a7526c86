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

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "machine_peaks.hpp"

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

// backends/cpu/ops/tuning.cpp — per-processor kernel choices (tuning.hpp).
#include "backends/cpu/ops/tuning.hpp"
#include "backends/cpu/cpuid.hpp"
#include "tessera/core/printable.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <unistd.h>

namespace tessera::cpu {

cpu_model cpu_model_from_leaf1(cpu_vendor vendor, unsigned eax) {
    const unsigned base_family = (eax >> 8) & 0xF;
    const unsigned base_model = (eax >> 4) & 0xF;
    cpu_model m;
    m.vendor = vendor;
    m.family = base_family == 0xF ? base_family + ((eax >> 20) & 0xFF) : base_family;
    m.model = base_family == 0x6 || base_family == 0xF ? (((eax >> 16) & 0xF) << 4) | base_model : base_model;
    return m;
}

cpu_model detect_cpu_model() {
    const x86_basic_leaves leaves = read_x86_basic_leaves();
    cpu_vendor vendor = cpu_vendor::other;
    if (std::strcmp(leaves.vendor, "GenuineIntel") == 0) vendor = cpu_vendor::intel;
    if (std::strcmp(leaves.vendor, "AuthenticAMD") == 0) vendor = cpu_vendor::amd;
    cpu_model m = leaves.max_leaf >= 1 ? cpu_model_from_leaf1(vendor, leaves.leaf1_eax) : cpu_model{vendor, 0, 0};
#if defined(__linux__) && defined(_SC_LEVEL3_CACHE_SIZE)
    if (const long l3 = ::sysconf(_SC_LEVEL3_CACHE_SIZE); l3 > 0) m.l3_bytes = static_cast<size_t>(l3);
#endif
    return m;
}

std::atomic<size_t> & live_repack_bytes() {
    static std::atomic<size_t> bytes{0};
    return bytes;
}

// Software prefetch of the mat-vec weight streams. AMD Zen 4 (2 vCPUs,
// bench_ops one column, medians of 5-7 interleaved runs, GFLOP/s with a
// prefetch 4096 bytes ahead -> none, 1 thread): Q8_0 36.9 -> 46.8, Q4_0
// 71.6 -> 80.5, F16 17.8 -> 24.4, Q4_K 68.2 -> 83.4: the hardware prefetcher
// alone reads faster. Intel Xeon (Emerald Rapids-class, 2 vCPUs, the same
// benchmarks, none -> 4096 bytes ahead, medians of 5): Q4_0 2048 x 5632
// 23.7 -> 36.7 on 1 thread and 49.4 -> 73.9 on 2, Q8_0 17.0 -> 22.7 and
// 31.8 -> 42.3; 2048 and 8192 bytes ahead measured between the two.
// The F16 GEMM on that Intel, in place -> packed (BM_mul_mat_repack
// 2048 x 2048 x 512, medians of 4): 119.8 -> 142.4 GFLOP/s on 1 thread,
// 212.1 -> 251.2 on 2; synth 1B F16 pp512 47.1 -> 58.1 and 80.9 -> 96.7
// t/s. (On Zen 4 in place had measured faster, gemm_f.cpp.)
// AMD Zen 5 (EPYC family 0x1A model 2, 2 vCPUs; bench_ops one column,
// medians of 3 interleaved runs, GFLOP/s, none -> 4096 bytes ahead, 1
// thread): Q4_0 2048 x 5632 84.3 -> 107.5, Q4_K 76.5 -> 123.5, Q5_K 40.5 ->
// 88.9, Q6_K 49.5 -> 64.8, Q8_0 56.8 -> 57.9, F16 4096 x 4096 29.9 -> 28.1
// (2 threads: 38.7 -> 40.1); synth 1B Q4_K_M tg32, best of 4 processes
// (this VM's runs swung 2-10x between processes), 35.5 -> 49.6 t/s on 1
// thread and 59.6 -> 81.3 on 2; Q4_0, Q8_0 and F16 within the noise.
// 8192 bytes measured like 4096. So Zen 5 prefetches like Intel, and
// Zen 4 and older AMD do not.
//
// Huge pages for the weights (CPU_REPACK buffers advised MADV_HUGEPAGE).
// AMD Zen 4 (EPYC Genoa, 2 vCPUs under KVM, THP mode "madvise"), synth
// models, `tessera bench -r 1`, the advice toggled in one build, medians of
// 4-6 alternating processes, without -> with: 135M Q4_0 tg64 326 -> 336
// t/s (1 thread) and 323 -> 343 (2), Q8_0 157 -> 162, F16 88 -> 96; 1B
// Q4_0 tg32 38.2 -> 38.8, F16 tg16 10.1 -> 11.3; 135M Q8_0 pp512 715 -> 787.
// The KV cache and compute buffers on huge pages as well measured no better
// than without. Loading 1B Q8_0 took 0.70-2.63 s with the advice against
// 0.87-3.52 s without (fewer page faults); an earlier session had measured
// 2.3-7.5 s against 1.0-1.3 s on a host whose memory was fragmented, where
// each fault of an advised region compacts memory first (THP defrag
// "madvise"), hence the switch.
//
// Where the stream prefetches go. Emerald Rapids-class Xeon (2 vCPUs under
// KVM, 300 MiB L3), synth models, `tessera bench -p 0 -n 32 -r 3`, medians
// of 3 processes alternating the two settings, t/s, into L1 (PREFETCHT0) ->
// into L2 (PREFETCHT2), 1 / 2 threads: sapphirerapids build 1B Q4_0 25.3 ->
// 27.3 / 53.7 -> 57.7, Q4_K_M 23.5 -> 24.7 / 49.7 -> 50.0, Q8_0 14.6 -> 14.8
// / 29.8 -> 29.8, F16 6.95 -> 6.85 / 13.4 -> 13.3 (means of 4 more: 7.08 ->
// 6.98 / 13.91 -> 13.74, so F16 stays in L1); haswell build (its 8-row
// one-column kernel) Q4_0 23.6 -> 24.7 / 45.9 -> 48.4, Q8_0 12.8 -> 13.6 /
// 25.0 -> 27.1; but 135M Q4_0, whose 77 MiB of weights stay in L3, 359 ->
// 348 / 599 -> 590. perf put the one-column kernels' stalls on the
// prefetch instructions themselves (the L1 fill buffers full, presumably;
// a prefetch into L2 would hold its buffer for less time). Not measured on
// AMD: L1 there.
// Weights that stay in L3 are the exception: the same Xeon (300 MiB L3),
// `tessera bench -p 0 -n 32 -r 3`, 5 processes alternating L2 -> L1, median
// t/s: 135M Q4_0 (77 MiB) 392 -> 410 on 1 thread, 683 -> 722 on 2; 135M
// Q8_0 (145 MiB) 210 -> 229, 414 -> 427; while 1B Q4_0 (590 MiB) in the
// same session, 3 processes: L1 -> L2 26.8 -> 28.3 and 57.0 -> 61.1, Q8_0
// 16.2 -> 16.6, 32.6 -> 33.6. Hence L2 only while the repacked weights
// exceed the L3 (cpu_tuning::stream_prefetch_l2_above).
cpu_tuning tuning_for(const cpu_model & cpu, const tuning_env & env, std::string & warning) {
    cpu_tuning t;
    const bool amd_zen5_or_later = cpu.vendor == cpu_vendor::amd && cpu.family >= 0x1A;
    t.stream_prefetch = cpu.vendor == cpu_vendor::intel || amd_zen5_or_later ? 4096 : 0;
    t.stream_prefetch_l2 = cpu.vendor == cpu_vendor::intel;
    t.stream_prefetch_l2_above = t.stream_prefetch_l2 ? cpu.l3_bytes : 0;
    t.gemm_float_in_place = cpu.vendor == cpu_vendor::amd;
    t.gemm_f32_rows = cpu.vendor == cpu_vendor::intel;
    warning.clear();
    const auto refuse = [&](const char * name, const char * value, const char * wanted, const std::string & kept) {
        if (!warning.empty()) warning += "\n";
        // (the value escaped: a control byte must not reach the terminal)
        warning += std::string(name) + "='" + tessera::printable(value) + "' is not " + wanted + "; using " + kept;
    };
    if (const char * v = env.stream_prefetch; v != nullptr) {
        char * end = nullptr;
        const unsigned long n = std::strtoul(v, &end, 10);
        const bool digits = *v >= '0' && *v <= '9' && end != v && *end == '\0';
        if (digits && n <= 65536 && n % 64 == 0) {
            t.stream_prefetch = n;
        } else {
            refuse(k_stream_prefetch_env, v, "a byte count that is a multiple of 64 in [0, 65536]", std::to_string(t.stream_prefetch));
        }
    }
    // A 0-or-1 variable `name` with value v (null: unset) over `flag`;
    // whether it was set to a valid value.
    const auto switch_var = [&](const char * name, const char * v, bool & flag) {
        if (v == nullptr) return false;
        if (std::strcmp(v, "0") == 0 || std::strcmp(v, "1") == 0) {
            flag = v[0] == '1';
            return true;
        }
        refuse(name, v, "0 or 1", flag ? "1" : "0");
        return false;
    };
    switch_var(k_gemm_float_in_place_env, env.gemm_float_in_place, t.gemm_float_in_place);
    switch_var(k_huge_pages_env, env.huge_pages, t.huge_pages);
    switch_var(k_amx_env, env.amx, t.amx);
    if (switch_var(k_stream_prefetch_l2_env, env.stream_prefetch_l2, t.stream_prefetch_l2)) {
        t.stream_prefetch_l2_above = 0; // an explicit choice holds for any model
    }
    switch_var(k_gemm_f32_rows_env, env.gemm_f32_rows, t.gemm_f32_rows);
    return t;
}

tuning_env process_tuning_env() {
    return {std::getenv(k_stream_prefetch_env), std::getenv(k_gemm_float_in_place_env), std::getenv(k_huge_pages_env),
            std::getenv(k_amx_env), std::getenv(k_stream_prefetch_l2_env), std::getenv(k_gemm_f32_rows_env)};
}

const cpu_tuning & tuning() {
    static const cpu_tuning t = [] {
        std::string warning;
        const cpu_tuning r = tuning_for(detect_cpu_model(), process_tuning_env(), warning);
        for (size_t at = 0; at < warning.size();) { // one line per bad value
            const size_t end = std::min(warning.find('\n', at), warning.size());
            std::fprintf(stderr, "tessera: warning: %.*s\n", static_cast<int>(end - at), warning.c_str() + at);
            at = end + 1;
        }
        return r;
    }();
    return t;
}

} // namespace tessera::cpu

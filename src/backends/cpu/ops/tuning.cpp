// backends/cpu/ops/tuning.cpp — per-processor kernel choices (tuning.hpp).
#include "backends/cpu/ops/tuning.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace tessera::cpu {

cpu_vendor detect_vendor() {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return cpu_vendor::other;
    char name[13];
    std::memcpy(name, &b, 4); // the vendor string is EBX, EDX, ECX
    std::memcpy(name + 4, &d, 4);
    std::memcpy(name + 8, &c, 4);
    name[12] = '\0';
    if (std::strcmp(name, "GenuineIntel") == 0) return cpu_vendor::intel;
    if (std::strcmp(name, "AuthenticAMD") == 0) return cpu_vendor::amd;
#endif
    return cpu_vendor::other;
}

// Software prefetch of the mat-vec weight streams. AMD Zen 4 (2 vCPUs,
// bench_ops one column, medians of 5-7 interleaved runs, GFLOP/s with a
// prefetch 4096 bytes ahead -> none, 1 thread): Q8_0 36.9 -> 46.8, Q4_0
// 71.6 -> 80.5, F16 17.8 -> 24.4, Q4_K 68.2 -> 83.4: the hardware prefetcher
// alone reads faster. Intel Xeon (Emerald Rapids-class, 2 vCPUs, the same
// benchmarks, none -> 4096 bytes ahead, medians of 5): Q4_0 2048 x 5632
// 23.7 -> 36.7 on 1 thread and 49.4 -> 73.9 on 2, Q8_0 17.0 -> 22.7 and
// 31.8 -> 42.3; 2048 and 8192 bytes ahead measured between the two.
cpu_tuning tuning_for(cpu_vendor vendor, const char * env, std::string & warning) {
    cpu_tuning t;
    t.stream_prefetch = vendor == cpu_vendor::intel ? 4096 : 0;
    warning.clear();
    if (env == nullptr) return t;
    char * end = nullptr;
    const unsigned long v = std::strtoul(env, &end, 10);
    const bool digits = *env >= '0' && *env <= '9' && end != env && *end == '\0';
    if (digits && v <= 65536 && v % 64 == 0) {
        t.stream_prefetch = v;
    } else {
        warning = std::string(k_stream_prefetch_env) + "='" + env +
                  "' is not a byte count that is a multiple of 64 in [0, 65536]; using " +
                  std::to_string(t.stream_prefetch);
    }
    return t;
}

const cpu_tuning & tuning() {
    static const cpu_tuning t = [] {
        std::string warning;
        const cpu_tuning r = tuning_for(detect_vendor(), std::getenv(k_stream_prefetch_env), warning);
        if (!warning.empty()) std::fprintf(stderr, "tessera: warning: %s\n", warning.c_str());
        return r;
    }();
    return t;
}

} // namespace tessera::cpu

// backends/cpu/cpuid.hpp — CPUID's basic leaves 0 and 1 (Intel SDM vol. 2A,
// CPUID; AMD APM vol. 3, appendix E), read in one place for feature
// detection (features.cpp) and for the kernel tuning (ops/tuning.cpp).
// Header-only: features.cpp is in the adapter library and tuning.cpp in the
// kernel libraries, and the kernel tests link only the latter.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace tessera::cpu {

struct x86_basic_leaves {
    uint32_t max_leaf = 0;  // CPUID.0:EAX, highest basic leaf
    char vendor[13] = {};   // CPUID.0: EBX, EDX, ECX as text ("GenuineIntel", "AuthenticAMD"), NUL-terminated
    uint32_t leaf1_eax = 0; // CPUID.1:EAX, family / model / stepping
    uint32_t leaf1_ecx = 0; // CPUID.1:ECX, feature flags
    uint32_t leaf1_edx = 0; // CPUID.1:EDX, feature flags
};

// Reads leaves 0 and 1 of this processor (leaf 1 only when max_leaf >= 1).
// All zero (empty vendor) when CPUID is missing or on non-x86 builds.
inline x86_basic_leaves read_x86_basic_leaves() {
    x86_basic_leaves r;
#if defined(__x86_64__) || defined(__i386__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return r;
    r.max_leaf = a;
    std::memcpy(r.vendor, &b, 4);
    std::memcpy(r.vendor + 4, &d, 4);
    std::memcpy(r.vendor + 8, &c, 4);
    if (r.max_leaf >= 1) {
        __cpuid(1, a, b, c, d);
        r.leaf1_eax = a;
        r.leaf1_ecx = c;
        r.leaf1_edx = d;
    }
#endif
    return r;
}

} // namespace tessera::cpu

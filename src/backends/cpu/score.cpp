// backends/cpu/score.cpp — the CPU plugin variants, the features each is
// compiled for, and their score on a machine. Compiled for the baseline
// ISA; plain C-style code only (see features.hpp).
#include <cstring>

#include "backends/cpu/features.hpp"

namespace tessera::cpu {

namespace {

struct variant_row {
    const char * name;
    int rank;
    uint32_t features;
};

constexpr uint32_t sse42_set = FEAT_SSE3 | FEAT_SSSE3 | FEAT_SSE41 | FEAT_SSE42 | FEAT_POPCNT;
constexpr uint32_t avx_set = sse42_set | FEAT_AVX;
constexpr uint32_t avx2_set = avx_set | FEAT_AVX2 | FEAT_FMA | FEAT_F16C | FEAT_BMI2;
constexpr uint32_t avx512_set = avx2_set | FEAT_AVX512F | FEAT_AVX512BW | FEAT_AVX512DQ |
                                FEAT_AVX512VL;
constexpr uint32_t icelake_set = avx512_set | FEAT_AVX512_VNNI | FEAT_AVX512_VBMI;
constexpr uint32_t zen4_set = icelake_set | FEAT_AVX512_BF16;

// Must match the -m flags of each variant in cpu.cmake.
constexpr variant_row variants[] = {
    {"x64", 1, 0},
    {"sse42", 2, sse42_set},
    {"sandybridge", 3, avx_set},
    {"haswell", 4, avx2_set},
    {"alderlake", 5, avx2_set | FEAT_AVX_VNNI},
    {"skylakex", 6, avx512_set},
    {"icelake", 7, icelake_set},
    {"zen4", 8, zen4_set},
    {"sapphirerapids", 9, zen4_set | FEAT_AMX_TILE | FEAT_AMX_INT8 | FEAT_AMX_BF16},
};

} // namespace

int variant_count() { return int(sizeof(variants) / sizeof(variants[0])); }

const char * variant_at(int i) {
    return (i >= 0 && i < variant_count()) ? variants[i].name : nullptr;
}

bool variant_requirements(const char * name, uint32_t * features) {
    if (name == nullptr) return false;
    for (const variant_row & v : variants) {
        if (std::strcmp(v.name, name) == 0) {
            *features = v.features;
            return true;
        }
    }
    return false;
}

int variant_score(const char * name, uint32_t features) {
    for (const variant_row & v : variants) {
        if (name != nullptr && std::strcmp(v.name, name) == 0) {
            return (features & v.features) == v.features ? v.rank : 0;
        }
    }
    return 0;
}

} // namespace tessera::cpu

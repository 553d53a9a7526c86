// backends/cpu/ops/float_load.hpp — loads of float weights (F32, F16,
// BF16; type T a tsr_type) widened to F32, shared by the float MUL_MAT
// kernels (matvec_f.cpp, gemm_f.cpp) and FLASH_ATTN_EXT's K/V reads
// (flash_attn.cpp). Internal to the CPU kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/ops/simd.hpp"
#include "backends/cpu/ops/tensor_access.hpp"

namespace tessera::cpu::float_load {

// Bytes per element of T.
template <int32_t T>
constexpr size_t esize() {
    return T == TSR_TYPE_F32 ? 4 : 2;
}

// One element at p.
template <int32_t T>
inline float load1(const char * p) {
    if constexpr (T == TSR_TYPE_F32) return read_f32(p);
    else if constexpr (T == TSR_TYPE_F16) return f16_to_f32_inline(read_u16(p));
    else return bf16_to_f32_inline(read_u16(p));
}

#ifdef TSR_CPU_AVX2
// 8 consecutive elements at p (F16 by F16C, BF16 by a 16-bit shift).
template <int32_t T>
inline __m256 load8(const char * p) {
    if constexpr (T == TSR_TYPE_F32) return _mm256_loadu_ps(reinterpret_cast<const float *>(p));
    else if constexpr (T == TSR_TYPE_F16) return simd::load_f16x8(p);
    else return simd::load_bf16x8(p);
}
#endif

#ifdef TSR_CPU_AVX512
// 16 consecutive elements at p.
template <int32_t T>
inline __m512 load16(const char * p) {
    if constexpr (T == TSR_TYPE_F32) return _mm512_loadu_ps(p);
    else if constexpr (T == TSR_TYPE_F16) return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
    else {
        const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
        return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
    }
}
#endif

} // namespace tessera::cpu::float_load

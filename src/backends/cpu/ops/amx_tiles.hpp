// backends/cpu/ops/amx_tiles.hpp — what the AMX kernels share (Intel SDM
// vol. 1 ch. 18 "Intel AMX"): the LDTILECFG operand and the process's
// permission to use the tile data state. Included by the AMX kernels only
// (mul_mat_repack.cpp, gemm_f_amx.cpp); everything has internal linkage
// (one copy per instruction-set variant, as the kernels). Internal to the
// CPU kernels.
#pragma once

#include "backends/cpu/ops/simd.hpp"

#ifdef TSR_CPU_AMX

#include <cstdint>

#include <sys/syscall.h>
#include <unistd.h>

namespace tessera::cpu::amx_tiles {

namespace {

// Palette 1 (SDM vol. 1, 18.2: the 64-byte LDTILECFG operand): tile t has
// rows[t] rows of colsb[t] bytes (at most 16 x 64).
struct alignas(64) tile_config {
    uint8_t palette = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

// Whether this process may use the tile data state: Linux grants it on
// request (arch_prctl ARCH_REQ_XCOMP_PERM 0x1023 for XFEATURE_XTILEDATA 18,
// checked with ARCH_GET_XCOMP_PERM 0x1022: uapi asm/prctl.h); without the
// grant the first tile instruction faults. (features.cpp asks the same for
// the variant's score; the kernels ask again, as test programs call them
// directly.)
inline bool permitted() {
    static const bool ok = [] {
        if (syscall(SYS_arch_prctl, 0x1023, 18) != 0) return false;
        unsigned long mask = 0;
        return syscall(SYS_arch_prctl, 0x1022, &mask) == 0 && ((mask >> 18) & 1ul) != 0;
    }();
    return ok;
}

} // namespace

} // namespace tessera::cpu::amx_tiles

#endif // TSR_CPU_AMX

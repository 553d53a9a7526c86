// backends/cpu/ops/block_prefetch.hpp — the float GEMMs' software prefetch
// of the weights they copy next (gemm_f.cpp, gemm_f32_rows.cpp), spread
// over the micro-tiles that run before. Vector builds only (TSR_CPU_AVX2);
// in an unnamed namespace (internal linkage, one copy per instruction-set
// variant, as the kernels that use it). Internal to the CPU kernels.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "backends/cpu/ops/simd.hpp"

#ifdef TSR_CPU_AVX2

namespace tessera::cpu {

namespace {

// Prefetches (into L2) the weights a packing reads next, a slice per
// micro-tile or activation tile, so they arrive from memory while the
// micro-kernels run rather than when the packing stalls on them: `runs`
// runs of run_bytes contiguous bytes, `stride` bytes apart from `start`
// (rows of a row-contiguous matrix, or the groups of a repacked one), cut
// into `slices` slices. A default-constructed one prefetches nothing.
struct a_prefetch {
    const char * start = nullptr;
    size_t stride = 0;
    int64_t lines_per_run = 0, total = 0, per_slice = 0;

    a_prefetch() = default;
    a_prefetch(const char * start_, size_t stride_, size_t run_bytes, int64_t runs, int64_t slices)
        : start(start_), stride(stride_), lines_per_run(static_cast<int64_t>((run_bytes + 63) / 64)) {
        total = runs * lines_per_run;
        per_slice = (total + slices - 1) / std::max<int64_t>(slices, 1);
    }
    void slice(int64_t i) const {
        const int64_t end = std::min(total, (i + 1) * per_slice);
        for (int64_t l = i * per_slice; l < end; ++l) {
            const int64_t r = l / lines_per_run, c = l % lines_per_run;
            _mm_prefetch(start + static_cast<size_t>(r) * stride + static_cast<size_t>(c) * 64, _MM_HINT_T1);
        }
    }
};

} // namespace

} // namespace tessera::cpu

#endif // TSR_CPU_AVX2

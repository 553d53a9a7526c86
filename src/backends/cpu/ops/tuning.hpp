// backends/cpu/ops/tuning.hpp — choices of the kernels that measurement
// showed to differ between processors of one instruction-set variant
// (the same AVX-512 code runs on AMD Zen 4/5 and Intel Xeons), decided
// once per process from the processor's vendor and family, with an
// environment override for measuring them.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>
#include <type_traits>

namespace tessera::cpu {

enum class cpu_vendor { other, intel, amd };

// The processor as CPUID names it. family and model are the "display"
// values of the Intel SDM (vol. 2A, CPUID leaf 1) and AMD APM (vol. 3,
// CPUID Fn0000_0001_EAX): the base family plus the extended family when the
// base is 0xF; the model with the extended model as its high nibble when
// the base family is 0x6 or 0xF. AMD Zen 3/4: family 0x19, Zen 5: 0x1A.
struct cpu_model {
    cpu_vendor vendor = cpu_vendor::other;
    unsigned family = 0;
    unsigned model = 0;
    // Bytes of the last-level (L3) cache as the C library reports it
    // (sysconf _SC_LEVEL3_CACHE_SIZE, from CPUID; under a hypervisor the
    // host's); 0 where unknown.
    size_t l3_bytes = 0;
};

// The vendor from CPUID leaf 0 ("GenuineIntel", "AuthenticAMD"), family and
// model from leaf 1; all `other`/0 on non-x86 builds.
cpu_model detect_cpu_model();

// The display family and model from CPUID leaf 1's EAX (see cpu_model).
cpu_model cpu_model_from_leaf1(cpu_vendor vendor, unsigned eax);

struct cpu_tuning {
    // Bytes ahead in a one-column product's weight stream (the mat-vec
    // kernels of repacked Q8_0/Q4_0/Q5_0/Q5_1, F16/BF16 and K-quant
    // weights) to software-prefetch, one prefetch per 64-byte line; 0: none,
    // the hardware prefetcher alone. Intel and AMD from family 0x1A (Zen 5):
    // 4096; older AMD (Zen 4) and others: 0 (see tuning.cpp for the
    // measurements).
    size_t stream_prefetch = 0;
    // Where those prefetches of quantized weights put a line: L2
    // (PREFETCHT2; true) or L1 (PREFETCHT0). Intel: L2; AMD: L1 (see
    // tuning.cpp for the measurements). The AVX2 8-row kernels' own prefetch
    // (a fixed 4096 bytes ahead, mul_mat_repack.cpp) follows it for one
    // column too. F16/BF16 weights are prefetched into L1 either way.
    bool stream_prefetch_l2 = false;
    // With stream_prefetch_l2: into L2 only while this process's repacked
    // weights (live_repack_bytes) exceed this many bytes; 0: whatever their
    // size. Intel default: the L3 size (cpu_model::l3_bytes), since weights
    // that stay in L3 measured faster prefetched into L1 (tuning.cpp); an
    // explicit TESSERA_CPU_STREAM_PREFETCH_L2 sets 0.
    size_t stream_prefetch_l2_above = 0;
    // The AVX-512 GEMM of repacked F16/BF16 weights (gemm_f.cpp) reads the
    // groups in place and widens them in registers (true), or first widens
    // a block of them into an F32 panel, as the AVX2 one does (false). AMD:
    // true; others: false (on Intel the widening shares the two FMA ports).
    bool gemm_float_in_place = false;
    // The AVX-512 GEMM of F32 weights in plain rows (N >= k_gemm_min_n)
    // broadcasts the weights from their rows and takes the activations as
    // vectors (gemm_f32_rows.cpp), so the weights are copied, never
    // transposed, into panels; false: the panels of gemm_f.cpp (8 x 8
    // transposes). The same bits either way. Intel: true; others: false
    // (on a Zen 4 EPYC level with the panels, 0.97-1.06; other vendors not
    // measured; see gemm_f32_rows.cpp for the measurements).
    bool gemm_f32_rows = false;
    // Large weight buffers (CPU_REPACK, 4 MiB or more) are advised onto
    // transparent huge pages (madvise MADV_HUGEPAGE, Linux): every vendor
    // (see tuning.cpp for the measurements). Without the advice they get
    // huge pages only where the system's THP mode is "always".
    bool huge_pages = true;
    // The GEMM of repacked Q8_0/Q4_0/Q5_0/Q5_1 weights and of Q4_K/Q5_K/
    // Q6_K weights (N >= k_gemm_min_n columns) multiplies on AMX tiles
    // (TDPBSSD) where the build has them (TSR_CPU_AMX) and Linux grants this
    // process the tile state; the same bits as the AVX-512 kernels
    // (mul_mat_repack.cpp, gemm_k.cpp). Every vendor: true; false is for
    // measuring against the AVX-512 kernels.
    bool amx = true;
};

// Environment variables overriding the defaults: cpu_tuning::stream_prefetch
// (a byte count, a multiple of 64 in [0, 65536]),
// cpu_tuning::gemm_float_in_place, cpu_tuning::huge_pages, cpu_tuning::amx,
// cpu_tuning::stream_prefetch_l2 and cpu_tuning::gemm_f32_rows (0 or 1).
inline constexpr const char * k_stream_prefetch_env = "TESSERA_CPU_STREAM_PREFETCH";
inline constexpr const char * k_gemm_float_in_place_env = "TESSERA_CPU_GEMM_FLOAT_IN_PLACE";
inline constexpr const char * k_huge_pages_env = "TESSERA_CPU_HUGE_PAGES";
inline constexpr const char * k_amx_env = "TESSERA_CPU_AMX";
inline constexpr const char * k_stream_prefetch_l2_env = "TESSERA_CPU_STREAM_PREFETCH_L2";
inline constexpr const char * k_gemm_f32_rows_env = "TESSERA_CPU_GEMM_F32_ROWS";

// The variables' values (null: not set).
struct tuning_env {
    const char * stream_prefetch = nullptr;
    const char * gemm_float_in_place = nullptr;
    const char * huge_pages = nullptr;
    const char * amx = nullptr;
    const char * stream_prefetch_l2 = nullptr;
    const char * gemm_f32_rows = nullptr;
};

// The variables as this process's environment has them (getenv).
tuning_env process_tuning_env();

// The tuning for a processor, with each value of `env` in place of its
// default when it is valid; otherwise `warning` gets a sentence naming the
// variable, the value and the default kept (one line per bad value; empty
// when there is nothing to say).
cpu_tuning tuning_for(const cpu_model & cpu, const tuning_env & env, std::string & warning);

// This process's tuning: tuning_for(detect_cpu_model(), process_tuning_env()),
// computed on the first call (warnings go to stderr once).
const cpu_tuning & tuning();

// Bytes of CPU_REPACK buffers (the repacked weights, which the one-token
// kernels stream) this process holds now; cpu_repack_buffer.cpp adds a
// buffer's size when it is allocated and subtracts it when it is freed.
std::atomic<size_t> & live_repack_bytes();

// A weight stream's software prefetch as a kernel's template argument:
// none, into L1 or into L2 (cpu_tuning::stream_prefetch, stream_prefetch_l2).
enum class stream_pf { none, l1, l2 };

// Whether weight streams are prefetched into L2 with `weight_bytes` of
// repacked weights: stream_prefetch_l2, and the weights exceed
// stream_prefetch_l2_above (or it is 0).
inline bool stream_into_l2(const cpu_tuning & t, size_t weight_bytes) {
    return t.stream_prefetch_l2 && (t.stream_prefetch_l2_above == 0 || weight_bytes > t.stream_prefetch_l2_above);
}

// The same for the weights this process holds now (live_repack_bytes).
inline bool stream_into_l2(const cpu_tuning & t) {
    return stream_into_l2(t, live_repack_bytes().load(std::memory_order_relaxed));
}

// The kind a tuning asks for with `weight_bytes` of repacked weights: none
// when its stream_prefetch is 0, else l2 or l1 as stream_into_l2 says.
inline stream_pf stream_pf_of(const cpu_tuning & t, size_t weight_bytes) {
    if (t.stream_prefetch == 0) return stream_pf::none;
    return stream_into_l2(t, weight_bytes) ? stream_pf::l2 : stream_pf::l1;
}

// The same for the weights this process holds now (live_repack_bytes).
inline stream_pf stream_pf_of(const cpu_tuning & t) {
    return stream_pf_of(t, live_repack_bytes().load(std::memory_order_relaxed));
}

// Prefetches the line holding p as P says: PREFETCHT0 for l1, PREFETCHT2 for
// l2 on x86 (GCC's __builtin_prefetch locality 3 and 1); nothing for none.
template <stream_pf P>
inline void prefetch_line(const void * p) {
    if constexpr (P == stream_pf::l1) __builtin_prefetch(p, 0, 3);
    if constexpr (P == stream_pf::l2) __builtin_prefetch(p, 0, 1);
    (void)p;
}

// f(std::integral_constant<stream_pf, P>{}) for P = k: a kernel templated
// on the kind, called with the one chosen at run time.
template <class F>
decltype(auto) with_stream_pf(stream_pf k, F && f) {
    switch (k) {
    case stream_pf::l1: return f(std::integral_constant<stream_pf, stream_pf::l1>{});
    case stream_pf::l2: return f(std::integral_constant<stream_pf, stream_pf::l2>{});
    default: return f(std::integral_constant<stream_pf, stream_pf::none>{});
    }
}

} // namespace tessera::cpu

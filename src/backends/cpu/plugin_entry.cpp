// backends/cpu/plugin_entry.cpp — the entry points of a CPU variant plugin
// (libtessera-cpu-<variant>.so; include/tessera/backend.h). Compiled once
// per variant with TESSERA_CPU_VARIANT set, for the BASELINE ISA: the score
// runs before anyone knows whether this processor can run the variant.
#include "backends/cpu/features.hpp"
#include "tessera/backend.h"
#include "tessera/backend/cpu.hpp"

#ifndef TESSERA_CPU_VARIANT
#error "TESSERA_CPU_VARIANT must name the variant this plugin is built for"
#endif

extern "C" {

#ifndef TESSERA_CPU_BASE
// 0 when this processor (and OS) lacks a feature the variant was compiled
// for; otherwise the variant's rank (see score.cpp). The base library
// (libtessera-cpu.so, TESSERA_CPU_BASE, built where there are no variants)
// runs on any processor of its architecture and has no score.
TSR_BACKEND_EXPORT int tessera_backend_score(void) {
    return tessera::cpu::variant_score(TESSERA_CPU_VARIANT, tessera::cpu::detect_features());
}
#endif

TSR_BACKEND_EXPORT tsr_reg * tessera_backend_init(void) { return tessera::cpu::backend_reg(); }

} // extern "C"

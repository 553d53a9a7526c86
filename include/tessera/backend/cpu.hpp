// tessera/backend/cpu.hpp — the CPU backend compiled into a program.
//
// With TESSERA_CPU_STATIC, registry::global() registers it by itself; a
// program or test linking the target tessera_cpu_backend may also register
// it into its own registry: reg.register_backend(tessera::cpu::backend_reg()).
// The loadable variants (libtessera-cpu-<variant>.so) return the same reg
// from tessera_backend_init.
//
// Its family name is "cpu", its one device "CPU". Extension functions
// (get_proc_address): tsr_backend_set_n_threads, tsr_backend_set_abort_callback,
// tsr_threadpool_new/free/pause/resume, tsr_backend_set_threadpool,
// tsr_reg_get_features, tsr_dev_get_extra_bufts. Backend params:
// "n_threads=N" (default: the number of hardware threads).
//
// Buffer types: "CPU" (default, host memory), "CPU_Mapped" (buffers over
// caller-owned host memory) and one extra type, "CPU_REPACK": for weights;
// a 2-D Q8_0/Q4_0 matrix with a multiple of 8 rows (Q4_0 on the
// AVX512-VNNI variants icelake, zen4, sapphirerapids: 16) placed there is
// stored with its rows interleaved for the MUL_MAT kernels (is_host false: read
// and write it through tensor_get/tensor_set, which see the original
// bytes); only MUL_MAT may use such a matrix, as its src[0].
#pragma once

#include "tessera/backend.h"

namespace tessera::cpu {

// The CPU backend's reg (static storage; never null).
tsr_reg * backend_reg();

} // namespace tessera::cpu

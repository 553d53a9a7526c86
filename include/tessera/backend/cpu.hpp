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
// a 2-D matrix placed there (packed rows, not a view) is stored with its
// rows interleaved for the MUL_MAT kernels when its type is Q8_0, Q4_0,
// Q5_0 or Q5_1 (every variant), F16, BF16, Q4_K or Q5_K (variants with
// AVX2/F16C) or Q6_K (AVX-512 variants), and its row count a multiple of
// the type's row group (8 or 16 by type and variant); other tensors there
// keep the plain layout. Read and write an interleaved matrix through
// tensor_get/tensor_set, which see the original bytes (is_host false);
// only MUL_MAT may use it, as its src[0]: any other node reading it (a
// GET_ROWS of an embedding tied to the output matrix) is unsupported
// (supports_op false, compute FAILED), so keep such tensors in "CPU".
#pragma once

#include "tessera/backend.h"

namespace tessera::cpu {

// The CPU backend's reg (static storage; never null).
tsr_reg * backend_reg();

} // namespace tessera::cpu

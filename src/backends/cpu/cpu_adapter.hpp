// backends/cpu/cpu_adapter.hpp — the pieces of the CPU backend's C tables
// (include/tessera/backend.h) shared between its files. Internal.
//
// Files: cpu_buffer.cpp (buffer types and buffers), cpu_backend.cpp (the
// backend: graph compute, plans, thread count, abort callback, thread
// pools), cpu_device.cpp (device, reg, extension lookup, features),
// variant_isa.cpp (what this build was compiled for), plugin_entry.cpp
// (plugin entry points, one per variant).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tessera/backend.h"

namespace tessera::cpu {

// Data alignment of the "CPU" buffer type, bytes (a 512-bit vector).
inline constexpr size_t buffer_alignment = 64;

// "CPU": host memory, 64-byte aligned. Its device field is the CPU device.
tsr_buffer_type * host_buffer_type();
// "CPU_Mapped": the type of buffers over caller-owned host memory
// (buffer_from_host_ptr); alignment 1, since placement inside such memory
// follows the memory's own layout (e.g. a GGUF file's alignment).
tsr_buffer_type * mapped_buffer_type();
// "CPU_REPACK" (cpu_repack_buffer.cpp): weights with Q8_0/Q4_0 (and, with
// F16C, F16/BF16) matrices stored row-interleaved (ops/repack.hpp); the device's extra buffer type.
tsr_buffer_type * repack_buffer_type();
// True for any buffer type whose memory is host memory.
bool is_host_buffer_type(tsr_buffer_type * buft);
// A buffer over `size` bytes at `ptr`, never freeing it; null on failure.
tsr_buffer * buffer_from_host_ptr(void * ptr, size_t size);

// Shared by the buffers that own their memory (context = the memory from
// aligned_alloc): a new buffer of `size` bytes with table `iface`, aligned
// to buffer_alignment; with huge_pages, one of 4 MiB or more is aligned to
// 2 MiB and, where cpu_tuning::huge_pages (ops/tuning.hpp) is on, advised
// onto transparent huge pages (madvise MADV_HUGEPAGE, Linux). Null when
// the size overflows or memory is short.
tsr_buffer * alloc_owned_buffer(const tsr_buffer_i * iface, tsr_buffer_type * bt, size_t size, bool huge_pages);
// True when alloc_owned_buffer advises huge pages: cpu_tuning::huge_pages
// on a system with madvise(MADV_HUGEPAGE) (Linux).
bool huge_page_advice();
// The matching tsr_buffer_i slots: the base pointer, free (memory and
// buffer), and clear (every byte of the buffer's size).
void * owned_buffer_base(tsr_buffer * b);
void free_owned_buffer(tsr_buffer * b);
void clear_owned_buffer(tsr_buffer * b, uint8_t value);

// A new CPU backend on `dev`. params: null, "" or "n_threads=N" (';' or ','
// separated key=value pairs); null for unknown keys or bad values.
tsr_backend * backend_new(tsr_device * dev, const char * params);
// The backend-level extension functions (set_n_threads, abort callback,
// thread pools) by name, or null.
void * backend_proc_address(const char * name);

// Variant this build is ("haswell", ...; "native" or "x64" when compiled in).
const char * build_variant_name();
// FEAT_* bits this build's code was compiled to use (from the compiler's
// predefined ISA macros).
uint32_t build_isa_features();

} // namespace tessera::cpu

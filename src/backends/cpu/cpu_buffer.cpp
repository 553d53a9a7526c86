// backends/cpu/cpu_buffer.cpp — the CPU backend's buffer types and buffers:
// aligned host allocations ("CPU") and wrappers over caller-owned host
// memory such as a memory-mapped model file ("CPU_Mapped").

#include <cstdlib>
#include <cstring>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "backends/cpu/cpu_adapter.hpp"
#include "backends/cpu/ops/tuning.hpp"
#include "tessera/core/tensor.hpp"

namespace tessera::cpu {

extern tsr_device cpu_device_object; // cpu_device.cpp

namespace {

// ---- buffers (context = the data pointer) ----

void buf_free_wrapped(tsr_buffer * b) { delete b; }

void buf_set(tsr_buffer *, tsr_tensor * t, const void * data, size_t off, size_t n) {
    std::memcpy(static_cast<char *>(t->data) + off, data, n);
}

void buf_get(tsr_buffer *, const tsr_tensor * t, void * data, size_t off, size_t n) {
    std::memcpy(data, static_cast<const char *>(t->data) + off, n);
}

void buf_memset(tsr_buffer *, tsr_tensor * t, uint8_t v, size_t off, size_t n) {
    std::memset(static_cast<char *>(t->data) + off, v, n);
}

// Copies from any host-memory source (src->buffer null means host memory).
bool buf_cpy(tsr_buffer *, const tsr_tensor * src, tsr_tensor * dst) {
    if (src->buffer != nullptr && !is_host_buffer_type(src->buffer->buft)) return false;
    std::memcpy(dst->data, src->data, nbytes(src));
    return true;
}

constexpr tsr_buffer_i owned_iface = {
    .size = sizeof(tsr_buffer_i),
    .free_buffer = free_owned_buffer,
    .get_base = owned_buffer_base,
    .set_tensor = buf_set,
    .get_tensor = buf_get,
    .clear = clear_owned_buffer,
    .init_tensor = nullptr,
    .memset_tensor = buf_memset,
    .cpy_tensor = buf_cpy,
};

constexpr tsr_buffer_i wrapped_iface = {
    .size = sizeof(tsr_buffer_i),
    .free_buffer = buf_free_wrapped,
    .get_base = owned_buffer_base, // context = the caller's memory
    .set_tensor = buf_set,
    .get_tensor = buf_get,
    .clear = clear_owned_buffer,
    .init_tensor = nullptr,
    .memset_tensor = buf_memset,
    .cpy_tensor = buf_cpy,
};

tsr_buffer * new_buffer(const tsr_buffer_i * iface, tsr_buffer_type * bt, void * mem, size_t size) {
    auto * b = new (std::nothrow) tsr_buffer{};
    if (b == nullptr) return nullptr;
    b->iface = iface;
    b->buft = bt;
    b->context = mem;
    b->size = size;
    return b;
}

// ---- buffer types ----

const char * host_name(tsr_buffer_type *) { return "CPU"; }
const char * mapped_name(tsr_buffer_type *) { return "CPU_Mapped"; }

tsr_buffer * alloc_host(tsr_buffer_type * bt, size_t size) {
    return alloc_owned_buffer(&owned_iface, bt, size, false);
}

size_t host_alignment(tsr_buffer_type *) { return buffer_alignment; }
size_t mapped_alignment(tsr_buffer_type *) { return 1; }
bool yes(tsr_buffer_type *) { return true; }

constexpr tsr_buffer_type_i host_iface = {
    .size = sizeof(tsr_buffer_type_i),
    .get_name = host_name,
    .alloc_buffer = alloc_host,
    .get_alignment = host_alignment,
    .get_max_size = nullptr,
    .get_alloc_size = nullptr,
    .is_host = yes,
};

// Allocating from the mapped type gives ordinary host buffers.
constexpr tsr_buffer_type_i mapped_iface = {
    .size = sizeof(tsr_buffer_type_i),
    .get_name = mapped_name,
    .alloc_buffer = alloc_host,
    .get_alignment = mapped_alignment,
    .get_max_size = nullptr,
    .get_alloc_size = nullptr,
    .is_host = yes,
};

// Constant-initialized: no code runs when the library is opened.
tsr_buffer_type host_type = {&host_iface, &cpu_device_object, nullptr};
tsr_buffer_type mapped_type = {&mapped_iface, &cpu_device_object, nullptr};

} // namespace

void * owned_buffer_base(tsr_buffer * b) { return b->context; }

void free_owned_buffer(tsr_buffer * b) {
    std::free(b->context);
    delete b;
}

void clear_owned_buffer(tsr_buffer * b, uint8_t value) { std::memset(b->context, value, b->size); }

bool huge_page_advice() {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    return tuning().huge_pages;
#else
    return false;
#endif
}

tsr_buffer * alloc_owned_buffer(const tsr_buffer_i * iface, tsr_buffer_type * bt, size_t size, bool huge_pages) {
    constexpr size_t k_huge_page = size_t(2) << 20;
    const size_t align = huge_pages && size >= 2 * k_huge_page ? k_huge_page : buffer_alignment;
    // aligned_alloc needs a size that is a multiple of the alignment, and
    // the base must be non-null even for an empty buffer.
    size_t rounded = 0;
    if (__builtin_add_overflow(size, align - 1, &rounded)) return nullptr;
    rounded = rounded / align * align;
    if (rounded == 0) rounded = align;
    void * mem = std::aligned_alloc(align, rounded);
    if (mem == nullptr) return nullptr;
    // Advised onto transparent huge pages (cpu_tuning::huge_pages: weights
    // read on every token cross no 4 KiB page boundaries, where the hardware
    // prefetchers stop, and take fewer TLB misses; measurements in
    // tuning.cpp). Only advice: a system without THP ignores it (EINVAL).
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (align == k_huge_page && huge_page_advice()) (void)::madvise(mem, rounded, MADV_HUGEPAGE);
#endif
    tsr_buffer * b = new_buffer(iface, bt, mem, size);
    if (b == nullptr) std::free(mem);
    return b;
}

tsr_buffer_type * host_buffer_type() { return &host_type; }

tsr_buffer_type * mapped_buffer_type() { return &mapped_type; }

bool is_host_buffer_type(tsr_buffer_type * bt) {
    if (bt == nullptr || bt->iface == nullptr) return false;
    if (bt == &host_type || bt == &mapped_type) return true;
    const tsr_buffer_type_i * i = bt->iface;
    return TSR_HAS_SLOT(tsr_buffer_type_i, i, is_host) && i->is_host != nullptr && i->is_host(bt);
}

tsr_buffer * buffer_from_host_ptr(void * ptr, size_t size) {
    if (ptr == nullptr) return nullptr;
    return new_buffer(&wrapped_iface, mapped_buffer_type(), ptr, size);
}

} // namespace tessera::cpu

// backends/cpu/cpu_repack_buffer.cpp — "CPU_REPACK", the CPU device's extra
// buffer type for weights: host memory in which every Q8_0/Q4_0/Q5_0/Q5_1 matrix
// that qualifies (ops/repack.hpp: 2-D, rows a multiple of 8, packed; Q4_0
// in AVX512-VNNI builds of 16) is stored with its rows interleaved in groups
// of 8 (those Q4_0: 16) for the MUL_MAT kernels (ops/mul_mat_repack.cpp),
// and in builds with F16C every such F16/BF16 matrix (rows a multiple of
// 16) in groups of 16 rows for the float kernels (matvec_f.cpp, gemm_f.cpp),
// every Q4_K and Q5_K matrix in groups of 8 or 16 rows (AVX-512), with
// AVX-512 every Q6_K one in groups of 16, for
// mul_mat_k_repack.cpp and gemm_k.cpp.
//
// Users see no difference: set_tensor takes and get_tensor returns the
// original (GGUF) bytes, memset and copies go through the same mapping;
// tensors that do not qualify are stored plainly. The type reports
// is_host = false because a repacked tensor's data cannot be read directly
// through its data pointer; the device still computes on it (supports_buft).
// Only MUL_MAT may read a repacked tensor, as its src[0] (compute.cpp).
#include <algorithm>
#include <cstring>

#include "backends/cpu/cpu_adapter.hpp"
#include "backends/cpu/ops/repack.hpp"
#include "backends/cpu/ops/tuning.hpp"
#include "tessera/core/tensor.hpp"

namespace tessera::cpu {

extern tsr_device cpu_device_object; // cpu_device.cpp

namespace {

// ---- buffers (context = the data pointer) ----

// The repacked tensor whose plain bytes `t`'s bytes from `off` on are, with
// `off` moved to that tensor's: t itself, or the root of a view of one (a
// view's data is view_src->data + view_offs, so its byte `off` is the
// root's view_offs + off; a view has no layout of its own, extra is null).
// Null when the bytes are stored as they are.
tsr_tensor * repacked_bytes(const tsr_tensor * t, size_t & off) {
    if (is_repacked(t)) return const_cast<tsr_tensor *>(t);
    if (t->view_src != nullptr && is_repacked(t->view_src)) {
        off += static_cast<size_t>(t->view_offs);
        return t->view_src;
    }
    return nullptr;
}

void rb_set(tsr_buffer *, tsr_tensor * t, const void * data, size_t off, size_t n) {
    if (tsr_tensor * r = repacked_bytes(t, off)) {
        repack_store(r, data, off, n);
    } else {
        std::memcpy(static_cast<char *>(t->data) + off, data, n);
    }
}

void rb_get(tsr_buffer *, const tsr_tensor * t, void * data, size_t off, size_t n) {
    if (const tsr_tensor * r = repacked_bytes(t, off)) {
        repack_load(r, data, off, n);
    } else {
        std::memcpy(data, static_cast<const char *>(t->data) + off, n);
    }
}

// Decides the layout of a tensor placed here (extra is this backend's).
tsr_status rb_init(tsr_buffer *, tsr_tensor * t) {
    t->extra = repack_eligible(t) ? const_cast<char *>(&k_repack_tag) : nullptr;
    return TSR_STATUS_SUCCESS;
}

void rb_memset(tsr_buffer *, tsr_tensor * t, uint8_t v, size_t off, size_t n) {
    tsr_tensor * r = repacked_bytes(t, off);
    if (r == nullptr) {
        std::memset(static_cast<char *>(t->data) + off, v, n);
        return;
    }
    uint8_t chunk[4096];
    std::memset(chunk, v, sizeof chunk);
    for (size_t done = 0; done < n;) {
        const size_t k = std::min(sizeof chunk, n - done);
        repack_store(r, chunk, off + done, k);
        done += k;
    }
}

// From plain host memory (a host buffer's tensor, or memory owned elsewhere).
bool rb_cpy(tsr_buffer * b, const tsr_tensor * src, tsr_tensor * dst) {
    if (reads_repacked(src)) return false;
    if (src->buffer != nullptr && !is_host_buffer_type(src->buffer->buft)) return false;
    rb_set(b, dst, src->data, 0, nbytes(src));
    return true;
}

// Freed: its bytes leave live_repack_bytes (ops/tuning.hpp), which
// rt_alloc added them to.
void rb_free(tsr_buffer * b) {
    live_repack_bytes().fetch_sub(b->size, std::memory_order_relaxed);
    free_owned_buffer(b);
}

constexpr tsr_buffer_i repack_buffer_iface = {
    .size = sizeof(tsr_buffer_i),
    .free_buffer = rb_free,
    .get_base = owned_buffer_base,
    .set_tensor = rb_set,
    .get_tensor = rb_get,
    .clear = clear_owned_buffer,
    .init_tensor = rb_init,
    .memset_tensor = rb_memset,
    .cpy_tensor = rb_cpy,
};

// ---- buffer type ----

const char * rt_name(tsr_buffer_type *) { return "CPU_REPACK"; }

// Large buffers are 2 MiB-aligned and advised onto huge pages
// (alloc_owned_buffer, cpu_tuning::huge_pages). Their sizes are summed in
// live_repack_bytes, by which the one-token kernels choose where to
// prefetch the weights (cpu_tuning::stream_prefetch_l2_above).
tsr_buffer * rt_alloc(tsr_buffer_type * bt, size_t size) {
    tsr_buffer * b = alloc_owned_buffer(&repack_buffer_iface, bt, size, true);
    if (b != nullptr) live_repack_bytes().fetch_add(b->size, std::memory_order_relaxed);
    return b;
}

size_t rt_alignment(tsr_buffer_type *) { return buffer_alignment; }
bool rt_is_host(tsr_buffer_type *) { return false; }

constexpr tsr_buffer_type_i repack_type_iface = {
    .size = sizeof(tsr_buffer_type_i),
    .get_name = rt_name,
    .alloc_buffer = rt_alloc,
    .get_alignment = rt_alignment,
    .get_max_size = nullptr,
    .get_alloc_size = nullptr, // the interleaved layout takes the original bytes
    .is_host = rt_is_host,
};

// Constant-initialized; context = the tag the kernels recognize.
tsr_buffer_type repack_type = {&repack_type_iface, &cpu_device_object,
                               const_cast<char *>(&k_repack_tag)};

} // namespace

tsr_buffer_type * repack_buffer_type() { return &repack_type; }

} // namespace tessera::cpu

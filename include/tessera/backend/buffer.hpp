// tessera/backend/buffer.hpp — an owned backend buffer, and reading/writing
// a tensor's data wherever it lives.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tessera/backend.h"
#include "tessera/backend/lease.hpp"

namespace tessera {

class buffer_type;

// A block of device memory made by a buffer type (or wrapping host memory,
// see device::buffer_from_host_ptr). Owns the tsr_buffer: the destructor
// frees it through the backend's free_buffer slot (should that throw, the
// buffer is leaked and reported on stderr, see backend.hpp). Move-only.
// Tensors placed in it must not be used after it is destroyed. One thread
// at a time.
class buffer {
public:
    buffer() = default;
    // Takes ownership of `b` (non-null), made by the backend `l` refers to.
    buffer(tsr_buffer * b, detail::lease l);
    ~buffer() { reset(); }
    buffer(buffer && o) noexcept;
    buffer & operator=(buffer && o) noexcept;
    buffer(const buffer &) = delete;
    buffer & operator=(const buffer &) = delete;

    explicit operator bool() const { return buf_ != nullptr; }
    tsr_buffer * get() const { return buf_; }
    // Frees the buffer now (idempotent).
    void reset() noexcept;

    // Size in bytes, as allocated.
    size_t size() const;
    // Address of the first byte (for host buffers, ordinary memory).
    void * base() const;
    // The buffer type that made it.
    buffer_type type() const;
    bool is_host() const;

    tsr_buffer_usage usage() const;
    void set_usage(tsr_buffer_usage usage);

    // Sets every byte to `value`.
    void clear(uint8_t value);

    // Places tensor `t` at byte `offset` of this buffer: t->data = base() +
    // offset, t->buffer = get(), then the backend's init_tensor. Throws
    // tessera::error naming the tensor when the offset is not a multiple of
    // the buffer type's alignment, when offset + alloc_size(t) exceeds size(),
    // when t is a view, or when init_tensor fails. Views of t made before it
    // was placed again keep their old data pointer: make views after
    // placing their source (graph_allocator does this for a graph's views).
    void place(tsr_tensor * t, size_t offset);

private:
    tsr_buffer * buf_ = nullptr;
    detail::lease lease_;
};

// Tensor data access through the buffer the tensor lives in (t->buffer, or
// its view source's buffer), or plain memcpy for host memory owned elsewhere
// (t->buffer null, t->data set). `offset` and `size` are bytes relative to
// t->data; offset + size must lie within nbytes(t). Errors (no data, out of
// range) throw tessera::error naming the tensor; a buffer slot that throws
// a C++ exception, tessera::error naming the buffer type and the slot. The
// buffer must be alive.
void tensor_set(tsr_tensor * t, const void * data, size_t offset, size_t size);
void tensor_get(const tsr_tensor * t, void * data, size_t offset, size_t size);
void tensor_memset(tsr_tensor * t, uint8_t value, size_t offset, size_t size);
// Copies all bytes of src into dst; both must have the same byte size.
void tensor_copy(const tsr_tensor * src, tsr_tensor * dst);

namespace detail {
// Throws tessera::error (prefixed `what`) unless t has data and
// [offset, offset + size) lies within nbytes(t).
void check_tensor_range(const tsr_tensor * t, size_t offset, size_t size, const char * what);
} // namespace detail

} // namespace tessera

// tessera/backend/buffer_type.hpp — a kind of device memory (e.g. "CPU").
#pragma once

#include <cstddef>
#include <memory>

#include "tessera/backend.h"
#include "tessera/backend/buffer.hpp"

namespace tessera {

class device;

// A non-owning handle to a buffer type. Valid while its backend stays
// registered (calls after the backend was unloaded throw tessera::error).
// Copyable; its getters are thread-safe.
class buffer_type {
public:
    buffer_type() = default;
    buffer_type(tsr_buffer_type * buft, std::shared_ptr<detail::reg_entry> entry);

    explicit operator bool() const { return buft_ != nullptr; }
    tsr_buffer_type * get() const { return buft_; }
    bool operator==(const buffer_type & o) const { return buft_ == o.buft_; }

    const char * name() const;
    // Alignment of tensor data in its buffers, bytes (a power of two).
    // Largest alignment accepted; alignment() throws for one above it or one
    // that is not a power of two (0 is taken as 1).
    static constexpr size_t max_alignment = size_t(64) << 20;
    size_t alignment() const;
    // Largest buffer it can allocate, bytes (SIZE_MAX when unlimited).
    size_t max_size() const;
    // Bytes tensor `t` needs in this buffer type (at least nbytes(t)).
    size_t alloc_size(const tsr_tensor * t) const;
    // True when its memory is host memory the CPU can use through data pointers.
    bool is_host() const;
    // The owning device (empty handle for a shared host type).
    device get_device() const;

    // A new buffer of `size` bytes. Throws tessera::error naming the buffer
    // type and the size when size > max_size() or the allocation fails.
    buffer alloc(size_t size) const;

private:
    tsr_buffer_type * buft_ = nullptr;
    std::shared_ptr<detail::reg_entry> entry_;
};

} // namespace tessera

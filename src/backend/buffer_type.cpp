// backend/buffer_type.cpp — buffer type handles (buffer_type.hpp).
#include "tessera/backend/buffer_type.hpp"

#include <cstdint>

#include <fmt/core.h>

#include "backend/abi.hpp"
#include "backend/plugin_call.hpp"
#include "backend/reg_entry.hpp"
#include "tessera/backend/device.hpp"
#include "tessera/core/error.hpp"
#include "tessera/core/printable.hpp"
#include "tessera/core/tensor.hpp"

namespace tessera {

buffer_type::buffer_type(tsr_buffer_type * buft, std::shared_ptr<detail::reg_entry> entry)
    : buft_(buft), entry_(std::move(entry)) {}

static const tsr_buffer_type_i * iface_of(tsr_buffer_type * b, const detail::reg_entry * e) {
    if (b == nullptr) throw error("buffer_type: use of an empty buffer type handle");
    detail::check_loaded(e);
    return b->iface;
}

const char * buffer_type::name() const {
    const tsr_buffer_type_i * i = iface_of(buft_, entry_.get());
    return detail::str_or_empty(detail::guarded({entry_.get()}, "get_name", [&] { return i->get_name(buft_); }));
}

size_t buffer_type::alignment() const {
    const tsr_buffer_type_i * i = iface_of(buft_, entry_.get());
    const size_t a = detail::guarded({entry_.get()}, "get_alignment", [&] { return i->get_alignment(buft_); });
    if (a == 0) return 1;
    if ((a & (a - 1)) != 0) {
        throw error(fmt::format("buffer type '{}': its alignment {} is not a power of two (backend.h requires one)",
                                printable(name(), 64), a));
    }
    if (a > max_alignment) {
        throw error(fmt::format("buffer type '{}': its alignment {} is above {} (corrupt)", printable(name(), 64), a,
                                max_alignment));
    }
    return a;
}

size_t buffer_type::max_size() const {
    auto fn = TSR_OPT_SLOT(tsr_buffer_type_i, iface_of(buft_, entry_.get()), get_max_size);
    return fn ? detail::guarded({entry_.get()}, "get_max_size", [&] { return fn(buft_); }) : SIZE_MAX;
}

size_t buffer_type::alloc_size(const tsr_tensor * t) const {
    auto fn = TSR_OPT_SLOT(tsr_buffer_type_i, iface_of(buft_, entry_.get()), get_alloc_size);
    const size_t n = nbytes(t);
    if (fn == nullptr) return n;
    const size_t s = detail::guarded({entry_.get()}, "get_alloc_size", [&] { return fn(buft_, t); });
    return s < n ? n : s;
}

bool buffer_type::is_host() const {
    auto fn = TSR_OPT_SLOT(tsr_buffer_type_i, iface_of(buft_, entry_.get()), is_host);
    return fn != nullptr && detail::guarded_or({entry_.get()}, "is_host", false, [&] { return fn(buft_); });
}

device buffer_type::get_device() const {
    iface_of(buft_, entry_.get());
    return buft_->device ? device(buft_->device, entry_) : device();
}

buffer buffer_type::alloc(size_t size) const {
    const tsr_buffer_type_i * i = iface_of(buft_, entry_.get());
    const size_t max = max_size();
    if (size > max) {
        throw error(fmt::format("buffer type '{}': cannot allocate {} bytes (its maximum is {})",
                                name(), size, max));
    }
    detail::lease l(entry_, detail::lease_kind::buffer);
    tsr_buffer * b = detail::guarded({entry_.get()}, "alloc_buffer", [&] { return i->alloc_buffer(buft_, size); });
    if (b == nullptr) {
        throw error(fmt::format("buffer type '{}': failed to allocate {} bytes ({:.1f} MiB)",
                                name(), size, size / (1024.0 * 1024.0)));
    }
    if (auto why = detail::check_buffer(b); !why.empty()) {
        // The buffer's own free slot cannot be trusted; it is leaked.
        throw error(fmt::format("buffer type '{}' returned an unusable buffer: {}", name(), why));
    }
    b->usage = TSR_BUFFER_USAGE_ANY;
    buffer out(b, std::move(l)); // frees it if what follows throws
    if (b->size < size) {
        throw error(fmt::format("buffer type '{}' returned a {}-byte buffer for {} bytes", printable(name(), 64),
                                b->size, size));
    }
    out.base(); // checks that it has one
    return out;
}

} // namespace tessera

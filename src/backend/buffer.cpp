// backend/buffer.cpp — owned buffers and tensor data access (buffer.hpp).
#include "tessera/backend/buffer.hpp"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include <fmt/core.h>

#include "backend/abi.hpp"
#include "backend/plugin_call.hpp"
#include "backend/reg_entry.hpp"
#include "tessera/backend/buffer_type.hpp"
#include "tessera/core/error.hpp"
#include "tessera/core/printable.hpp"
#include "tessera/core/tensor.hpp"

namespace tessera {

namespace {

const char * tname(const tsr_tensor * t) { return t->name[0] ? t->name : "(unnamed)"; }

// The buffer a tensor's data lives in: its own, or its view source's.
tsr_buffer * buffer_of(const tsr_tensor * t) {
    for (const tsr_tensor * s = t; s != nullptr; s = s->view_src) {
        if (s->buffer) return s->buffer;
    }
    return nullptr;
}

} // namespace

void detail::check_tensor_range(const tsr_tensor * t, size_t offset, size_t size,
                                const char * what) {
    if (t == nullptr) throw error(fmt::format("{}: tensor is null", what));
    if (t->data == nullptr) {
        throw error(fmt::format("{}: tensor '{}' has no data (allocate it first)", what, tname(t)));
    }
    size_t end = 0;
    const size_t n = nbytes(t);
    if (__builtin_add_overflow(offset, size, &end) || end > n) {
        throw error(fmt::format("{}: {} bytes at offset {} are outside tensor '{}' ({} bytes)",
                                what, size, offset, tname(t), n));
    }
}


buffer::buffer(tsr_buffer * b, detail::lease l) : buf_(b), lease_(std::move(l)) {}

buffer::buffer(buffer && o) noexcept : buf_(o.buf_), lease_(std::move(o.lease_)) {
    o.buf_ = nullptr;
}

buffer & buffer::operator=(buffer && o) noexcept {
    if (this != &o) {
        reset();
        buf_ = o.buf_;
        o.buf_ = nullptr;
        lease_ = std::move(o.lease_);
    }
    return *this;
}

void buffer::reset() noexcept {
    if (buf_) {
        tsr_buffer * b = std::exchange(buf_, nullptr);
        if (!detail::guarded_free({lease_.entry().get()}, "free_buffer", "buffer",
                                  [&] { b->iface->free_buffer(b); })) {
            detail::abandon_lease(std::move(lease_));
        }
    }
    lease_.reset(); // after free_buffer: the library must stay loaded for it
}

static tsr_buffer * need(tsr_buffer * b) {
    if (b == nullptr) throw error("buffer: use of an empty buffer handle");
    return b;
}

size_t buffer::size() const { return need(buf_)->size; }

// backend.h: get_base never returns NULL (a NULL base would place tensors at
// small addresses that look valid).
static void * base_of(tsr_buffer * b, const std::shared_ptr<detail::reg_entry> & e) {
    void * p = detail::guarded({e.get(), b}, "get_base", [&] { return b->iface->get_base(b); });
    if (p == nullptr) {
        throw error(fmt::format("buffer of buffer type '{}': its base address is null (backend.h forbids it)",
                                b->buft ? printable(buffer_type(b->buft, e).name(), 64) : std::string("(none)")));
    }
    return p;
}

void * buffer::base() const {
    tsr_buffer * b = need(buf_);
    return base_of(b, lease_.entry());
}

buffer_type buffer::type() const { return buffer_type(need(buf_)->buft, lease_.entry()); }

bool buffer::is_host() const { return type().is_host(); }

tsr_buffer_usage buffer::usage() const {
    return static_cast<tsr_buffer_usage>(need(buf_)->usage);
}

void buffer::set_usage(tsr_buffer_usage usage) { need(buf_)->usage = usage; }

void buffer::clear(uint8_t value) {
    tsr_buffer * b = need(buf_);
    detail::guarded({lease_.entry().get()}, "clear", [&] { b->iface->clear(b, value); });
}

void buffer::place(tsr_tensor * t, size_t offset) {
    tsr_buffer * b = need(buf_);
    if (t == nullptr) throw error("buffer::place: tensor is null");
    if (t->view_src != nullptr) {
        throw error(fmt::format("buffer::place: tensor '{}' is a view; place its source '{}'",
                                tname(t), tname(t->view_src)));
    }
    const buffer_type bt = type();
    const size_t align = bt.alignment();
    if (align > 1 && offset % align != 0) {
        throw error(fmt::format("buffer::place: offset {} of tensor '{}' is not a multiple of "
                                "buffer type '{}' alignment {}",
                                offset, tname(t), bt.name(), align));
    }
    const size_t need_bytes = bt.alloc_size(t);
    size_t end = 0;
    if (__builtin_add_overflow(offset, need_bytes, &end) || end > b->size) {
        throw error(fmt::format("buffer::place: tensor '{}' ({} bytes at offset {}) does not fit "
                                "in the {}-byte buffer",
                                tname(t), need_bytes, offset, b->size));
    }
    char * const base = static_cast<char *>(base_of(b, lease_.entry()));
    void * const old_data = t->data;
    tsr_buffer * const old_buffer = t->buffer;
    t->data = base + offset;
    t->buffer = b;
    if (auto init = TSR_OPT_SLOT(tsr_buffer_i, b->iface, init_tensor)) {
        tsr_status st = TSR_STATUS_FAILED;
        try {
            st = detail::guarded({lease_.entry().get()}, "init_tensor", [&] { return init(b, t); });
        } catch (...) {
            t->data = old_data;
            t->buffer = old_buffer;
            throw;
        }
        if (st != TSR_STATUS_SUCCESS) {
            t->data = old_data;
            t->buffer = old_buffer;
            throw error(fmt::format("buffer::place: buffer type '{}' could not initialize tensor "
                                    "'{}' (status {})",
                                    bt.name(), tname(t), static_cast<int>(st)));
        }
    }
}

void tensor_set(tsr_tensor * t, const void * data, size_t offset, size_t size) {
    detail::check_tensor_range(t, offset, size, "tensor_set");
    if (size == 0) return;
    if (tsr_buffer * b = buffer_of(t)) {
        detail::guarded({nullptr, b}, "set_tensor", [&] { b->iface->set_tensor(b, t, data, offset, size); });
    } else {
        std::memcpy(static_cast<char *>(t->data) + offset, data, size);
    }
}

void tensor_get(const tsr_tensor * t, void * data, size_t offset, size_t size) {
    detail::check_tensor_range(t, offset, size, "tensor_get");
    if (size == 0) return;
    if (tsr_buffer * b = buffer_of(t)) {
        detail::guarded({nullptr, b}, "get_tensor", [&] { b->iface->get_tensor(b, t, data, offset, size); });
    } else {
        std::memcpy(data, static_cast<const char *>(t->data) + offset, size);
    }
}

void tensor_memset(tsr_tensor * t, uint8_t value, size_t offset, size_t size) {
    detail::check_tensor_range(t, offset, size, "tensor_memset");
    if (size == 0) return;
    tsr_buffer * b = buffer_of(t);
    if (b == nullptr) {
        std::memset(static_cast<char *>(t->data) + offset, value, size);
        return;
    }
    if (auto ms = TSR_OPT_SLOT(tsr_buffer_i, b->iface, memset_tensor)) {
        detail::guarded({nullptr, b}, "memset_tensor", [&] { ms(b, t, value, offset, size); });
        return;
    }
    // No memset slot: write a repeated chunk through set_tensor.
    const std::vector<uint8_t> chunk(std::min<size_t>(size, 1 << 16), value);
    for (size_t done = 0; done < size;) {
        const size_t n = std::min(chunk.size(), size - done);
        detail::guarded({nullptr, b}, "set_tensor",
                        [&] { b->iface->set_tensor(b, t, chunk.data(), offset + done, n); });
        done += n;
    }
}

void tensor_copy(const tsr_tensor * src, tsr_tensor * dst) {
    if (src == nullptr || dst == nullptr) throw error("tensor_copy: tensor is null");
    const size_t n = nbytes(src);
    if (n != nbytes(dst)) {
        throw error(fmt::format("tensor_copy: '{}' has {} bytes but '{}' has {}", tname(src), n,
                                tname(dst), nbytes(dst)));
    }
    detail::check_tensor_range(src, 0, n, "tensor_copy");
    detail::check_tensor_range(dst, 0, n, "tensor_copy");
    tsr_buffer * sb = buffer_of(src);
    tsr_buffer * db = buffer_of(dst);
    if (db) {
        if (auto cpy = TSR_OPT_SLOT(tsr_buffer_i, db->iface, cpy_tensor)) {
            if (detail::guarded({nullptr, db}, "cpy_tensor", [&] { return cpy(db, src, dst); })) return;
        }
    }
    const auto host = [](tsr_buffer * b) {
        if (b == nullptr) return true;
        auto is_host = TSR_OPT_SLOT(tsr_buffer_type_i, b->buft->iface, is_host);
        return is_host != nullptr &&
               detail::guarded({nullptr, b}, "is_host", [&] { return is_host(b->buft); });
    };
    if (host(sb)) {
        tensor_set(dst, src->data, 0, n);
    } else if (host(db)) {
        tensor_get(src, dst->data, 0, n);
    } else {
        std::vector<uint8_t> tmp(n);
        tensor_get(src, tmp.data(), 0, n);
        tensor_set(dst, tmp.data(), 0, n);
    }
}

} // namespace tessera

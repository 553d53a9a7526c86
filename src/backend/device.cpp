// backend/device.cpp — device handles (device.hpp).
#include "tessera/backend/device.hpp"

#include <string>
#include <tuple>

#include <fmt/core.h>

#include "backend/abi.hpp"
#include "backend/plugin_call.hpp"
#include "backend/reg_entry.hpp"
#include "tessera/backend/backend_reg.hpp"
#include "tessera/core/error.hpp"

namespace tessera {

const char * device_type_name(tsr_device_type t) {
    switch (t) {
    case TSR_DEVICE_TYPE_CPU: return "CPU";
    case TSR_DEVICE_TYPE_GPU: return "GPU";
    case TSR_DEVICE_TYPE_IGPU: return "IGPU";
    case TSR_DEVICE_TYPE_ACCEL: return "ACCEL";
    }
    return "UNKNOWN";
}

device::device(tsr_device * dev, std::shared_ptr<detail::reg_entry> entry)
    : dev_(dev), entry_(std::move(entry)) {}

const tsr_device_i * device::iface() const {
    if (dev_ == nullptr) throw error("device: use of an empty device handle");
    detail::check_loaded(entry_.get());
    return dev_->iface;
}

// The strings read at load; a device reached otherwise (a buffer type's or a
// backend's device field naming one the registry did not accept) is asked.
const char * device::name() const {
    const tsr_device_i * i = iface();
    if (const auto * rec = entry_ ? entry_->find(dev_) : nullptr) return rec->name.c_str();
    return detail::str_or_empty(detail::guarded({entry_.get()}, "get_name", [&] { return i->get_name(dev_); }));
}

const char * device::description() const {
    const tsr_device_i * i = iface();
    if (const auto * rec = entry_ ? entry_->find(dev_) : nullptr) return rec->description.c_str();
    return detail::str_or_empty(
        detail::guarded({entry_.get()}, "get_description", [&] { return i->get_description(dev_); }));
}

std::pair<size_t, size_t> device::memory() const {
    size_t free = 0, total = 0;
    const tsr_device_i * i = iface();
    detail::guarded({entry_.get()}, "get_memory", [&] { i->get_memory(dev_, &free, &total); });
    return {free, total};
}

tsr_device_type device::type() const {
    const tsr_device_i * i = iface();
    return static_cast<tsr_device_type>(detail::guarded({entry_.get()}, "get_type", [&] { return i->get_type(dev_); }));
}

device_caps device::caps() const {
    const tsr_device_i * i = iface();
    const uint32_t c = detail::guarded({entry_.get()}, "get_caps", [&] { return i->get_caps(dev_); });
    device_caps caps;
    caps.async = (c & TSR_DEVICE_CAP_ASYNC) != 0;
    caps.host_buffer = (c & TSR_DEVICE_CAP_HOST_BUFFER) != 0;
    caps.buffer_from_host_ptr = (c & TSR_DEVICE_CAP_BUFFER_FROM_HOST_PTR) != 0;
    caps.events = (c & TSR_DEVICE_CAP_EVENTS) != 0;
    return caps;
}

device_props device::props() const {
    device_props p;
    p.name = name();
    p.description = description();
    std::tie(p.memory_free, p.memory_total) = memory();
    p.type = type();
    p.caps = caps();
    return p;
}

backend_reg device::reg() const {
    iface();
    return backend_reg(entry_);
}

backend device::init(std::string_view params) const {
    const tsr_device_i * i = iface();
    const std::string p(params);
    // The C boundary takes a C string: a NUL inside would cut the params
    // short, and the rest would be ignored unseen.
    if (const size_t nul = p.find('\0'); nul != std::string::npos) {
        throw error(fmt::format("device '{}': the backend params contain a NUL byte (at {})", name(), nul));
    }
    detail::lease l(entry_, detail::lease_kind::backend);
    tsr_backend * be = detail::guarded({entry_.get()}, "init_backend",
                                       [&] { return i->init_backend(dev_, p.empty() ? nullptr : p.c_str()); });
    if (be == nullptr) {
        throw error(fmt::format("device '{}': could not create a backend (params '{}')", name(),
                                p));
    }
    if (auto why = detail::check_backend(be); !why.empty()) {
        throw error(fmt::format("device '{}' returned an unusable backend: {}", name(), why));
    }
    return backend(be, std::move(l));
}

buffer_type device::default_buffer_type() const {
    const tsr_device_i * i = iface();
    tsr_buffer_type * b = detail::guarded({entry_.get()}, "get_buffer_type", [&] { return i->get_buffer_type(dev_); });
    if (auto why = detail::check_buffer_type(b); !why.empty()) {
        throw error(fmt::format("device '{}': unusable default buffer type: {}", name(), why));
    }
    return buffer_type(b, entry_);
}

std::optional<buffer_type> device::host_buffer_type() const {
    auto fn = TSR_OPT_SLOT(tsr_device_i, iface(), get_host_buffer_type);
    if (fn == nullptr) return std::nullopt;
    tsr_buffer_type * b = detail::guarded_or({entry_.get()}, "get_host_buffer_type",
                                             static_cast<tsr_buffer_type *>(nullptr), [&] { return fn(dev_); });
    if (b == nullptr || !detail::check_buffer_type(b).empty()) return std::nullopt;
    return buffer_type(b, entry_);
}

std::vector<buffer_type> device::extra_buffer_types() const {
    iface();
    std::vector<buffer_type> out;
    auto fn = reinterpret_cast<tsr_dev_get_extra_bufts_fn>(
        detail::reg_proc(dev_->reg, TSR_EXT_DEV_GET_EXTRA_BUFTS, entry_.get()));
    if (fn == nullptr) return out;
    tsr_buffer_type ** list = detail::guarded_or({entry_.get()}, TSR_EXT_DEV_GET_EXTRA_BUFTS,
                                                 static_cast<tsr_buffer_type **>(nullptr), [&] { return fn(dev_); });
    for (size_t k = 0; list != nullptr && list[k] != nullptr && k < 1024; ++k) {
        if (detail::check_buffer_type(list[k]).empty()) out.emplace_back(list[k], entry_);
    }
    return out;
}

buffer device::buffer_from_host_ptr(void * ptr, size_t size, size_t max_tensor_size) const {
    auto fn = TSR_OPT_SLOT(tsr_device_i, iface(), buffer_from_host_ptr);
    if (fn == nullptr) {
        throw error(fmt::format("device '{}' cannot make buffers over host memory", name()));
    }
    if (ptr == nullptr) throw error(fmt::format("device '{}': host pointer is null", name()));
    detail::lease l(entry_, detail::lease_kind::buffer);
    tsr_buffer * b = detail::guarded({entry_.get()}, "buffer_from_host_ptr",
                                     [&] { return fn(dev_, ptr, size, max_tensor_size); });
    if (b == nullptr) {
        throw error(fmt::format("device '{}' refused a buffer over host memory at {} ({} bytes)",
                                name(), ptr, size));
    }
    if (auto why = detail::check_buffer(b); !why.empty()) {
        throw error(fmt::format("device '{}' returned an unusable host-pointer buffer: {}",
                                name(), why));
    }
    b->usage = TSR_BUFFER_USAGE_ANY;
    buffer out(b, std::move(l)); // frees it if base() throws
    out.base();                  // checks that it has one
    return out;
}

bool device::supports_op(const tsr_tensor * op) const {
    if (op == nullptr) return false;
    const tsr_device_i * i = iface();
    return detail::guarded_or({entry_.get()}, "supports_op", false, [&] { return i->supports_op(dev_, op); });
}

bool device::supports_buft(tsr_buffer_type * buft) const {
    if (buft == nullptr) return false;
    const tsr_device_i * i = iface();
    return detail::guarded_or({entry_.get()}, "supports_buft", false, [&] { return i->supports_buft(dev_, buft); });
}

bool device::supports_buft(const buffer_type & buft) const { return supports_buft(buft.get()); }

bool device::offload_op(const tsr_tensor * op) const {
    auto fn = TSR_OPT_SLOT(tsr_device_i, iface(), offload_op);
    return op != nullptr && fn != nullptr &&
           detail::guarded_or({entry_.get()}, "offload_op", false, [&] { return fn(dev_, op); });
}

} // namespace tessera

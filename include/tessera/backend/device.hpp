// tessera/backend/device.hpp — a device (CPU, GPU, ...) of a backend family.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "tessera/backend.h"
#include "tessera/backend/backend.hpp"
#include "tessera/backend/buffer.hpp"
#include "tessera/backend/buffer_type.hpp"

namespace tessera {

class backend_reg;

// Name of a device type: "CPU", "GPU", "IGPU", "ACCEL" ("UNKNOWN" otherwise).
const char * device_type_name(tsr_device_type t);

struct device_caps {
    bool async = false;                // async copies and synchronize
    bool host_buffer = false;          // a host buffer type for fast copies
    bool buffer_from_host_ptr = false; // zero-copy buffers over host memory
    bool events = false;
};

struct device_props {
    const char * name = "";        // owned by the backend: valid until it is unloaded
    const char * description = ""; // likewise
    size_t memory_free = 0;  // bytes
    size_t memory_total = 0; // bytes
    tsr_device_type type = TSR_DEVICE_TYPE_CPU;
    device_caps caps;
};

// A non-owning handle to a registered device. Valid while its backend stays
// registered (calls after the backend was unloaded throw tessera::error).
// Copyable; getters, supports_* and init are thread-safe.
class device {
public:
    device() = default;
    device(tsr_device * dev, std::shared_ptr<detail::reg_entry> entry);

    explicit operator bool() const { return dev_ != nullptr; }
    tsr_device * get() const { return dev_; }
    bool operator==(const device & o) const { return dev_ == o.dev_; }

    // The device's name and description: strings owned by the backend, valid
    // until it is unloaded (copy them to keep them longer); "" when the
    // backend returns null.
    const char * name() const;
    const char * description() const;
    // Free and total memory in bytes (free first). Like every getter, throws
    // tessera::error naming the backend and the slot when the backend lets a
    // C++ exception escape; supports_*, offload_op and host_buffer_type
    // then answer false / none and report it on stderr instead.
    std::pair<size_t, size_t> memory() const;
    tsr_device_type type() const;
    device_caps caps() const;
    device_props props() const;
    backend_reg reg() const;

    // A new backend on this device. `params`: backend-defined
    // "key=value;..." (CPU: "n_threads=N"). Throws tessera::error naming the
    // device and the params when the backend refuses, or when they hold a
    // NUL byte (the C boundary would cut them there).
    backend init(std::string_view params = {}) const;

    buffer_type default_buffer_type() const;
    // The host buffer type for fast copies, when the device has one.
    std::optional<buffer_type> host_buffer_type() const;
    // Additional buffer types its backends accept (extension
    // tsr_dev_get_extra_bufts); empty when none.
    std::vector<buffer_type> extra_buffer_types() const;

    // A zero-copy buffer over `size` bytes of caller-owned host memory at
    // `ptr` (e.g. a memory-mapped model file); the memory must outlive the
    // buffer. `max_tensor_size`: largest tensor to be placed in it, bytes.
    // Throws tessera::error when the device cannot (no such capability, or
    // the backend refuses the pointer).
    buffer buffer_from_host_ptr(void * ptr, size_t size, size_t max_tensor_size) const;

    bool supports_op(const tsr_tensor * op) const;
    bool supports_buft(const buffer_type & buft) const;
    bool supports_buft(tsr_buffer_type * buft) const;
    // False when the backend does not say.
    bool offload_op(const tsr_tensor * op) const;

private:
    const tsr_device_i * iface() const; // throws when unloaded
    tsr_device * dev_ = nullptr;
    std::shared_ptr<detail::reg_entry> entry_;
};

} // namespace tessera

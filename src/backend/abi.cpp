// backend/abi.cpp — validation of backend C tables against backend.h.
#include "backend/abi.hpp"

#include <fmt/core.h>

#include "backend/plugin_call.hpp"

namespace tessera::detail {

namespace {

// End of the last required slot of each table: a table must be at least
// this large. Required slots come first in every table (see backend.h).
constexpr size_t end_of(size_t offset) { return offset + sizeof(void (*)()); }
constexpr size_t reg_i_min = end_of(offsetof(tsr_reg_i, get_device));
constexpr size_t device_i_min = end_of(offsetof(tsr_device_i, supports_buft));
constexpr size_t buffer_type_i_min = end_of(offsetof(tsr_buffer_type_i, get_alignment));
constexpr size_t buffer_i_min = end_of(offsetof(tsr_buffer_i, clear));
constexpr size_t backend_i_min = end_of(offsetof(tsr_backend_i, graph_compute));

std::string check_size(const char * table, uint32_t size, size_t min) {
    if (size < min) {
        return fmt::format("its {} table is {} bytes, smaller than the {} bytes every "
                           "API {}.x table has (corrupt, or built against an older header)",
                           table, size, min, TSR_BACKEND_API_MAJOR);
    }
    if (size > max_table_size) {
        return fmt::format("its {} table claims {} bytes (more than {}: corrupt)", table, size,
                           max_table_size);
    }
    return {};
}

// First missing name among `slots`, or "".
std::string missing(const char * table, std::initializer_list<std::pair<const char *, bool>> slots) {
    for (const auto & [name, present] : slots) {
        if (!present) return fmt::format("its {} table has no {} (a required slot)", table, name);
    }
    return {};
}

} // namespace

std::string check_reg(const tsr_reg * reg) {
    if (reg == nullptr) return "the reg is null";
    if (reg->api_major != TSR_BACKEND_API_MAJOR) {
        return fmt::format("API version {}.{} is incompatible with this tessera's API version "
                           "{}.{} (major versions differ)",
                           reg->api_major, reg->api_minor, TSR_BACKEND_API_MAJOR,
                           TSR_BACKEND_API_MINOR);
    }
    const tsr_reg_i * i = reg->iface;
    if (i == nullptr) return "its reg has no interface table";
    if (auto e = check_size("reg", i->size, reg_i_min); !e.empty()) return e;
    return missing("reg", {{"get_name", i->get_name != nullptr},
                           {"get_device_count", i->get_device_count != nullptr},
                           {"get_device", i->get_device != nullptr}});
}

std::string check_device(const tsr_device * dev) {
    if (dev == nullptr) return "the device is null";
    const tsr_device_i * i = dev->iface;
    if (i == nullptr) return "the device has no interface table";
    if (auto e = check_size("device", i->size, device_i_min); !e.empty()) return e;
    return missing("device", {{"get_name", i->get_name != nullptr},
                              {"get_description", i->get_description != nullptr},
                              {"get_memory", i->get_memory != nullptr},
                              {"get_type", i->get_type != nullptr},
                              {"get_caps", i->get_caps != nullptr},
                              {"init_backend", i->init_backend != nullptr},
                              {"get_buffer_type", i->get_buffer_type != nullptr},
                              {"supports_op", i->supports_op != nullptr},
                              {"supports_buft", i->supports_buft != nullptr}});
}

std::string check_buffer_type(const tsr_buffer_type * buft) {
    if (buft == nullptr) return "the buffer type is null";
    const tsr_buffer_type_i * i = buft->iface;
    if (i == nullptr) return "the buffer type has no interface table";
    if (auto e = check_size("buffer type", i->size, buffer_type_i_min); !e.empty()) return e;
    return missing("buffer type", {{"get_name", i->get_name != nullptr},
                                   {"alloc_buffer", i->alloc_buffer != nullptr},
                                   {"get_alignment", i->get_alignment != nullptr}});
}

std::string check_buffer(const tsr_buffer * buf) {
    if (buf == nullptr) return "the buffer is null";
    const tsr_buffer_i * i = buf->iface;
    if (i == nullptr) return "the buffer has no interface table";
    if (auto e = check_size("buffer", i->size, buffer_i_min); !e.empty()) return e;
    return missing("buffer", {{"free_buffer", i->free_buffer != nullptr},
                              {"get_base", i->get_base != nullptr},
                              {"set_tensor", i->set_tensor != nullptr},
                              {"get_tensor", i->get_tensor != nullptr},
                              {"clear", i->clear != nullptr}});
}

std::string check_backend(const tsr_backend * be) {
    if (be == nullptr) return "the backend is null";
    const tsr_backend_i * i = be->iface;
    if (i == nullptr) return "the backend has no interface table";
    if (auto e = check_size("backend", i->size, backend_i_min); !e.empty()) return e;
    return missing("backend", {{"get_name", i->get_name != nullptr},
                               {"free", i->free != nullptr},
                               {"graph_compute", i->graph_compute != nullptr}});
}

void * reg_proc(tsr_reg * reg, const char * name, const reg_entry * entry) {
    if (reg == nullptr || name == nullptr || !check_reg(reg).empty()) return nullptr;
    auto fn = TSR_OPT_SLOT(tsr_reg_i, reg->iface, get_proc_address);
    if (fn == nullptr) return nullptr;
    return guarded_or({entry}, "get_proc_address", static_cast<void *>(nullptr), [&] { return fn(reg, name); });
}

} // namespace tessera::detail

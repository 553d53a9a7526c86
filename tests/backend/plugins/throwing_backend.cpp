// throwing_backend.cpp — a backend plugin written in C++ that throws a C++
// exception across the C ABI (backend.h forbids it) from one of the calls
// the registry makes while loading it. Macros:
//
//   FAKE_FAMILY "name"   family name (required)
//   FAKE_SCORE s         exports tessera_backend_score returning s
//   THROW_AT n           the call that throws: 1 tessera_backend_score,
//                        2 tessera_backend_init, 3 reg get_name,
//                        4 get_device_count, 5 get_device, 6 device get_name
//   THROW_NON_STD        throws an int instead of a std::runtime_error
//
// Its one device "Throwing0" is otherwise complete enough to be accepted.
#include <stdexcept>
#include <string>

#include "tessera/backend.h"

namespace {

void maybe_throw(int at, const char * where) {
    if (at != THROW_AT) return;
#ifdef THROW_NON_STD
    (void)where;
    throw 42;
#else
    throw std::runtime_error(std::string("boom in ") + where);
#endif
}

tsr_reg reg;
tsr_device dev;

const char * buft_name(tsr_buffer_type *) { return "ThrowingHost"; }
tsr_buffer * buft_alloc(tsr_buffer_type *, size_t) { return nullptr; }
size_t buft_align(tsr_buffer_type *) { return 32; }
const tsr_buffer_type_i buft_iface = [] {
    tsr_buffer_type_i i{};
    i.size = sizeof i;
    i.get_name = buft_name;
    i.alloc_buffer = buft_alloc;
    i.get_alignment = buft_align;
    return i;
}();
tsr_buffer_type buft = {&buft_iface, &dev, nullptr};

const char * dev_name(tsr_device *) {
    maybe_throw(6, "get_name");
    return "Throwing0";
}
const char * dev_desc(tsr_device *) { return "a device that throws"; }
void dev_memory(tsr_device *, size_t * free_b, size_t * total) { *free_b = *total = 1000; }
int32_t dev_type(tsr_device *) { return TSR_DEVICE_TYPE_GPU; }
uint32_t dev_caps(tsr_device *) { return 0; }
tsr_backend * dev_init(tsr_device *, const char *) { return nullptr; }
tsr_buffer_type * dev_buft(tsr_device *) { return &buft; }
bool dev_supports_op(tsr_device *, const tsr_tensor *) { return false; }
bool dev_supports_buft(tsr_device *, tsr_buffer_type * bt) { return bt == &buft; }
const tsr_device_i device_iface = [] {
    tsr_device_i i{};
    i.size = sizeof i;
    i.get_name = dev_name;
    i.get_description = dev_desc;
    i.get_memory = dev_memory;
    i.get_type = dev_type;
    i.get_caps = dev_caps;
    i.init_backend = dev_init;
    i.get_buffer_type = dev_buft;
    i.supports_op = dev_supports_op;
    i.supports_buft = dev_supports_buft;
    return i;
}();

const char * reg_name(tsr_reg *) {
    maybe_throw(3, "get_name");
    return FAKE_FAMILY;
}
size_t reg_count(tsr_reg *) {
    maybe_throw(4, "get_device_count");
    return 1;
}
tsr_device * reg_device(tsr_reg *, size_t i) {
    maybe_throw(5, "get_device");
    return i == 0 ? &dev : nullptr;
}
const tsr_reg_i reg_iface = [] {
    tsr_reg_i i{};
    i.size = sizeof i;
    i.get_name = reg_name;
    i.get_device_count = reg_count;
    i.get_device = reg_device;
    return i;
}();

} // namespace

#ifdef FAKE_SCORE
extern "C" TSR_BACKEND_EXPORT int tessera_backend_score(void) {
    maybe_throw(1, "tessera_backend_score");
    return FAKE_SCORE;
}
#endif

extern "C" TSR_BACKEND_EXPORT tsr_reg * tessera_backend_init(void) {
    maybe_throw(2, "tessera_backend_init");
    reg.api_major = TSR_BACKEND_API_MAJOR;
    reg.api_minor = TSR_BACKEND_API_MINOR;
    reg.iface = &reg_iface;
    dev.iface = &device_iface;
    dev.reg = &reg;
    return &reg;
}

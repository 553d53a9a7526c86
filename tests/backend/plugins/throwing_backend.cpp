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
//   THROW_AFTER_LOAD     loads cleanly (use with THROW_AT 0), and makes
//                        buffers, backends, graph plans and thread pools;
//                        extension "throwing_set_throw" (const char * call)
//                        names the one call that throws from then on (NULL:
//                        none), "throwing_live_objects" counts the objects
//                        not yet freed, "throwing_reset" frees them all
//
// Its one device "Throwing0" is otherwise complete enough to be accepted.
// After loading, every object lives in static storage: one whose free slot
// threw stays allocated (the host leaks it) without a leak checker seeing it.
#include <cstring>
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

#ifdef THROW_AFTER_LOAD
// The call named by throwing_set_throw, or "" for none.
char throw_in[64];

void throw_if(const char * call) {
    if (std::strcmp(throw_in, call) == 0) throw std::runtime_error(std::string("boom in ") + call);
}

void set_throw(const char * call) {
    std::strncpy(throw_in, call ? call : "", sizeof throw_in - 1);
}

// Static objects: slot k is in use while used[k].
constexpr int n_slots = 4;
constexpr size_t buffer_bytes = 256;
tsr_buffer buffers[n_slots];
alignas(64) unsigned char buffer_mem[n_slots][buffer_bytes];
bool buffer_used[n_slots];
tsr_backend backends[n_slots];
bool backend_used[n_slots];
int plans[n_slots]; // a plan is the address of one of these
bool plan_used[n_slots];
int pool; // the one thread pool is its address
bool pool_used;

template <class T>
int take(T (&objects)[n_slots], bool (&used)[n_slots]) {
    for (int k = 0; k < n_slots; ++k) {
        if (!used[k]) {
            used[k] = true;
            objects[k] = T{};
            return k;
        }
    }
    return -1;
}

int live_objects() {
    int n = pool_used ? 1 : 0;
    for (int k = 0; k < n_slots; ++k) n += buffer_used[k] + backend_used[k] + plan_used[k];
    return n;
}

void reset_all() {
    set_throw(nullptr);
    for (int k = 0; k < n_slots; ++k) buffer_used[k] = backend_used[k] = plan_used[k] = false;
    pool_used = false;
}

// ------------------------------------------------------------- buffer

void buf_free(tsr_buffer * b) {
    throw_if("free_buffer");
    buffer_used[b - buffers] = false;
}
void * buf_base(tsr_buffer * b) { return buffer_mem[b - buffers]; }
void buf_set(tsr_buffer *, tsr_tensor * t, const void * data, size_t off, size_t n) {
    throw_if("set_tensor");
    std::memcpy(static_cast<char *>(t->data) + off, data, n);
}
void buf_get(tsr_buffer *, const tsr_tensor * t, void * data, size_t off, size_t n) {
    throw_if("get_tensor");
    std::memcpy(data, static_cast<const char *>(t->data) + off, n);
}
void buf_clear(tsr_buffer * b, uint8_t v) { std::memset(buffer_mem[b - buffers], v, buffer_bytes); }
const tsr_buffer_i buffer_iface = [] {
    tsr_buffer_i i{};
    i.size = sizeof i;
    i.free_buffer = buf_free;
    i.get_base = buf_base;
    i.set_tensor = buf_set;
    i.get_tensor = buf_get;
    i.clear = buf_clear;
    return i;
}();
#endif

const char * buft_name(tsr_buffer_type *) { return "ThrowingHost"; }
#ifdef THROW_AFTER_LOAD
tsr_buffer * buft_alloc(tsr_buffer_type * bt, size_t size) {
    throw_if("alloc_buffer");
    const int k = size <= buffer_bytes ? take(buffers, buffer_used) : -1;
    if (k < 0) return nullptr;
    tsr_buffer * b = &buffers[k];
    b->iface = &buffer_iface;
    b->buft = bt;
    b->size = size;
    return b;
}
#else
tsr_buffer * buft_alloc(tsr_buffer_type *, size_t) { return nullptr; }
#endif
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
#ifdef THROW_AFTER_LOAD
// ------------------------------------------------------------ backend

const char * be_name(tsr_backend *) { return "Throwing"; }
void be_free(tsr_backend * be) {
    throw_if("free");
    backend_used[be - backends] = false;
}
tsr_status be_compute(tsr_backend *, const tsr_graph_view *) {
    throw_if("graph_compute");
    return TSR_STATUS_SUCCESS;
}
tsr_graph_plan plan_create(tsr_backend *, const tsr_graph_view *) {
    throw_if("graph_plan_create");
    const int k = take(plans, plan_used);
    return k < 0 ? nullptr : &plans[k];
}
void plan_free(tsr_backend *, tsr_graph_plan plan) {
    throw_if("graph_plan_free");
    plan_used[static_cast<int *>(plan) - plans] = false;
}
tsr_status plan_compute(tsr_backend *, tsr_graph_plan) {
    throw_if("graph_plan_compute");
    return TSR_STATUS_SUCCESS;
}
const tsr_backend_i backend_iface = [] {
    tsr_backend_i i{};
    i.size = sizeof i;
    i.get_name = be_name;
    i.free = be_free;
    i.graph_compute = be_compute;
    i.graph_plan_create = plan_create;
    i.graph_plan_free = plan_free;
    i.graph_plan_compute = plan_compute;
    return i;
}();

// --------------------------------------------------------- thread pool

tsr_threadpool * pool_new(int) {
    throw_if(TSR_EXT_THREADPOOL_NEW);
    if (pool_used) return nullptr;
    pool_used = true;
    return reinterpret_cast<tsr_threadpool *>(&pool);
}
void pool_free(tsr_threadpool *) {
    throw_if(TSR_EXT_THREADPOOL_FREE);
    pool_used = false;
}
void pool_pause(tsr_threadpool *) { throw_if(TSR_EXT_THREADPOOL_PAUSE); }
void pool_resume(tsr_threadpool *) { throw_if(TSR_EXT_THREADPOOL_RESUME); }
#endif

// ------------------------------------------------------------- device

void dev_memory(tsr_device *, size_t * free_b, size_t * total) {
#ifdef THROW_AFTER_LOAD
    throw_if("get_memory");
#endif
    *free_b = *total = 1000;
}
int32_t dev_type(tsr_device *) { return TSR_DEVICE_TYPE_GPU; }
uint32_t dev_caps(tsr_device *) { return 0; }
#ifdef THROW_AFTER_LOAD
tsr_backend * dev_init(tsr_device * d, const char *) {
    throw_if("init_backend");
    const int k = take(backends, backend_used);
    if (k < 0) return nullptr;
    backends[k].iface = &backend_iface;
    backends[k].device = d;
    return &backends[k];
}
bool dev_supports_op(tsr_device *, const tsr_tensor *) {
    throw_if("supports_op");
    return true;
}
#else
tsr_backend * dev_init(tsr_device *, const char *) { return nullptr; }
bool dev_supports_op(tsr_device *, const tsr_tensor *) { return false; }
#endif
tsr_buffer_type * dev_buft(tsr_device *) { return &buft; }
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
#ifdef THROW_AFTER_LOAD
void * reg_proc(tsr_reg *, const char * name) {
    const std::string n = name;
    if (n == "throwing_set_throw") return reinterpret_cast<void *>(set_throw);
    if (n == "throwing_live_objects") return reinterpret_cast<void *>(live_objects);
    if (n == "throwing_reset") return reinterpret_cast<void *>(reset_all);
    if (n == TSR_EXT_THREADPOOL_NEW) return reinterpret_cast<void *>(pool_new);
    if (n == TSR_EXT_THREADPOOL_FREE) return reinterpret_cast<void *>(pool_free);
    if (n == TSR_EXT_THREADPOOL_PAUSE) return reinterpret_cast<void *>(pool_pause);
    if (n == TSR_EXT_THREADPOOL_RESUME) return reinterpret_cast<void *>(pool_resume);
    throw_if("get_proc_address");
    return nullptr;
}
#endif

const tsr_reg_i reg_iface = [] {
    tsr_reg_i i{};
    i.size = sizeof i;
    i.get_name = reg_name;
    i.get_device_count = reg_count;
    i.get_device = reg_device;
#ifdef THROW_AFTER_LOAD
    i.get_proc_address = reg_proc;
#endif
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

/*
 * tessera/backend.h — the C ABI between tessera and its backends.
 *
 * A backend family ("reg") exposes devices; a device creates backends
 * (compute streams) and owns buffer types; a buffer type allocates buffers;
 * tensors live in buffers. Each object is a small struct holding a pointer
 * to an interface table of function pointers and a backend-private context.
 * The backend allocates and frees its own objects; the host never frees
 * memory the backend allocated except through the backend's own slots.
 *
 * Versioning
 *   TSR_BACKEND_API_MAJOR / _MINOR is the version of this header. Every
 *   interface table starts with `size`: sizeof(the table) as the backend was
 *   compiled. Tables are append-only: a new minor version only adds slots at
 *   the end, and every slot added after 1.0 is optional. A host reading a
 *   table from an older backend therefore checks TSR_HAS_SLOT(type, table,
 *   slot) before calling an optional slot and treats a slot the table does
 *   not reach as empty; a host reading a table from a newer backend ignores
 *   the slots it does not know. A different major version breaks the layout
 *   and is refused at load time. The first two fields of tsr_reg (api_major,
 *   api_minor) never move, so the host can read them from a backend of any
 *   version.
 *
 * Optional slots
 *   Each table lists its required slots first, then its optional slots. The
 *   host refuses a table whose size does not reach the end of its required
 *   slots or where a required slot is NULL. An optional slot may be NULL or
 *   lie beyond the table's size (both mean "absent"); the host checks both
 *   before every call.
 *
 * Errors
 *   Functions report failure by returning NULL, false or a tsr_status; they
 *   never abort the process and never let a C++ exception escape. (Should
 *   one escape after loading, the host makes it the call's failure, named
 *   after the library and the slot, and leaks an object whose free slot
 *   threw, keeping its library loaded; see src/backend/plugin_call.hpp.)
 *   Sizes and offsets passed to slots have been checked by the host
 *   (offset + size within the tensor's bytes).
 *
 * Thread-safety
 *   Registry-level reads (reg and device getters, supports_op/supports_buft,
 *   buffer-type getters) must be callable from several threads at once. A
 *   buffer or backend object is used by one thread at a time unless its
 *   slot says otherwise.
 *
 * Plugins
 *   A shared library `libtessera-<backend>[-<variant>].so` exports
 *     tsr_reg * tessera_backend_init(void);   required: NULL = failed
 *     int       tessera_backend_score(void);  optional: 0 = cannot run here,
 *                                             larger = better fit
 *   tessera_backend_score, and everything that runs when the library is
 *   opened (static initializers), must only use instructions every machine
 *   the library may be offered to has (for CPU variants: the baseline ISA).
 *   The reg and everything reachable from it stay valid until the library
 *   is unloaded.
 */
#ifndef TESSERA_BACKEND_H
#define TESSERA_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TSR_BACKEND_API_MAJOR 1
#define TSR_BACKEND_API_MINOR 0

/* True when `table` (a pointer to an interface table of type `type`, e.g.
 * tsr_device_i) was compiled with `slot` present, i.e. its recorded size
 * reaches past the slot. Does not check that the slot is non-NULL. */
#define TSR_HAS_SLOT(type, table, slot) \
    ((table)->size >= offsetof(type, slot) + sizeof((table)->slot))

/* Symbol names a plugin exports. */
#define TSR_BACKEND_INIT_SYMBOL "tessera_backend_init"
#define TSR_BACKEND_SCORE_SYMBOL "tessera_backend_score"

#if defined(_WIN32)
#define TSR_BACKEND_EXPORT __declspec(dllexport)
#else
#define TSR_BACKEND_EXPORT __attribute__((visibility("default")))
#endif

typedef struct tsr_buffer_type tsr_buffer_type;
typedef struct tsr_buffer tsr_buffer;
typedef struct tsr_backend tsr_backend;
typedef struct tsr_device tsr_device;
typedef struct tsr_reg tsr_reg;
/* An opaque, backend-defined compiled graph (see tsr_backend_i). */
typedef void * tsr_graph_plan;

/* ---------------------------------------------------------------- buffer type */

typedef struct tsr_buffer_type_i {
    uint32_t size; /* sizeof(tsr_buffer_type_i) as compiled by the backend */

    /* Short name, e.g. "CPU". Never NULL; lives as long as the buffer type. */
    const char * (*get_name)(tsr_buffer_type * buft);
    /* A new buffer of `size` bytes (size may be 0), or NULL when the memory
     * cannot be allocated. The caller frees it with its free_buffer slot. */
    tsr_buffer * (*alloc_buffer)(tsr_buffer_type * buft, size_t size);
    /* Alignment in bytes of tensor data inside this type's buffers (a power of two). */
    size_t (*get_alignment)(tsr_buffer_type * buft);
    /* Optional. Largest buffer it can allocate, in bytes (absent: SIZE_MAX). */
    size_t (*get_max_size)(tsr_buffer_type * buft);
    /* Optional. Bytes a tensor needs in this buffer type (absent: the
     * tensor's byte span, which the host computes from ne/nb/type). */
    size_t (*get_alloc_size)(tsr_buffer_type * buft, const tsr_tensor * tensor);
    /* Optional. True when buffer memory is ordinary host memory the CPU can
     * read and write through tensor->data (absent: false). */
    bool (*is_host)(tsr_buffer_type * buft);
} tsr_buffer_type_i;

struct tsr_buffer_type {
    const tsr_buffer_type_i * iface;
    tsr_device * device; /* the device that owns it; may be NULL for a shared host type */
    void * context;      /* backend-private */
};

/* --------------------------------------------------------------------- buffer */

typedef enum tsr_buffer_usage {
    TSR_BUFFER_USAGE_ANY = 0,
    TSR_BUFFER_USAGE_WEIGHTS = 1, /* model weights: written once, read many times */
    TSR_BUFFER_USAGE_COMPUTE = 2  /* graph intermediates (the graph allocator's buffer) */
} tsr_buffer_usage;

typedef struct tsr_buffer_i {
    uint32_t size; /* sizeof(tsr_buffer_i) as compiled by the backend */

    /* Frees the buffer's memory (unless it wraps memory it does not own) and
     * the tsr_buffer struct itself. */
    void (*free_buffer)(tsr_buffer * buffer);
    /* Address of the first byte. For a non-host buffer an opaque but
     * non-NULL address that tensor->data values are computed from. */
    void * (*get_base)(tsr_buffer * buffer);
    /* Copies `size` bytes from host memory `data` to the tensor's data + offset. */
    void (*set_tensor)(tsr_buffer * buffer, tsr_tensor * tensor, const void * data,
                       size_t offset, size_t size);
    /* Copies `size` bytes from the tensor's data + offset to host memory `data`. */
    void (*get_tensor)(tsr_buffer * buffer, const tsr_tensor * tensor, void * data,
                       size_t offset, size_t size);
    /* Sets every byte of the buffer to `value`. */
    void (*clear)(tsr_buffer * buffer, uint8_t value);

    /* Optional. Called once after a tensor's data was placed in this buffer
     * (e.g. to create backend-private `extra` data). */
    tsr_status (*init_tensor)(tsr_buffer * buffer, tsr_tensor * tensor);
    /* Optional. Sets `size` bytes at byte `offset` of the tensor's data to
     * `value` (absent: the host sets them through set_tensor). */
    void (*memset_tensor)(tsr_buffer * buffer, tsr_tensor * tensor, uint8_t value,
                          size_t offset, size_t size);
    /* Optional. Copies all of src's bytes into dst (dst lives in this buffer,
     * src may live in any buffer). Returns false when it cannot do this
     * combination; the host then copies through host memory. */
    bool (*cpy_tensor)(tsr_buffer * buffer, const tsr_tensor * src, tsr_tensor * dst);
} tsr_buffer_i;

struct tsr_buffer {
    const tsr_buffer_i * iface;
    tsr_buffer_type * buft; /* the type that made it */
    void * context;         /* backend-private */
    size_t size;            /* bytes */
    int32_t usage;          /* tsr_buffer_usage; written by the host */
};

/* -------------------------------------------------------------------- backend */

typedef struct tsr_backend_i {
    uint32_t size; /* sizeof(tsr_backend_i) as compiled by the backend */

    /* Short name, e.g. "CPU". */
    const char * (*get_name)(tsr_backend * backend);
    /* Frees the backend and everything it allocated (plans excepted: free them first). */
    void (*free)(tsr_backend * backend);
    /* Computes every node of `graph` in order. All tensors must have data.
     * Returns SUCCESS, FAILED (a node could not be computed), ALLOC_FAILED
     * (scratch memory) or ABORTED (the abort callback returned true). */
    tsr_status (*graph_compute)(tsr_backend * backend, const tsr_graph_view * graph);

    /* Optional. Queue a copy host -> tensor / tensor -> host on this stream;
     * complete after synchronize. Same contract as the buffer slots. */
    void (*set_tensor_async)(tsr_backend * backend, tsr_tensor * tensor, const void * data,
                             size_t offset, size_t size);
    void (*get_tensor_async)(tsr_backend * backend, const tsr_tensor * tensor, void * data,
                             size_t offset, size_t size);
    /* Optional. Waits until all queued work of this backend is done. */
    void (*synchronize)(tsr_backend * backend);

    /* Optional (all three or none). A plan is created once for a graph and
     * computed many times while the graph's tensors and data pointers are
     * unchanged. create returns NULL on failure. */
    tsr_graph_plan (*graph_plan_create)(tsr_backend * backend, const tsr_graph_view * graph);
    void (*graph_plan_free)(tsr_backend * backend, tsr_graph_plan plan);
    tsr_status (*graph_plan_compute)(tsr_backend * backend, tsr_graph_plan plan);
} tsr_backend_i;

struct tsr_backend {
    const tsr_backend_i * iface;
    tsr_device * device;
    void * context; /* backend-private */
};

/* --------------------------------------------------------------------- device */

typedef enum tsr_device_type {
    TSR_DEVICE_TYPE_CPU = 0,   /* the host processor */
    TSR_DEVICE_TYPE_GPU = 1,   /* a discrete GPU with its own memory */
    TSR_DEVICE_TYPE_IGPU = 2,  /* an integrated GPU sharing host memory */
    TSR_DEVICE_TYPE_ACCEL = 3  /* an accelerator used together with the CPU (e.g. BLAS, NPU) */
} tsr_device_type;

/* Capability bits returned by get_caps. */
enum {
    TSR_DEVICE_CAP_ASYNC = 1,                /* set/get_tensor_async and synchronize work */
    TSR_DEVICE_CAP_HOST_BUFFER = 2,          /* get_host_buffer_type returns a type */
    TSR_DEVICE_CAP_BUFFER_FROM_HOST_PTR = 4, /* buffer_from_host_ptr works (zero-copy) */
    TSR_DEVICE_CAP_EVENTS = 8                /* event slots work (reserved for a later minor) */
};

typedef struct tsr_device_i {
    uint32_t size; /* sizeof(tsr_device_i) as compiled by the backend */

    /* Short unique name, e.g. "CPU", "CUDA0". */
    const char * (*get_name)(tsr_device * dev);
    /* Human-readable description, e.g. the processor's model name. */
    const char * (*get_description)(tsr_device * dev);
    /* Free and total memory in bytes, as far as the device can tell. */
    void (*get_memory)(tsr_device * dev, size_t * free, size_t * total);
    /* tsr_device_type */
    int32_t (*get_type)(tsr_device * dev);
    /* Capabilities: an OR of TSR_DEVICE_CAP_* bits. Together with the four
     * getters above these are the device's properties. */
    uint32_t (*get_caps)(tsr_device * dev);

    /* A new backend (compute stream) on this device, or NULL on failure.
     * `params` is NULL or a backend-defined "key=value;key=value" string. */
    tsr_backend * (*init_backend)(tsr_device * dev, const char * params);
    /* The device's default buffer type (lives as long as the device). */
    tsr_buffer_type * (*get_buffer_type)(tsr_device * dev);
    /* True when the device can compute `op` (its op, types, shapes and the
     * buffers its sources live in). Must never crash on any tensor. */
    bool (*supports_op)(tsr_device * dev, const tsr_tensor * op);
    /* True when the device's backends can use tensors in buffers of `buft`. */
    bool (*supports_buft)(tsr_device * dev, tsr_buffer_type * buft);

    /* Optional. A host-memory buffer type fast to copy to/from this device. */
    tsr_buffer_type * (*get_host_buffer_type)(tsr_device * dev);
    /* Optional. A buffer over `size` bytes of caller-owned host memory at
     * `ptr` (zero-copy; the memory must outlive the buffer, which never
     * frees it). `max_tensor_size`: the largest tensor that will be placed
     * in it, in bytes. NULL when the memory cannot be used. */
    tsr_buffer * (*buffer_from_host_ptr)(tsr_device * dev, void * ptr, size_t size,
                                         size_t max_tensor_size);
    /* Optional. True when running `op` on this device is worth copying its
     * weights there even though they live elsewhere (absent: false). */
    bool (*offload_op)(tsr_device * dev, const tsr_tensor * op);
} tsr_device_i;

struct tsr_device {
    const tsr_device_i * iface;
    tsr_reg * reg;  /* the family it belongs to */
    void * context; /* backend-private */
};

/* ------------------------------------------------------------------------ reg */

typedef struct tsr_reg_i {
    uint32_t size; /* sizeof(tsr_reg_i) as compiled by the backend */

    /* Backend family name, e.g. "cpu" (matched ASCII case-insensitively). */
    const char * (*get_name)(tsr_reg * reg);
    /* Number of devices. */
    size_t (*get_device_count)(tsr_reg * reg);
    /* Device i (0 <= i < count), or NULL when it is not usable (the host skips it). */
    tsr_device * (*get_device)(tsr_reg * reg, size_t index);
    /* Optional. Address of an extension function by name, or NULL. */
    void * (*get_proc_address)(tsr_reg * reg, const char * name);
} tsr_reg_i;

struct tsr_reg {
    uint32_t api_major; /* TSR_BACKEND_API_MAJOR the backend was built with; never moves */
    uint32_t api_minor; /* TSR_BACKEND_API_MINOR the backend was built with; never moves */
    const tsr_reg_i * iface;
    void * context; /* backend-private */
};

/* Plugin entry points (see the top of this file). */
typedef tsr_reg * (*tsr_backend_init_fn)(void);
typedef int (*tsr_backend_score_fn)(void);

/* ------------------------------------------------- common extension functions
 * Looked up with get_proc_address(reg, name). A backend implements the ones
 * that make sense for it. Each takes objects of its own reg only. */

/* A (name, value) pair describing the build and the machine, e.g.
 * {"AVX2", "1"}, {"VARIANT", "haswell"}. */
typedef struct tsr_feature {
    const char * name;
    const char * value;
} tsr_feature;

/* "tsr_reg_get_features": array terminated by {NULL, NULL}; lives as long as the reg. */
#define TSR_EXT_REG_GET_FEATURES "tsr_reg_get_features"
typedef const tsr_feature * (*tsr_reg_get_features_fn)(tsr_reg * reg);

/* "tsr_dev_get_extra_bufts": NULL-terminated array of additional buffer
 * types the device's backends accept (e.g. repacked weight layouts). */
#define TSR_EXT_DEV_GET_EXTRA_BUFTS "tsr_dev_get_extra_bufts"
typedef tsr_buffer_type ** (*tsr_dev_get_extra_bufts_fn)(tsr_device * dev);

/* "tsr_backend_set_n_threads": threads used by later graph computes (>= 1).
 * Returns false for n < 1. */
#define TSR_EXT_BACKEND_SET_N_THREADS "tsr_backend_set_n_threads"
typedef bool (*tsr_backend_set_n_threads_fn)(tsr_backend * backend, int n_threads);

/* "tsr_backend_set_abort_callback": checked between nodes; returning true
 * stops the compute, which then returns TSR_STATUS_ABORTED. NULL removes it. */
#define TSR_EXT_BACKEND_SET_ABORT_CALLBACK "tsr_backend_set_abort_callback"
typedef void (*tsr_backend_set_abort_callback_fn)(tsr_backend * backend,
                                                  tsr_abort_callback callback, void * user_data);

/* Thread pools shared between backends of one reg (CPU-like backends). */
typedef struct tsr_threadpool tsr_threadpool;
/* "tsr_threadpool_new": a pool of n_threads (>= 1) workers, or NULL. */
#define TSR_EXT_THREADPOOL_NEW "tsr_threadpool_new"
typedef tsr_threadpool * (*tsr_threadpool_new_fn)(int n_threads);
/* "tsr_threadpool_free": joins and frees; no backend may still use it. */
#define TSR_EXT_THREADPOOL_FREE "tsr_threadpool_free"
typedef void (*tsr_threadpool_free_fn)(tsr_threadpool * pool);
/* "tsr_threadpool_pause" / "tsr_threadpool_resume": idle workers sleep
 * while paused (a compute resumes the pool it uses). */
#define TSR_EXT_THREADPOOL_PAUSE "tsr_threadpool_pause"
#define TSR_EXT_THREADPOOL_RESUME "tsr_threadpool_resume"
typedef void (*tsr_threadpool_pause_fn)(tsr_threadpool * pool);
typedef void (*tsr_threadpool_resume_fn)(tsr_threadpool * pool);
/* "tsr_backend_set_threadpool": the backend computes on `pool` (caller
 * keeps ownership; NULL returns to the backend's own pool). */
#define TSR_EXT_BACKEND_SET_THREADPOOL "tsr_backend_set_threadpool"
typedef void (*tsr_backend_set_threadpool_fn)(tsr_backend * backend, tsr_threadpool * pool);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_BACKEND_H */

/*
 * fake_backend.c — a small backend plugin for the registry tests, written in
 * plain C against include/tessera/backend.h. One source, compiled into many
 * libraries; macros choose each library's defect or property:
 *
 *   FAKE_FAMILY "name"        family name (required)
 *   FAKE_DEVICE_TYPE t        type of its devices (default GPU)
 *   FAKE_N_DEVICES n          device count (default 1)
 *   FAKE_NULL_DEVICE i        get_device(i) returns NULL
 *   FAKE_BAD_DEVICE i         device i lacks a required slot (get_caps)
 *   FAKE_NULL_BUFT i          device i's get_buffer_type returns NULL
 *   FAKE_BAD_NAME "s"         device 0 is named s instead
 *   FAKE_NAME_ONCE            get_name and get_description return NULL
 *                             from their second call on
 *   FAKE_DESC_NULL            get_description returns NULL
 *   FAKE_ALIGN n              its buffer type's alignment (default 32)
 *   FAKE_BASE_NULL            its buffers' get_base returns NULL
 *   FAKE_WEIRD_STRINGS        description and a feature hold a newline,
 *                             terminal escape sequences and invalid UTF-8
 *   FAKE_SCORE s              exports tessera_backend_score returning s
 *   FAKE_NO_INIT              does not export tessera_backend_init
 *   FAKE_INIT_NULL            tessera_backend_init returns NULL
 *   FAKE_EXIT_IN_INIT s       tessera_backend_init calls exit(s)
 *   FAKE_CRASH_IN_INIT        tessera_backend_init executes an illegal
 *                             instruction (SIGILL)
 *   FAKE_HANG_IN_INIT         tessera_backend_init never returns
 *   FAKE_EXIT_IN_SCORE s      tessera_backend_score calls exit(s)
 *   FAKE_CRASH_IN_SCORE       tessera_backend_score executes an illegal
 *                             instruction (SIGILL)
 *   FAKE_HANG_IN_SCORE        tessera_backend_score never returns
 *   FAKE_SLOW_SCORE ms        tessera_backend_score sleeps ms milliseconds
 *   FAKE_HANG_AT_UNLOAD       a destructor (run by dlclose) never returns
 *   FAKE_FORGE_IN_SCORE       tessera_backend_score writes bytes shaped like
 *                             a probe record to file descriptors 3..63
 *   FAKE_EXIT_AT_LOAD s       a constructor (run by dlopen) calls exit(s)
 *   FAKE_API_MAJOR / _MINOR   version it claims (default: this header's)
 *   FAKE_VARIANT "v"          reported as feature VARIANT
 *   FAKE_SHORT_TABLES         device/buffer type tables end before their
 *                             optional slots, whose memory holds poison
 *   FAKE_LONG_TABLES          tables carry extra slots of a newer minor
 *
 * Devices are named "<FAKE_DEVICE_PREFIX><i>". Backends compute ADD of
 * contiguous F32 tensors of equal shape (enough to test the C++ handles),
 * nothing else. Live objects are counted (extension "fake_live_objects").
 */
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "tessera/backend.h"

#ifndef FAKE_DEVICE_TYPE
#define FAKE_DEVICE_TYPE TSR_DEVICE_TYPE_GPU
#endif
#ifndef FAKE_N_DEVICES
#define FAKE_N_DEVICES 1
#endif
#ifndef FAKE_NULL_DEVICE
#define FAKE_NULL_DEVICE (-1)
#endif
#ifndef FAKE_BAD_DEVICE
#define FAKE_BAD_DEVICE (-1)
#endif
#ifndef FAKE_NULL_BUFT
#define FAKE_NULL_BUFT (-1)
#endif
#ifndef FAKE_API_MAJOR
#define FAKE_API_MAJOR TSR_BACKEND_API_MAJOR
#endif
#ifndef FAKE_API_MINOR
#define FAKE_API_MINOR TSR_BACKEND_API_MINOR
#endif
#ifndef FAKE_VARIANT
#define FAKE_VARIANT "none"
#endif
#ifndef FAKE_DEVICE_PREFIX
#define FAKE_DEVICE_PREFIX "Fake"
#endif

/* An address that crashes when called: fills slots the host must not call. */
#define POISON_SLOT(T, f) .f = (__typeof__(((T *)0)->f))(uintptr_t)0xdead0bad0ull

static _Atomic int live_objects; /* buffers + backends not yet freed */

/* ------------------------------------------------------------- buffer */

static void buf_free(tsr_buffer * b) {
    free(b->context);
    free(b);
    --live_objects;
}
static void * buf_base(tsr_buffer * b) {
#ifdef FAKE_BASE_NULL
    (void)b;
    return NULL;
#else
    return b->context;
#endif
}
static void buf_set(tsr_buffer * b, tsr_tensor * t, const void * data, size_t off, size_t n) {
    (void)b;
    memcpy((char *)t->data + off, data, n);
}
static void buf_get(tsr_buffer * b, const tsr_tensor * t, void * data, size_t off, size_t n) {
    (void)b;
    memcpy(data, (const char *)t->data + off, n);
}
static void buf_clear(tsr_buffer * b, uint8_t v) { memset(b->context, v, b->size); }

static const tsr_buffer_i buffer_iface = {
    .size = sizeof(tsr_buffer_i),
    .free_buffer = buf_free,
    .get_base = buf_base,
    .set_tensor = buf_set,
    .get_tensor = buf_get,
    .clear = buf_clear,
};

/* -------------------------------------------------------- buffer type */

static const char * buft_name(tsr_buffer_type * bt) { (void)bt; return FAKE_DEVICE_PREFIX "Host"; }
static tsr_buffer * buft_alloc(tsr_buffer_type * bt, size_t size) {
    tsr_buffer * b = calloc(1, sizeof *b);
    void * mem = calloc(1, size ? size : 1);
    if (!b || !mem) {
        free(b);
        free(mem);
        return NULL;
    }
    b->iface = &buffer_iface;
    b->buft = bt;
    b->context = mem;
    b->size = size;
    ++live_objects;
    return b;
}
#ifndef FAKE_ALIGN
#define FAKE_ALIGN 32
#endif
static size_t buft_align(tsr_buffer_type * bt) { (void)bt; return (size_t)(FAKE_ALIGN); }
static bool buft_is_host(tsr_buffer_type * bt) { (void)bt; return true; }

#ifdef FAKE_SHORT_TABLES
/* A table that stops after its required slots; the optional slots that
 * follow in memory hold poison the host must never call. */
static struct {
    tsr_buffer_type_i t;
} buft_storage = {{.size = offsetof(tsr_buffer_type_i, get_max_size),
                   .get_name = buft_name,
                   .alloc_buffer = buft_alloc,
                   .get_alignment = buft_align,
                   POISON_SLOT(tsr_buffer_type_i, get_max_size),
                   POISON_SLOT(tsr_buffer_type_i, get_alloc_size),
                   POISON_SLOT(tsr_buffer_type_i, is_host)}};
#define BUFT_IFACE (&buft_storage.t)
#else
static const tsr_buffer_type_i buft_iface = {
    .size = sizeof(tsr_buffer_type_i),
    .get_name = buft_name,
    .alloc_buffer = buft_alloc,
    .get_alignment = buft_align,
    .is_host = buft_is_host,
};
#define BUFT_IFACE (&buft_iface)
#endif

static tsr_buffer_type buft = {BUFT_IFACE, NULL, NULL};

/* ------------------------------------------------------------ backend */

static const char * be_name(tsr_backend * be) { (void)be; return FAKE_DEVICE_PREFIX; }
static void be_free(tsr_backend * be) {
    free(be);
    --live_objects;
}
static tsr_status be_compute(tsr_backend * be, const tsr_graph_view * g) {
    (void)be;
    for (int32_t i = 0; i < g->n_nodes; ++i) {
        tsr_tensor * n = g->nodes[i];
        if (n->op == TSR_OP_NONE) continue;
        if (n->op != TSR_OP_ADD || n->type != TSR_TYPE_F32) return TSR_STATUS_FAILED;
        const tsr_tensor * a = n->src[0];
        const tsr_tensor * b = n->src[1];
        int64_t count = n->ne[0] * n->ne[1] * n->ne[2] * n->ne[3];
        for (int64_t k = 0; k < count; ++k) {
            ((float *)n->data)[k] = ((const float *)a->data)[k] + ((const float *)b->data)[k];
        }
    }
    return TSR_STATUS_SUCCESS;
}

static const tsr_backend_i backend_iface = {
    .size = sizeof(tsr_backend_i),
    .get_name = be_name,
    .free = be_free,
    .graph_compute = be_compute,
};

/* ------------------------------------------------------------- device */

static tsr_reg reg;
static tsr_device devices[FAKE_N_DEVICES > 0 ? FAKE_N_DEVICES : 1];
static char device_names[FAKE_N_DEVICES > 0 ? FAKE_N_DEVICES : 1][32];

static int dev_index(tsr_device * d) { return (int)(d - devices); }
static const char * dev_name(tsr_device * d) {
#ifdef FAKE_NAME_ONCE
    static int calls;
    if (calls++ > 0) return NULL;
#endif
#ifdef FAKE_BAD_NAME
    if (dev_index(d) == 0) return FAKE_BAD_NAME;
#endif
    return device_names[dev_index(d)];
}
static const char * dev_desc(tsr_device * d) {
    (void)d;
#ifdef FAKE_NAME_ONCE
    static int calls;
    if (calls++ > 0) return NULL;
#endif
#ifdef FAKE_DESC_NULL
    return NULL;
#elif defined(FAKE_WEIRD_STRINGS)
    return "fake\n\033[2J\033[31mred \xff\xfe device";
#else
    return "a fake " FAKE_FAMILY " device";
#endif
}
static void dev_memory(tsr_device * d, size_t * free_b, size_t * total) {
    (void)d;
    *free_b = 1000;
    *total = 2000;
}
static int32_t dev_type(tsr_device * d) { (void)d; return FAKE_DEVICE_TYPE; }
static uint32_t dev_caps(tsr_device * d) { (void)d; return 0; }
static tsr_backend * dev_init(tsr_device * d, const char * params) {
    if (params && strcmp(params, "fail") == 0) return NULL;
    tsr_backend * be = calloc(1, sizeof *be);
    if (!be) return NULL;
    be->iface = &backend_iface;
    be->device = d;
    ++live_objects;
    return be;
}
/* One buffer type shared by all devices (its device field: device 0, set at init). */
static tsr_buffer_type * dev_buft(tsr_device * d) { return dev_index(d) == FAKE_NULL_BUFT ? NULL : &buft; }
static bool dev_supports_op(tsr_device * d, const tsr_tensor * op) {
    (void)d;
    return op->op == TSR_OP_NONE || (op->op == TSR_OP_ADD && op->type == TSR_TYPE_F32);
}
static bool dev_supports_buft(tsr_device * d, tsr_buffer_type * bt) { (void)d; return bt == &buft; }

#if defined(FAKE_SHORT_TABLES)
static struct {
    tsr_device_i t;
} dev_storage = {{.size = offsetof(tsr_device_i, get_host_buffer_type),
                  .get_name = dev_name,
                  .get_description = dev_desc,
                  .get_memory = dev_memory,
                  .get_type = dev_type,
                  .get_caps = dev_caps,
                  .init_backend = dev_init,
                  .get_buffer_type = dev_buft,
                  .supports_op = dev_supports_op,
                  .supports_buft = dev_supports_buft,
                  POISON_SLOT(tsr_device_i, get_host_buffer_type),
                  POISON_SLOT(tsr_device_i, buffer_from_host_ptr),
                  POISON_SLOT(tsr_device_i, offload_op)}};
#define DEVICE_IFACE (&dev_storage.t)
#elif defined(FAKE_LONG_TABLES)
/* A newer minor's table: the known slots, then slots this host does not know. */
static struct {
    tsr_device_i t;
    void * future[4];
} dev_storage = {{.size = sizeof(tsr_device_i) + 4 * sizeof(void *),
                  .get_name = dev_name,
                  .get_description = dev_desc,
                  .get_memory = dev_memory,
                  .get_type = dev_type,
                  .get_caps = dev_caps,
                  .init_backend = dev_init,
                  .get_buffer_type = dev_buft,
                  .supports_op = dev_supports_op,
                  .supports_buft = dev_supports_buft},
                 {(void *)(uintptr_t)0xdead0bad0ull, (void *)(uintptr_t)0xdead0bad0ull,
                  (void *)(uintptr_t)0xdead0bad0ull, (void *)(uintptr_t)0xdead0bad0ull}};
#define DEVICE_IFACE (&dev_storage.t)
#else
static const tsr_device_i device_iface = {
    .size = sizeof(tsr_device_i),
    .get_name = dev_name,
    .get_description = dev_desc,
    .get_memory = dev_memory,
    .get_type = dev_type,
    .get_caps = dev_caps,
    .init_backend = dev_init,
    .get_buffer_type = dev_buft,
    .supports_op = dev_supports_op,
    .supports_buft = dev_supports_buft,
};
#define DEVICE_IFACE (&device_iface)
#endif

/* A device table with a required slot missing. */
static const tsr_device_i bad_device_iface = {
    .size = sizeof(tsr_device_i),
    .get_name = dev_name,
    .get_description = dev_desc,
    .get_memory = dev_memory,
    .get_type = dev_type,
    .get_caps = NULL,
    .init_backend = dev_init,
    .get_buffer_type = dev_buft,
    .supports_op = dev_supports_op,
    .supports_buft = dev_supports_buft,
};

/* ---------------------------------------------------------------- reg */

static const char * reg_name(tsr_reg * r) { (void)r; return FAKE_FAMILY; }
static size_t reg_count(tsr_reg * r) { (void)r; return FAKE_N_DEVICES; }
static tsr_device * reg_device(tsr_reg * r, size_t i) {
    (void)r;
    if ((int)i == FAKE_NULL_DEVICE || i >= FAKE_N_DEVICES) return NULL;
    return &devices[i];
}

#ifdef FAKE_WEIRD_STRINGS
static const tsr_feature features[] = {{"X\033[31mRED", "a\nfake line \xc0"}, {NULL, NULL}};
#else
static const tsr_feature features[] = {{"VARIANT", FAKE_VARIANT}, {"FAKE", "1"}, {NULL, NULL}};
#endif
static const tsr_feature * get_features(tsr_reg * r) { (void)r; return features; }
static int get_live_objects(void) { return live_objects; }

static void * reg_proc(tsr_reg * r, const char * name) {
    (void)r;
    if (strcmp(name, TSR_EXT_REG_GET_FEATURES) == 0) return (void *)get_features;
    if (strcmp(name, "fake_live_objects") == 0) return (void *)get_live_objects;
    return NULL;
}

static const tsr_reg_i reg_iface = {
    .size = sizeof(tsr_reg_i),
    .get_name = reg_name,
    .get_device_count = reg_count,
    .get_device = reg_device,
    .get_proc_address = reg_proc,
};

#ifdef FAKE_EXIT_AT_LOAD
__attribute__((constructor)) static void fake_exit_at_load(void) { exit(FAKE_EXIT_AT_LOAD); }
#endif
#ifdef FAKE_HANG_AT_UNLOAD
__attribute__((destructor)) static void fake_hang_at_unload(void) {
    for (;;) sleep(1);
}
#endif

#ifdef FAKE_SCORE
TSR_BACKEND_EXPORT int tessera_backend_score(void) {
#ifdef FAKE_EXIT_IN_SCORE
    exit(FAKE_EXIT_IN_SCORE);
#endif
#ifdef FAKE_CRASH_IN_SCORE
    __builtin_trap(); /* an illegal instruction (SIGILL), as broken machine code would be */
#endif
#ifdef FAKE_HANG_IN_SCORE
    for (;;) sleep(1);
#endif
#ifdef FAKE_SLOW_SCORE
    usleep(FAKE_SLOW_SCORE * 1000);
#endif
#ifdef FAKE_FORGE_IN_SCORE
    {
        /* 16 bytes shaped like a probe's record ({0, 2, 99, 0}: library 0
         * scored 99) written to every descriptor from 3 on */
        const int32_t rec[4] = {0, 2, 99, 0};
        for (int fd = 3; fd < 64; ++fd) (void)!write(fd, rec, sizeof rec);
    }
#endif
    return FAKE_SCORE;
}
#endif

#ifndef FAKE_NO_INIT
TSR_BACKEND_EXPORT tsr_reg * tessera_backend_init(void) {
#ifdef FAKE_EXIT_IN_INIT
    exit(FAKE_EXIT_IN_INIT);
#endif
#ifdef FAKE_CRASH_IN_INIT
    __builtin_trap();
#endif
#ifdef FAKE_HANG_IN_INIT
    for (;;) sleep(1);
#endif
#ifdef FAKE_INIT_NULL
    return NULL;
#else
    reg.api_major = FAKE_API_MAJOR;
    reg.api_minor = FAKE_API_MINOR;
    reg.iface = &reg_iface;
    buft.device = &devices[0];
    for (int i = 0; i < FAKE_N_DEVICES; ++i) {
        devices[i].iface = (i == FAKE_BAD_DEVICE) ? &bad_device_iface : DEVICE_IFACE;
        devices[i].reg = &reg;
        /* "<prefix><i>", i < 10 */
        strcpy(device_names[i], FAKE_DEVICE_PREFIX);
        size_t len = strlen(device_names[i]);
        device_names[i][len] = (char)('0' + i % 10);
        device_names[i][len + 1] = '\0';
    }
    return &reg;
#endif
}
#endif

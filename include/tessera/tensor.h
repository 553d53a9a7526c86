/*
 * tessera/tensor.h — plain C tensor metadata shared across the plugin boundary.
 *
 * Everything in this header is C so that a backend plugin built by another
 * compiler can read the same structs. The C++ core (include/tessera/core/)
 * builds and checks these structs; backends only read them (and write the
 * data they point to).
 *
 * Layout conventions (the field's standard, as in GGUF/ggml practice):
 *   ne[i]  number of elements along dimension i; ne[0] is the fastest
 *          (innermost, contiguous in a packed tensor). Unused dims are 1.
 *   nb[i]  stride in BYTES between consecutive indices of dimension i.
 *          For block-quantized types nb[0] is the block's byte size and
 *          nb[1] = nb[0] * ne[0] / block_size for a packed tensor.
 */
#ifndef TESSERA_TENSOR_H
#define TESSERA_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TSR_MAX_DIMS 4
#define TSR_MAX_SRC 4
#define TSR_MAX_OP_PARAMS 16 /* int32 slots; floats are stored bit-cast */
#define TSR_MAX_NAME 64

/*
 * Element types. The numeric values are the GGUF type ids (GGUF spec,
 * "ggml_type" enumeration), so a type read from a file maps 1:1.
 * Gaps (4, 5, 31..33, 36..38) are ids retired by the format.
 */
typedef enum tsr_type {
    TSR_TYPE_F32 = 0,
    TSR_TYPE_F16 = 1,
    TSR_TYPE_Q4_0 = 2,
    TSR_TYPE_Q4_1 = 3,
    TSR_TYPE_Q5_0 = 6,
    TSR_TYPE_Q5_1 = 7,
    TSR_TYPE_Q8_0 = 8,
    TSR_TYPE_Q8_1 = 9,
    TSR_TYPE_Q2_K = 10,
    TSR_TYPE_Q3_K = 11,
    TSR_TYPE_Q4_K = 12,
    TSR_TYPE_Q5_K = 13,
    TSR_TYPE_Q6_K = 14,
    TSR_TYPE_Q8_K = 15,
    TSR_TYPE_IQ2_XXS = 16,
    TSR_TYPE_IQ2_XS = 17,
    TSR_TYPE_IQ3_XXS = 18,
    TSR_TYPE_IQ1_S = 19,
    TSR_TYPE_IQ4_NL = 20,
    TSR_TYPE_IQ3_S = 21,
    TSR_TYPE_IQ2_S = 22,
    TSR_TYPE_IQ4_XS = 23,
    TSR_TYPE_I8 = 24,
    TSR_TYPE_I16 = 25,
    TSR_TYPE_I32 = 26,
    TSR_TYPE_I64 = 27,
    TSR_TYPE_F64 = 28,
    TSR_TYPE_IQ1_M = 29,
    TSR_TYPE_BF16 = 30,
    TSR_TYPE_TQ1_0 = 34,
    TSR_TYPE_TQ2_0 = 35,
    TSR_TYPE_MXFP4 = 39,
    TSR_TYPE_COUNT = 40 /* one past the largest id; not every id below is valid */
} tsr_type;

/*
 * Operations. Semantics (shapes, op_params layout) are documented on the
 * C++ builder functions in include/tessera/core/ops.hpp.
 */
typedef enum tsr_op {
    TSR_OP_NONE = 0, /* a leaf: input, weight or constant */
    TSR_OP_ADD,
    TSR_OP_MUL,
    TSR_OP_SCALE,
    TSR_OP_RMS_NORM,
    TSR_OP_MUL_MAT,
    TSR_OP_GET_ROWS,
    TSR_OP_SET_ROWS,
    TSR_OP_ROPE,
    TSR_OP_SOFT_MAX,
    TSR_OP_SILU,
    TSR_OP_GELU,
    TSR_OP_CPY,
    TSR_OP_CONT,
    TSR_OP_VIEW,
    TSR_OP_RESHAPE,
    TSR_OP_PERMUTE,
    TSR_OP_TRANSPOSE,
    TSR_OP_ARGMAX,
    TSR_OP_FLASH_ATTN_EXT,
    TSR_OP_COUNT
} tsr_op;

/* Tensor flags (bit set). */
enum {
    TSR_FLAG_INPUT = 1,  /* data is set by the caller before compute */
    TSR_FLAG_OUTPUT = 2, /* data is read after compute: the allocator must not reuse it */
    TSR_FLAG_PARAM = 4   /* a weight: lives in a weights buffer, never allocated per graph */
};

struct tsr_buffer; /* opaque; defined by the backend layer (include/tessera/backend.h) */

typedef struct tsr_tensor {
    int32_t type;  /* tsr_type */
    int32_t op;    /* tsr_op */
    int64_t ne[TSR_MAX_DIMS];
    uint64_t nb[TSR_MAX_DIMS]; /* bytes */
    int32_t op_params[TSR_MAX_OP_PARAMS];
    int32_t flags; /* TSR_FLAG_* */
    struct tsr_tensor * src[TSR_MAX_SRC];
    struct tsr_tensor * view_src; /* non-null for views: data = view_src->data + view_offs */
    uint64_t view_offs;           /* bytes */
    void * data;                  /* null until allocated */
    struct tsr_buffer * buffer;   /* buffer the data lives in; may be null for host memory owned elsewhere */
    void * extra;                 /* backend-private (e.g. repacked weights); never touched by the core */
    char name[TSR_MAX_NAME];
} tsr_tensor;

/* A computation graph as seen across the plugin boundary: nodes in
 * topological order (every node's sources come earlier or are leafs). */
typedef struct tsr_graph_view {
    int32_t n_nodes;
    tsr_tensor ** nodes;
    int32_t n_leafs;
    tsr_tensor ** leafs;
} tsr_graph_view;

/* Result of a compute call. */
typedef enum tsr_status {
    TSR_STATUS_SUCCESS = 0,
    TSR_STATUS_FAILED = 1,
    TSR_STATUS_ALLOC_FAILED = 2,
    TSR_STATUS_ABORTED = 3
} tsr_status;

/* Abort callback: returns true to stop compute between nodes. */
typedef bool (*tsr_abort_callback)(void * user_data);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_TENSOR_H */

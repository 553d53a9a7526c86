// backends/cpu/ops/repack.hpp — the row-interleaved ("repacked") layouts of
// weight matrices kept by the CPU_REPACK buffer type
// (cpu_repack_buffer.cpp): Q8_0/Q4_0/Q5_0/Q5_1 read by the MUL_MAT kernels of
// mul_mat_repack.cpp, F16/BF16 by those of matvec_f.cpp and gemm_f.cpp,
// Q4_K, Q5_K and Q6_K by mul_mat_k_repack.cpp and gemm_k.cpp.
//
// Quantized layout (this project's own design). A qualifying matrix (repack_eligible)
// of M rows, K columns, nblk = K / 32 blocks per row of bb bytes (GGUF block
// layouts, core/types.hpp: Q8_0 bb = 34 = F16 d + 32 int8; Q4_0 bb = 18 =
// F16 d + 16 bytes of nibbles, byte i holding element i in its low and
// element 16 + i in its high nibble; Q5_0 bb = 22 = F16 d + 4 bytes qh,
// bit i of the little-endian uint32 the fifth bit of element i, + the 16
// nibble bytes as in Q4_0; Q5_1 bb = 24 = F16 d + F16 m + Q5_0's qh and
// nibbles) is cut into groups of k_repack_rows = 8 consecutive rows (Q4_0
// in AVX512-VNNI builds: 16, below). Group g, block b occupies the 8 * bb
// bytes at (g * nblk + b) * 8 * bb:
//
//   [0, 16)          the 8 rows' F16 scales d, row r at byte 2 r
//   [16, 32)         Q5_1 only: the 8 rows' F16 offsets m, row r at 16 + 2 r
//   [h0, h0 + 32)    Q5_0 and Q5_1: the 8 rows' qh, row r at byte h0 + 4 r
//                    (h0 = 16 for Q5_0, 32 for Q5_1)
//   [s0 + 32 j, ...) step j (Q8_0: j = 0..7, Q4_0, Q5_0 and Q5_1: j = 0..3;
//                    s0 = 16 for Q8_0 and Q4_0, 48 for Q5_0, 64 for Q5_1):
//                    quant bytes 4 j .. 4 j + 3 of row r at byte s0 + 32 j + 4 r
//
// So one 32-byte load of a step holds four quant bytes of each of the 8
// rows (one 32-bit lane per row), and the 8 scales are one 16-byte load:
// a kernel multiplies a step by four activation quants broadcast to every
// lane and accumulates 8 rows' block dot products in the lanes of one
// vector, with no horizontal sums and no gathers. Q4_0, Q5_0 and Q5_1 keep their
// nibbles packed: a step's low nibbles are elements 4 j .. 4 j + 3 of each
// row, its high nibbles elements 16 + 4 j .. 16 + 4 j + 3; their fifth
// bits (Q5_0, Q5_1) are bits 4 j .. 4 j + 3 and 16 + 4 j .. 16 + 4 j + 3 of the
// row's qh, one 32-byte load holding all 8 rows' qh. The layout takes
// exactly the bytes of the original matrix and is the same for every
// instruction-set variant, but for Q4_0 in AVX512-VNNI builds (icelake,
// zen4, sapphirerapids): there its groups hold 16 rows (repack_group_rows),
// by the same rule with 16 for 8 (scales at [0, 32), row r at 2 r; step j
// at 32 + 64 j, row r at + 4 r), so that a step of all 16 rows is one
// 512-bit load; its matrices need rows a multiple of 16.
//
// K-quant layouts, Q4_K, Q5_K and Q6_K (this project's own design; builds
// with AVX2, Q6_K only with AVX-512: see repack_group_rows). The groups
// hold G = repack_group_rows(type) consecutive rows (AVX-512 builds 16, so
// that a step is one 512-bit vector; else 8). A
// group's super-block b (the rows' blocks of bb = 144, 176 or 210 bytes,
// core/types.hpp) occupies the bb * G bytes at (g * n_super + b) * bb * G.
// Each block is cut into units, and the unit starting at block byte u0, of
// s bytes, of row r lies at G * u0 + s * r: the G rows' copies of a unit
// sit side by side, where the unit's section of the block (times G) is.
// (The Q8_0/Q4_0/Q5_0/Q5_1 layout above is the same rule with G =
// repack_group_rows (8; Q4_0 with AVX512-VNNI 16): d
// (and Q5_1's m) a unit of 2, qh a unit of 4, each 4 quant bytes a unit.)
//   Q4_K (F16 d, F16 dmin, 12 scale bytes, 128 qs bytes): d and dmin are
//        units of 2, each scale byte a unit of 1 (so scale byte k of all
//        G rows is one run of G bytes at 4G + G k, and the 6-bit scales and
//        mins of all rows unpack with the block's bit operations on whole
//        vectors), each 4 qs bytes a unit ("step" j = 0..31 at 16G + 4G j).
//        The low nibbles of step j are elements 64 (j / 8) + 4 (j % 8) +
//        0..3 (sub-block 2 (j / 8)), the high nibbles those + 32
//        (sub-block 2 (j / 8) + 1).
//   Q5_K (F16 d, F16 dmin, 12 scale bytes, 32 qh bytes, 128 qs bytes):
//        Q4_K's units for d, dmin and the scales; each 4 qh bytes a unit
//        (qh step i = 0..7 at 16G + 4G i), each 4 qs bytes a unit (step
//        j = 0..31 at 48G + 4G j, nibbles as in Q4_K). The fifth bits of
//        step j are in qh step j % 8: bit 2 (j / 8) of each byte for its
//        low nibbles, bit 2 (j / 8) + 1 for its high ones (qh[l] bit s
//        belongs to element l of sub-block s, core/types.hpp).
//   Q6_K (128 ql bytes, 64 qh bytes, 16 int8 scales, F16 d): each 4 ql or
//        qh bytes a unit, each scale a unit of 1, d a unit of 2, but placed
//        in the order the kernels first read them rather than where their
//        section of the block is. The super-block's body (208G bytes) is
//        two halves h = 0, 1 of 104G bytes, at 104G h:
//          [G k, +G)              scale 8 h + k           (k = 0..7)
//          [8G + 12G s, +4G)      ql step 16 h + s        (s = 0..7)
//          [8G + 12G s + 4G, +4G) qh step 8 h + s
//          [8G + 12G s + 8G, +4G) ql step 16 h + 8 + s
//        and d (2G bytes) follows the body in even super-blocks (at 208G)
//        and precedes it in odd ones (at 0, the body at 2G). So the kernels
//        stream each block front to back, and every 64-byte (AVX-512) or
//        32-byte (AVX2) step load is aligned: 210G is an odd multiple of
//        half that size. (With the plain section order, the ql/qh/scale
//        jumps and the split loads of every odd block held 4096 x 4096
//        streamed at 7-9 GB/s on Zen 4, 1 thread, where the plain rows
//        ran at 16-18. The kernel reads step s of all four quarters of a
//        half at once, from the three units of triple s: 21.5-23 GB/s.
//        The same kernel over two streams inside a half, ql/qh pairs then
//        the other ql steps: 8-9 GB/s.)
// Like the layouts above they take exactly the matrix's bytes; the
// one-token kernels (mul_mat_k_repack.cpp) stream a group once, its G rows
// in the int32 lanes of one vector, and gemm_k.cpp unpacks its panels from
// the groups.
//
// Float layout (F16, BF16; this project's own design): groups of
// k_repack_float_rows = 16 consecutive rows, each group k-major: element
// (k, row) of group g = row / 16, r = row % 16, lies at element
// (g * K + k) * 16 + r. A group is one contiguous stream of K steps of 32
// bytes, step k holding the 16 rows' weights at k: the float GEMM widens
// three steps into its 48-row micro-panel column without transposes, and
// the one-token product reads a group as one stream with one vector per
// step. Only builds with F16C (TSR_CPU_AVX2) store floats this way (the
// portable kernels read plain rows only).
//
// A tensor is "repacked" when it lives in a CPU_REPACK buffer and that
// buffer type's init_tensor found it eligible: t->extra == repack_tag() and
// t->buffer->buft->context == repack_tag(). Every other tensor of such a
// buffer keeps the plain layout.
//
// Everything here is out of line (no inline code shared between the
// baseline adapter and the per-variant kernels, see features.hpp).
// Internal to the CPU backend.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tessera/tensor.h"

namespace tessera::cpu {

// Rows per interleaved group: Q8_0/Q4_0/Q5_0/Q5_1 (Q4_0 with AVX512-VNNI:
// twice this), F16/BF16. (Q4_K, Q5_K, Q6_K:
// repack_group_rows, 16 in AVX-512 builds and 8 in the other AVX2 ones,
// which keep Q6_K plain: the int32 lanes of their widest vector,
// k_lanes.hpp.)
inline constexpr int64_t k_repack_rows = 8;
inline constexpr int64_t k_repack_float_rows = 16;

// Where the units of the repacked Q6_K layout above sit in a super-block's
// body, in units of G bytes: ql step j (0..31), qh step i (0..15) and
// scale k (0..15). The one definition for the repacking (repack.cpp) and
// the kernels (k_lanes.hpp: q6_k_group_block).
constexpr size_t q6_k_ql_pos(size_t j) {
    return 104 * (j / 16) + 8 + 12 * (j % 8) + (j % 16 < 8 ? 0 : 8);
}
constexpr size_t q6_k_qh_pos(size_t i) {
    return 104 * (i / 8) + 8 + 12 * (i % 8) + 4;
}
constexpr size_t q6_k_scale_pos(size_t k) {
    return 104 * (k / 8) + k % 8;
}

// Rows per group of `type` in the repacked layout (0 for a type not
// repacked in this build).
int64_t repack_group_rows(int32_t type);

// Its address marks repacked tensors (t->extra) and the CPU_REPACK buffer
// type (its context); the value is never read. (A variable, so that the
// buffer type can be constant-initialized with its address.)
extern const char k_repack_tag;

// &k_repack_tag.
const void * repack_tag();

// True for the types stored interleaved: Q4_0, Q5_0, Q5_1 and Q8_0, and F16, BF16,
// Q4_K and Q5_K in builds with AVX2/F16C, Q6_K in builds with AVX-512. (AVX-512 builds
// kept Q8_0 plain until the interleaved layout got its 16-row AVX-512
// GEMM kernel: interleaved, 1B Q8_0 token generation on 2 threads went
// from 32.5 to 40.5 t/s, about 0.86 of the read bandwidth.)
bool repack_type_supported(int32_t type);

// True when t can be stored interleaved: repack_type_supported, not a view,
// 2-D (ne[2] = ne[3] = 1), ne[1] a multiple of repack_group_rows, ne[0] a
// multiple of the block length, rows packed (nb[0] = block or element
// bytes, nb[1] = row bytes).
bool repack_eligible(const tsr_tensor * t);

// True when t's data is in the interleaved layout (see above).
bool is_repacked(const tsr_tensor * t);

// True when reading t's data means reading a repacked tensor's bytes:
// t is repacked or is a view of one.
bool reads_repacked(const tsr_tensor * t);

// False when `node` would read or write repacked data other than as
// MUL_MAT's src[0] (the tensor itself, not a view): every other kernel
// expects the plain layout. True for nodes touching no repacked tensor.
bool repacked_sources_ok(const tsr_tensor * node);

// Writes bytes [offset, offset + size) of t's ORIGINAL (GGUF) byte image,
// taken from src, into t->data in the interleaved layout. t must be
// repack_eligible; the range must lie within its bytes (the host checks).
void repack_store(const tsr_tensor * t, const void * src, size_t offset, size_t size);

// Reads bytes [offset, offset + size) of t's ORIGINAL byte image from the
// interleaved data into dst (the inverse of repack_store).
void repack_load(const tsr_tensor * t, void * dst, size_t offset, size_t size);

} // namespace tessera::cpu

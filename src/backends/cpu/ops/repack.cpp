// backends/cpu/ops/repack.cpp — the interleaved weight layout (repack.hpp):
// marking, eligibility, and copying between the original byte image and
// the interleaved data.
#include "backends/cpu/ops/repack.hpp"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backends/cpu/ops/simd.hpp"
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include "tessera/backend.h"

namespace tessera::cpu {

extern const char k_repack_tag = 0;

namespace {

constexpr size_t k_qk = 32; // elements per Q8_0/Q4_0/Q5_0/Q5_1 block

size_t block_bytes_of(int32_t type) {
    switch (type) {
    case TSR_TYPE_Q8_0: return 34;
    case TSR_TYPE_Q4_0: return 18;
    case TSR_TYPE_Q5_0: return 22;
    case TSR_TYPE_Q5_1: return 24;
    case TSR_TYPE_Q4_K: return 144;
    case TSR_TYPE_Q5_K: return 176;
    case TSR_TYPE_Q6_K: return 210;
    default: return 0;
    }
}

bool is_float_layout(int32_t type) {
    return type == TSR_TYPE_F16 || type == TSR_TYPE_BF16;
}

// The K-quants stored interleaved: super-blocks of 256 elements.
bool is_k_layout(int32_t type) {
    return type == TSR_TYPE_Q4_K || type == TSR_TYPE_Q5_K || type == TSR_TYPE_Q6_K;
}

#ifdef __SSE2__
// Stores k = k0 .. k0 + 7 of 8 rows (the 16 bytes at src + r row_bytes, r
// = 0..7) as steps: element (r, k) at out + (k - k0) step_bytes + 2 r. An
// 8 x 8 transpose of 16-bit elements by unpacking pairs, then pairs of
// pairs, then halves.
inline void transpose_8x8_u16(const char * src, size_t row_bytes, char * out, size_t step_bytes) {
    __m128i a[8], t[8], u[8];
    for (int r = 0; r < 8; ++r) a[r] = _mm_loadu_si128(reinterpret_cast<const __m128i *>(src + static_cast<size_t>(r) * row_bytes));
    for (int i = 0; i < 4; ++i) {
        t[2 * i] = _mm_unpacklo_epi16(a[2 * i], a[2 * i + 1]);     // k0..3 of rows 2i, 2i+1
        t[2 * i + 1] = _mm_unpackhi_epi16(a[2 * i], a[2 * i + 1]); // k4..7
    }
    for (int i = 0; i < 2; ++i) { // rows 4i .. 4i + 3
        u[4 * i] = _mm_unpacklo_epi32(t[4 * i], t[4 * i + 2]);         // k0, k1
        u[4 * i + 1] = _mm_unpackhi_epi32(t[4 * i], t[4 * i + 2]);     // k2, k3
        u[4 * i + 2] = _mm_unpacklo_epi32(t[4 * i + 1], t[4 * i + 3]); // k4, k5
        u[4 * i + 3] = _mm_unpackhi_epi32(t[4 * i + 1], t[4 * i + 3]); // k6, k7
    }
    for (int j = 0; j < 4; ++j) { // k = 2j, 2j + 1: rows 0..3 from u[j], 4..7 from u[4 + j]
        _mm_storeu_si128(reinterpret_cast<__m128i *>(out + static_cast<size_t>(2 * j) * step_bytes), _mm_unpacklo_epi64(u[j], u[4 + j]));
        _mm_storeu_si128(reinterpret_cast<__m128i *>(out + static_cast<size_t>(2 * j + 1) * step_bytes),
                         _mm_unpackhi_epi64(u[j], u[4 + j]));
    }
}
#endif

// The float layout (2-byte elements, repack.hpp): copies `size` bytes from
// original byte `offset`. Whole groups of 16 rows go through a loop over
// k with the 16 rows' elements gathered into one 32-byte step (stores: 8 k
// at a time by two 8 x 8 transposes where SSE2 is there, against 2-byte
// copies before: loading synth 1B F16, `tessera run -n 1`, 3.8-4.0 s with
// 1.2-1.5 s user time -> 1.8-2.6 s with 0.5-0.6 s); anything else element
// by element (an element's two bytes stay together).
template <bool Store>
void transfer_float(const tsr_tensor * t, char * plain, size_t offset, size_t size) {
    constexpr size_t es = 2;
    constexpr auto G = static_cast<size_t>(k_repack_float_rows);
    const auto K = static_cast<size_t>(t->ne[0]);
    const size_t row_bytes = K * es, group_bytes = G * row_bytes;
    char * packed = static_cast<char *>(t->data);
    size_t done = 0;
    while (done < size) {
        const size_t o = offset + done;
        const size_t row = o / row_bytes, k = o % row_bytes / es, byte = o % es;
        if (row % G == 0 && k == 0 && byte == 0 && size - done >= group_bytes) {
            char * grp = packed + row / G * group_bytes;
            char * src = plain + done;
            size_t kk = 0;
#ifdef __SSE2__
            if constexpr (Store) {
                static_assert(G == 16);
                for (; kk + 8 <= K; kk += 8) {
                    char * step = grp + kk * G * es;
                    transpose_8x8_u16(src + kk * es, row_bytes, step, G * es);
                    transpose_8x8_u16(src + 8 * row_bytes + kk * es, row_bytes, step + 8 * es, G * es);
                }
            }
#endif
            for (; kk < K; ++kk) {
                char * step = grp + kk * G * es;
                for (size_t r = 0; r < G; ++r) {
                    if constexpr (Store) {
                        std::memcpy(step + r * es, src + r * row_bytes + kk * es, es);
                    } else {
                        std::memcpy(src + r * row_bytes + kk * es, step + r * es, es);
                    }
                }
            }
            done += group_bytes;
            continue;
        }
        char * at = packed + ((row / G * K + k) * G + row % G) * es + byte;
        const size_t n = std::min(es - byte, size - done);
        if constexpr (Store) {
            std::memcpy(at, plain + done, n);
        } else {
            std::memcpy(plain + done, at, n);
        }
        done += n;
    }
}

// The unit of a quantized block holding byte i (repack.hpp): it starts at
// byte u0 of the block and is `size` bytes long; in the layout, unit u0 of
// row r of a group of G rows lies at G * u0 + size * r.
struct block_unit {
    size_t u0, size;
};

block_unit unit_of(int32_t type, size_t i) {
    switch (type) {
    case TSR_TYPE_Q4_K:
    case TSR_TYPE_Q5_K:
        if (i < 4) return {i & ~size_t{1}, 2};    // d, dmin
        if (i < 16) return {i, 1};                // scale bytes
        return {16 + ((i - 16) & ~size_t{3}), 4}; // qs steps (Q5_K: qh steps at 16..47, then qs)
    case TSR_TYPE_Q6_K:
        if (i < 192) return {i & ~size_t{3}, 4}; // ql and qh steps
        if (i < 208) return {i, 1};              // scales
        return {208, 2};                         // d
    case TSR_TYPE_Q5_0:
        if (i < 2) return {0, 2};               // d
        if (i < 6) return {2, 4};               // qh
        return {6 + ((i - 6) & ~size_t{3}), 4}; // quant steps
    case TSR_TYPE_Q5_1:
        if (i < 4) return {i & ~size_t{1}, 2};  // d, m
        if (i < 8) return {4, 4};               // qh
        return {8 + ((i - 8) & ~size_t{3}), 4}; // quant steps
    default:                                     // Q8_0, Q4_0
        if (i < 2) return {0, 2};                // d
        return {2 + ((i - 2) & ~size_t{3}), 4};  // quant steps
    }
}

// Where unit u0 of super-block b goes inside its group's super-block, in
// units of G bytes (the unit of row r at G * unit_pos + size * r): u0
// itself, except for Q6_K, whose units are in the order its kernels first
// read them, with d last in even super-blocks and first in odd ones
// (repack.hpp).
size_t unit_pos(int32_t type, size_t u0, size_t b) {
    if (type != TSR_TYPE_Q6_K) return u0;
    const size_t odd = b % 2;
    if (u0 >= 208) return odd ? 0 : 208; // d
    size_t pos = 0;
    if (u0 < 128) { // ql step j: half j / 16; triple s = j % 8 of the half
        pos = q6_k_ql_pos(u0 / 4);
    } else if (u0 < 192) { // qh step i: the middle of triple i % 8 of half i / 8
        pos = q6_k_qh_pos((u0 - 128) / 4);
    } else { // scale k: the first 8 units of half k / 8
        pos = q6_k_scale_pos(u0 - 192);
    }
    return pos + 2 * odd;
}

// Copies between the original image (plain, offset-relative) and the
// interleaved data of a quantized matrix, `size` bytes from original byte
// `offset`, unit by unit; whole groups take a loop without divisions.
template <bool Store>
void transfer_blocks(const tsr_tensor * t, char * plain, size_t offset, size_t size) {
    const size_t bb = block_bytes_of(t->type);
    const auto G = static_cast<size_t>(repack_group_rows(t->type));
    const size_t nblk = static_cast<size_t>(t->ne[0]) / (is_k_layout(t->type) ? 256 : k_qk);
    const size_t row_bytes = nblk * bb, group_block = G * bb, group_bytes = nblk * group_block;
    char * packed = static_cast<char *>(t->data);
    auto copy = [](char * at_packed, char * at_plain, size_t n) {
        if constexpr (Store) {
            std::memcpy(at_packed, at_plain, n);
        } else {
            std::memcpy(at_plain, at_packed, n);
        }
    };
    // Whole groups: each block's units (start, size, and where they go in
    // even and odd blocks) worked out once rather than per unit and row.
    // units[s] holds the units of s bytes (s = 1, 2, 4), so each copy loop
    // has a constant size.
    struct unit_copy {
        uint16_t u0, at[2]; // at[b % 2] = G * unit_pos (bytes; < 210 * 16)
    };
    std::vector<unit_copy> units[5];
    for (size_t u = 0; u < bb;) {
        const block_unit k = unit_of(t->type, u);
        units[k.size].push_back({static_cast<uint16_t>(k.u0),
                                 {static_cast<uint16_t>(G * unit_pos(t->type, k.u0, 0)), static_cast<uint16_t>(G * unit_pos(t->type, k.u0, 1))}});
        u += k.size;
    }
    auto copy_units = [&](char * blk, char * orig, size_t r, size_t odd, auto size_c) {
        constexpr size_t n = decltype(size_c)::value;
        for (const unit_copy & k : units[n]) copy(blk + k.at[odd] + n * r, orig + k.u0, n);
    };
    size_t row = offset / row_bytes, b = offset % row_bytes / bb, i = offset % bb;
    size_t done = 0;
    while (done < size) {
        if (row % G == 0 && b == 0 && i == 0 && size - done >= group_bytes) {
            char * grp = packed + row / G * group_bytes;
            for (size_t bk = 0; bk < nblk; ++bk) {
                char * blk = grp + bk * group_block;
                for (size_t r = 0; r < G; ++r) {
                    char * orig = plain + done + r * row_bytes + bk * bb;
                    copy_units(blk, orig, r, bk % 2, std::integral_constant<size_t, 4>{});
                    copy_units(blk, orig, r, bk % 2, std::integral_constant<size_t, 2>{});
                    copy_units(blk, orig, r, bk % 2, std::integral_constant<size_t, 1>{});
                }
            }
            done += group_bytes;
            row += G;
            continue;
        }
        const block_unit k = unit_of(t->type, i);
        char * blk = packed + (row / G * nblk + b) * group_block;
        const size_t n = std::min(k.u0 + k.size - i, size - done);
        copy(blk + G * unit_pos(t->type, k.u0, b) + k.size * (row % G) + (i - k.u0), plain + done, n);
        done += n;
        i += n;
        if (i == bb) {
            i = 0;
            if (++b == nblk) {
                b = 0;
                ++row;
            }
        }
    }
}

template <bool Store>
void transfer(const tsr_tensor * t, char * plain, size_t offset, size_t size) {
    if (is_float_layout(t->type)) {
        transfer_float<Store>(t, plain, offset, size);
    } else {
        transfer_blocks<Store>(t, plain, offset, size);
    }
}

} // namespace

const void * repack_tag() { return &k_repack_tag; }

int64_t repack_group_rows(int32_t type) {
#ifdef TSR_CPU_VNNI512
    // One 512-bit step of all 16 rows for the one-token kernel (group_rows in
    // mul_mat_repack.cpp; keep the two in step).
    if (type == TSR_TYPE_Q4_0) return 2 * k_repack_rows;
#endif
    if (type == TSR_TYPE_Q4_0 || type == TSR_TYPE_Q5_0 || type == TSR_TYPE_Q5_1 || type == TSR_TYPE_Q8_0) return k_repack_rows;
#ifdef TSR_CPU_AVX2
    if (is_float_layout(type)) return k_repack_float_rows;
    if (is_k_layout(type)) {
#ifdef TSR_CPU_AVX512
        return 16; // one row per int32 lane (k_lanes.hpp)
#else
        // AVX2 builds keep Q6_K plain: its 8-row groups streamed slower
        // than the plain rows (haswell build on Zen 4, 1B Q6_K tg64, 1
        // thread: 17.3-18.0 against 23.1-23.6 t/s; 4096 x 4096 one token:
        // 15 against 18-21 GB/s), where Q4_K's and Q5_K's gain.
        return type == TSR_TYPE_Q6_K ? 0 : 8;
#endif
    }
#endif
    return 0;
}

bool repack_type_supported(int32_t type) {
    return repack_group_rows(type) != 0;
}

bool repack_eligible(const tsr_tensor * t) {
    if (t == nullptr || t->view_src != nullptr || !repack_type_supported(t->type)) return false;
    const int64_t rows = repack_group_rows(t->type);
    if (t->ne[1] < 1 || t->ne[1] % rows != 0 || t->ne[2] != 1 || t->ne[3] != 1 || t->ne[0] < 1) return false;
    if (is_float_layout(t->type)) { // 2-byte elements, packed rows
        return t->nb[0] == 2 && t->nb[1] == 2 * static_cast<uint64_t>(t->ne[0]);
    }
    const size_t bb = block_bytes_of(t->type), qk = is_k_layout(t->type) ? 256 : k_qk;
    if (t->ne[0] % static_cast<int64_t>(qk) != 0) return false;
    return t->nb[0] == bb && t->nb[1] == bb * static_cast<uint64_t>(t->ne[0]) / qk;
}

bool is_repacked(const tsr_tensor * t) {
    return t != nullptr && t->extra == &k_repack_tag && t->buffer != nullptr && t->buffer->buft != nullptr &&
           t->buffer->buft->context == &k_repack_tag;
}

bool reads_repacked(const tsr_tensor * t) {
    if (t == nullptr) return false;
    return is_repacked(t) || (t->view_src != nullptr && is_repacked(t->view_src));
}

bool repacked_sources_ok(const tsr_tensor * node) {
    if (node == nullptr) return true;
    if (reads_repacked(node)) return false;
    for (int i = 0; i < TSR_MAX_SRC; ++i) {
        const tsr_tensor * s = node->src[i];
        if (s == nullptr || !reads_repacked(s)) continue;
        if (!(node->op == TSR_OP_MUL_MAT && i == 0 && is_repacked(s))) return false;
    }
    return true;
}

void repack_store(const tsr_tensor * t, const void * src, size_t offset, size_t size) {
    transfer<true>(t, static_cast<char *>(const_cast<void *>(src)), offset, size);
}

void repack_load(const tsr_tensor * t, void * dst, size_t offset, size_t size) {
    transfer<false>(t, static_cast<char *>(dst), offset, size);
}

} // namespace tessera::cpu

// backends/cpu/ops/repack.cpp — the interleaved weight layout (repack.hpp):
// marking, eligibility, and copying between the original byte image and
// the interleaved data.
#include "backends/cpu/ops/repack.hpp"

#include <algorithm>
#include <cstring>

#include "backends/cpu/ops/simd.hpp"
#include "tessera/backend.h"

namespace tessera::cpu {

extern const char k_repack_tag = 0;

namespace {

constexpr size_t k_qk = 32; // elements per Q8_0/Q4_0 block

size_t block_bytes_of(int32_t type) {
    switch (type) {
    case TSR_TYPE_Q8_0: return 34;
    case TSR_TYPE_Q4_0: return 18;
    default: return 0;
    }
}

// Copies between the original image (plain, offset-relative) and the
// interleaved data, `size` bytes from original byte `offset`. The original
// block's bytes fall into units that stay contiguous in the interleaved
// layout: the 2-byte scale and the 4-byte quant groups (steps).
template <bool Store>
void transfer(const tsr_tensor * t, char * plain, size_t offset, size_t size) {
    const size_t bb = block_bytes_of(t->type);
    const size_t nblk = static_cast<size_t>(t->ne[0]) / k_qk;
    const size_t row_bytes = nblk * bb;
    const size_t group_block = static_cast<size_t>(k_repack_rows) * bb;
    char * packed = static_cast<char *>(t->data);
    const size_t group_bytes = nblk * group_block;
    const size_t steps = (bb - 2) / 4;
    size_t row = offset / row_bytes;
    size_t b = offset % row_bytes / bb;
    size_t i = offset % bb;
    size_t done = 0;
    while (done < size) {
        // Whole groups of 8 rows: a tight loop without divisions.
        if (row % k_repack_rows == 0 && b == 0 && i == 0 && size - done >= group_bytes) {
            char * dst = packed + row / k_repack_rows * group_bytes;
            char * src = plain + done;
            for (size_t bk = 0; bk < nblk; ++bk) {
                char * blk = dst + bk * group_block;
                for (size_t r = 0; r < static_cast<size_t>(k_repack_rows); ++r) {
                    char * orig = src + r * row_bytes + bk * bb;
                    if constexpr (Store) {
                        std::memcpy(blk + 2 * r, orig, 2);
                        for (size_t j = 0; j < steps; ++j) std::memcpy(blk + 16 + 32 * j + 4 * r, orig + 2 + 4 * j, 4);
                    } else {
                        std::memcpy(orig, blk + 2 * r, 2);
                        for (size_t j = 0; j < steps; ++j) std::memcpy(orig + 2 + 4 * j, blk + 16 + 32 * j + 4 * r, 4);
                    }
                }
            }
            done += group_bytes;
            row += k_repack_rows;
            continue;
        }
        const size_t g = row / k_repack_rows, r = row % k_repack_rows;
        char * blk = packed + (g * nblk + b) * group_block;
        size_t at, unit_end;
        if (i < 2) {
            at = 2 * r + i;
            unit_end = 2;
        } else {
            const size_t j = (i - 2) / 4;
            at = 16 + 32 * j + 4 * r + (i - 2) % 4;
            unit_end = 2 + 4 * (j + 1);
        }
        const size_t n = std::min(unit_end - i, size - done);
        if constexpr (Store) {
            std::memcpy(blk + at, plain + done, n);
        } else {
            std::memcpy(plain + done, blk + at, n);
        }
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

} // namespace

const void * repack_tag() { return &k_repack_tag; }

bool repack_type_supported(int32_t type) {
    return type == TSR_TYPE_Q4_0 || type == TSR_TYPE_Q8_0;
}

bool repack_eligible(const tsr_tensor * t) {
    if (t == nullptr || t->view_src != nullptr || !repack_type_supported(t->type)) return false;
    const size_t bb = block_bytes_of(t->type);
    if (bb == 0) return false;
    if (t->ne[0] < 1 || t->ne[0] % static_cast<int64_t>(k_qk) != 0) return false;
    if (t->ne[1] < 1 || t->ne[1] % k_repack_rows != 0 || t->ne[2] != 1 || t->ne[3] != 1) return false;
    return t->nb[0] == bb && t->nb[1] == bb * static_cast<uint64_t>(t->ne[0]) / k_qk;
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

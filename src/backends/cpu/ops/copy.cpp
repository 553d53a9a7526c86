// backends/cpu/ops/copy.cpp — CPY (copy with type conversion between
// tensors of equal element count, in logical order) and CONT (packed copy).
//   CPY:  node is a view of b (ne/nb of b); src[0] = a, src[1] = b.
//         Same type: bytes are copied unit by unit (element, or block for
//         block types), bit-exact. Different types: a's elements are read as
//         F32 (to_float) and written with b's from_float (round to nearest
//         even for F16/BF16, the core's reference quantizers for Q8_0/Q4_0).
//   CONT: node is a new packed tensor of a's type and shape; src[0] = a.
// Element k of the destination (logical, row-major over ne[0..3]) receives
// element k of the source. Block types must be row-contiguous. Rows of the
// destination are split between threads.
#include <algorithm>
#include <cstring>

#include "backends/cpu/ops/ops.hpp"
#include "backends/cpu/ops/tensor_access.hpp"

namespace tessera::cpu {

namespace {

// Walks a tensor's units (elements, or blocks of a block type) in logical
// order starting at a given linear unit index.
class unit_cursor {
public:
    unit_cursor(const tsr_tensor * t, int64_t units_per_row, int64_t first)
        : t_(t), per_row_(units_per_row), i0_(first % units_per_row), row_(first / units_per_row) {
        row_start_ = row_ptr(t_, unravel_row(t_, row_));
    }
    // Units left in the current row.
    int64_t left_in_row() const { return per_row_ - i0_; }
    int64_t i0() const { return i0_; }
    const char * unit_ptr(int64_t k) const { return row_start_ + static_cast<size_t>(i0_ + k) * t_->nb[0]; }
    void advance(int64_t n) {
        i0_ += n;
        if (i0_ == per_row_ && row_ + 1 < count_rows(t_)) {
            i0_ = 0;
            ++row_;
            row_start_ = row_ptr(t_, unravel_row(t_, row_));
        }
    }

private:
    const tsr_tensor * t_;
    int64_t per_row_;
    int64_t i0_;
    int64_t row_;
    const char * row_start_;
};

bool rows_ok_for(const tsr_tensor * t) {
    const type_traits & tr = get_type_traits(t->type);
    return tr.block_size == 1 || t->nb[0] == tr.type_size;
}

// Same-type copy, bit-exact: dst unit k = src unit k.
void copy_units(const compute_params & p, const tsr_tensor * src, tsr_tensor * dst) {
    const type_traits & tr = get_type_traits(dst->type);
    const size_t unit = tr.type_size;
    const int64_t dst_units = dst->ne[0] / tr.block_size;
    const int64_t src_units = src->ne[0] / tr.block_size;
    const bool packed = src->nb[0] == unit && dst->nb[0] == unit;

    const item_range rows = split_items(count_rows(dst), p.ith, p.nth);
    for (int64_t r = rows.begin; r < rows.end; ++r) {
        char * d = row_ptr(dst, unravel_row(dst, r));
        unit_cursor s(src, src_units, r * dst_units);
        for (int64_t done = 0; done < dst_units;) {
            const int64_t run = std::min(dst_units - done, s.left_in_row());
            if (run <= 0) break; // source exhausted: cannot happen for equal element counts
            if (packed) {
                std::memcpy(d + static_cast<size_t>(done) * unit, s.unit_ptr(0), static_cast<size_t>(run) * unit);
            } else {
                for (int64_t k = 0; k < run; ++k) {
                    std::memcpy(d + static_cast<size_t>(done + k) * dst->nb[0], s.unit_ptr(k), unit);
                }
            }
            done += run;
            s.advance(run);
        }
    }
}

// Scratch layout of the converting copy.
struct convert_scratch {
    float * row;       // one destination row as F32
    char * row_q;      // its bytes in a block type
    char * block;      // one source block, aligned
    float * block_f32; // that block decoded
};

convert_scratch carve(void * wdata, const tsr_tensor * src, const tsr_tensor * dst) {
    char * base = static_cast<char *>(wdata);
    convert_scratch s{};
    s.row = reinterpret_cast<float *>(base);
    base += align64(static_cast<size_t>(dst->ne[0]) * sizeof(float));
    if (!is_float_type(dst->type)) {
        s.row_q = base;
        base += align64(row_size(static_cast<type>(dst->type), dst->ne[0]));
    }
    if (!is_float_type(src->type)) {
        const type_traits & tr = get_type_traits(src->type);
        s.block = base;
        base += align64(tr.type_size);
        s.block_f32 = reinterpret_cast<float *>(base);
    }
    return s;
}

// Converting copy through F32.
void copy_convert(const compute_params & p, const tsr_tensor * src, tsr_tensor * dst) {
    const int64_t ne0 = dst->ne[0];
    const bool src_blocks = !is_float_type(src->type);
    const type_traits & str = get_type_traits(src->type);
    const type_traits & dtr = get_type_traits(dst->type);
    const int64_t sbs = str.block_size;
    const convert_scratch sc = carve(p.wdata, src, dst);

    const item_range rows = split_items(count_rows(dst), p.ith, p.nth);
    for (int64_t r = rows.begin; r < rows.end; ++r) {
        // Gather ne0 source elements (logical order) as F32.
        const int64_t first = r * ne0;
        if (src_blocks) {
            // Cursor over blocks; the row may start inside a block only if
            // ne0 is not a multiple of the source block size.
            unit_cursor s(src, src->ne[0] / sbs, first / sbs);
            int64_t offset = first % sbs;
            for (int64_t done = 0; done < ne0;) {
                std::memcpy(sc.block, s.unit_ptr(0), str.type_size);
                str.to_float(sc.block, sc.block_f32, sbs);
                const int64_t take = std::min(ne0 - done, sbs - offset);
                std::memcpy(sc.row + done, sc.block_f32 + offset, static_cast<size_t>(take) * sizeof(float));
                done += take;
                offset = 0;
                s.advance(1);
            }
        } else {
            unit_cursor s(src, src->ne[0], first);
            for (int64_t done = 0; done < ne0;) {
                const int64_t run = std::min(ne0 - done, s.left_in_row());
                if (run <= 0) break; // source exhausted: cannot happen for equal element counts
                for (int64_t k = 0; k < run; ++k) sc.row[done + k] = load_as_f32(src->type, s.unit_ptr(k));
                done += run;
                s.advance(run);
            }
        }
        // Store the row.
        char * d = row_ptr(dst, unravel_row(dst, r));
        if (is_float_type(dst->type)) {
            for (int64_t i = 0; i < ne0; ++i) store_from_f32(dst->type, d + static_cast<size_t>(i) * dst->nb[0], sc.row[i]);
        } else {
            dtr.from_float(sc.row, sc.row_q, ne0);
            std::memcpy(d, sc.row_q, row_size(static_cast<type>(dst->type), ne0));
        }
    }
}

} // namespace

bool cpy_supported(const tsr_tensor * node) {
    const tsr_tensor * a = node->src[0];
    const tsr_tensor * b = node->src[1];
    if (node->type != b->type) return false;
    if (count_elements(a) != count_elements(node)) return false;
    if (!rows_ok_for(a) || !rows_ok_for(node)) return false;
    if (a->type == node->type) return true;
    return get_type_traits(a->type).to_float != nullptr && get_type_traits(node->type).from_float != nullptr;
}

size_t cpy_work_size(const tsr_tensor * node) {
    const tsr_tensor * a = node->src[0];
    if (a->type == node->type) return 0;
    size_t bytes = align64(static_cast<size_t>(node->ne[0]) * sizeof(float));
    if (!is_float_type(node->type)) bytes += align64(row_size(static_cast<type>(node->type), node->ne[0]));
    if (!is_float_type(a->type)) {
        const type_traits & tr = get_type_traits(a->type);
        bytes += align64(tr.type_size) + align64(static_cast<size_t>(tr.block_size) * sizeof(float));
    }
    return bytes;
}

bool compute_cpy(const compute_params & p, tsr_tensor * node) {
    const tsr_tensor * a = node->src[0];
    if (a->type == node->type) {
        copy_units(p, a, node);
    } else {
        copy_convert(p, a, node);
    }
    return true;
}

bool cont_supported(const tsr_tensor * node) {
    const tsr_tensor * a = node->src[0];
    if (node->type != a->type || !rows_ok_for(a) || !rows_ok_for(node)) return false;
    for (int i = 0; i < TSR_MAX_DIMS; ++i) {
        if (node->ne[i] != a->ne[i]) return false;
    }
    return true;
}

bool compute_cont(const compute_params & p, tsr_tensor * node) {
    copy_units(p, node->src[0], node);
    return true;
}

} // namespace tessera::cpu

// backends/cpu/ops/argmax.cpp — ARGMAX: index of the largest value of each
// row. a: F32 [n, rows, A2, A3] any strides; dst: I32 with one element per
// row of a (row r = i1 + ne1 * (i2 + ne2 * i3) at dst element r). The lowest
// index wins ties; NaN entries are never selected (a row of NaNs gives 0).
#include <cstring>

#include "backends/cpu/ops/ops.hpp"
#include "backends/cpu/ops/tensor_access.hpp"

namespace tessera::cpu {

bool argmax_supported(const tsr_tensor * node) {
    const tsr_tensor * a = node->src[0];
    if (node->type != TSR_TYPE_I32 || a->type != TSR_TYPE_F32) return false;
    return node->ne[0] == count_rows(a) && node->ne[1] == 1 && node->ne[2] == 1 && node->ne[3] == 1;
}

bool compute_argmax(const compute_params & p, tsr_tensor * dst) {
    const tsr_tensor * a = dst->src[0];
    const int64_t n = a->ne[0];
    const item_range rows = split_items(count_rows(a), p.ith, p.nth);
    for (int64_t r = rows.begin; r < rows.end; ++r) {
        const char * x = row_ptr(a, unravel_row(a, r));
        int64_t best = 0;
        float best_v = 0.0f;
        bool found = false;
        for (int64_t i = 0; i < n; ++i) {
            const float v = read_f32(x + static_cast<size_t>(i) * a->nb[0]);
            if (v == v && (!found || v > best_v)) { // v == v: not NaN
                best = i;
                best_v = v;
                found = true;
            }
        }
        const auto out = static_cast<int32_t>(best);
        std::memcpy(static_cast<char *>(dst->data) + static_cast<size_t>(r) * dst->nb[0], &out, sizeof out);
    }
    return true;
}

} // namespace tessera::cpu

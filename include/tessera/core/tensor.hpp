// tessera/core/tensor.hpp — tensor metadata helpers and the context (an
// arena that owns tensor structs and, optionally, their data).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "tessera/tensor.h"
#include "tessera/core/types.hpp"

namespace tessera {

using tensor = tsr_tensor;

// Element count (product of ne).
int64_t nelements(const tensor * t);
// Rows = ne[1] * ne[2] * ne[3].
int64_t nrows(const tensor * t);
// Bytes spanned by the tensor's data given its strides (for a packed
// tensor: row_size(type, ne[0]) * nrows).
size_t nbytes(const tensor * t);
// True when the data is packed in the natural order (no gaps, no permutation).
bool is_contiguous(const tensor * t);
// True when each row (dimension 0) is packed: nb[0] == type_size (block size 1)
// or the row consists of consecutive blocks.
bool is_row_contiguous(const tensor * t);
bool same_shape(const tensor * a, const tensor * b);
// "[4096,32,1,1]" style rendering of ne, for messages.
std::string shape_str(const tensor * t);
// Reads/writes an op parameter slot (floats are bit-cast into int32 slots).
float op_param_f32(const tensor * t, int i);
void set_op_param_f32(tensor * t, int i, float v);

// An arena of tensor structs. With `alloc_data`, every tensor created here
// (leafs and op results alike, but not views) gets host memory of nbytes(),
// aligned to 64 bytes and zero-filled, owned by the context; otherwise data
// stays null until a graph allocator or a buffer assigns it.
// Not thread-safe; tensors live as long as the context.
class context {
public:
    struct params {
        size_t max_tensors = 8192; // creating more throws tessera::error
        bool alloc_data = false;
    };
    explicit context(params p);
    context() : context(params{}) {}
    ~context();
    context(const context &) = delete;
    context & operator=(const context &) = delete;

    // A new leaf tensor (op NONE) of `type` with 1..4 dimensions `ne`.
    // Throws tessera::error when a dimension is < 1, ne[0] is not a multiple
    // of the block size, or the byte size overflows.
    tensor * new_tensor(type t, std::span<const int64_t> ne);
    tensor * new_tensor(type t, std::initializer_list<int64_t> ne) {
        return new_tensor(t, std::span<const int64_t>(ne.begin(), ne.size()));
    }
    // A new tensor with the type and shape of `like` (packed strides).
    // Throws tessera::error when `like` is null.
    tensor * new_tensor_like(const tensor * like);

    // Like new_tensor (same checks, packed strides) but never allocates data,
    // even in alloc_data mode: data stays null. The view builders in ops.hpp
    // use it and then set view_src, view_offs, nb and data themselves.
    tensor * new_tensor_no_data(type t, std::span<const int64_t> ne);

    // Sets the tensor's name (truncated to TSR_MAX_NAME-1 bytes); returns t.
    // Throws tessera::error when t is null.
    static tensor * set_name(tensor * t, std::string_view name);
    // First tensor with this exact name, or null.
    tensor * find(std::string_view name) const;

    bool alloc_data() const;
    size_t n_tensors() const;
    tensor * tensor_at(size_t i) const;

private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

} // namespace tessera

// core/tensor.cpp — tensor metadata helpers and the context arena.
#include "tessera/core/tensor.hpp"

#include <algorithm>
#include <cstring>
#include <deque>
#include <new>
#include <vector>

#include <fmt/format.h>

#include "tessera/core/error.hpp"

namespace tessera {

int64_t nelements(const tensor * t) {
    return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
}

int64_t nrows(const tensor * t) {
    return t->ne[1] * t->ne[2] * t->ne[3];
}

size_t nbytes(const tensor * t) {
    for (int i = 0; i < TSR_MAX_DIMS; ++i) {
        if (t->ne[i] <= 0) return 0;
    }
    const type_traits & tr = get_type_traits(t->type);
    // First row (dimension 0) spans ne[0] / block_size blocks of nb[0] bytes
    // when blocked, ne[0] elements of nb[0] stride otherwise; every further
    // dimension adds (ne[i] - 1) strides.
    size_t bytes = tr.block_size == 1
                       ? tr.type_size + static_cast<size_t>(t->ne[0] - 1) * t->nb[0]
                       : static_cast<size_t>(t->ne[0] / tr.block_size) * t->nb[0];
    for (int i = 1; i < TSR_MAX_DIMS; ++i) {
        bytes += static_cast<size_t>(t->ne[i] - 1) * t->nb[i];
    }
    return bytes;
}

bool is_contiguous(const tensor * t) {
    const type_traits & tr = get_type_traits(t->type);
    // Dimensions of extent 1 never move the address, so their stride is free.
    if (t->ne[0] > tr.block_size && t->nb[0] != tr.type_size) return false;
    uint64_t expected = static_cast<uint64_t>(t->ne[0] / tr.block_size) * tr.type_size;
    for (int i = 1; i < TSR_MAX_DIMS; ++i) {
        if (t->ne[i] != 1 && t->nb[i] != expected) return false;
        expected *= static_cast<uint64_t>(t->ne[i]);
    }
    return true;
}

bool is_row_contiguous(const tensor * t) {
    const type_traits & tr = get_type_traits(t->type);
    if (t->ne[0] % tr.block_size != 0) return false; // e.g. a transposed quantized tensor
    // A row of a single element or block has no internal stride.
    return t->ne[0] == tr.block_size || t->nb[0] == tr.type_size;
}

bool same_shape(const tensor * a, const tensor * b) {
    for (int i = 0; i < TSR_MAX_DIMS; ++i) {
        if (a->ne[i] != b->ne[i]) return false;
    }
    return true;
}

std::string shape_str(const tensor * t) {
    return fmt::format("[{},{},{},{}]", t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
}

namespace {
void check_param_slot(int i) {
    if (i < 0 || i >= TSR_MAX_OP_PARAMS) {
        throw error(fmt::format("op param slot {} out of range 0..{}", i, TSR_MAX_OP_PARAMS - 1));
    }
}
} // namespace

float op_param_f32(const tensor * t, int i) {
    check_param_slot(i);
    float v;
    std::memcpy(&v, &t->op_params[i], sizeof v);
    return v;
}

void set_op_param_f32(tensor * t, int i, float v) {
    check_param_slot(i);
    std::memcpy(&t->op_params[i], &v, sizeof v);
}

// --- context -----------------------------------------------------------------

namespace {

constexpr size_t k_data_align = 64;

struct aligned_free {
    void operator()(void * p) const { ::operator delete(p, std::align_val_t(k_data_align)); }
};

} // namespace

struct context::impl {
    params p;
    std::deque<tensor> tensors; // deque: stable addresses while growing
    std::vector<std::unique_ptr<void, aligned_free>> data;
};

context::context(params p) : impl_(std::make_unique<impl>()) {
    impl_->p = p;
}

context::~context() = default;

namespace {

// Validates type and shape and fills ne/nb (packed) with checked arithmetic.
// Returns the packed byte size.
size_t init_packed(tensor & t, type ty, std::span<const int64_t> ne) {
    const type_traits & tr = get_type_traits(ty); // throws for an unknown id
    if (ne.empty() || ne.size() > TSR_MAX_DIMS) {
        throw error(fmt::format("new_tensor: {} dimensions given, expected 1..{}", ne.size(),
                                TSR_MAX_DIMS));
    }
    t.type = ty;
    t.op = TSR_OP_NONE;
    int64_t n_total = 1;
    for (size_t i = 0; i < TSR_MAX_DIMS; ++i) {
        const int64_t v = i < ne.size() ? ne[i] : 1;
        if (v < 1) {
            throw error(fmt::format("new_tensor: ne[{}] = {} must be >= 1 (type {})", i, v, tr.name));
        }
        if (__builtin_mul_overflow(n_total, v, &n_total)) {
            throw error(fmt::format("new_tensor: element count of a {} tensor overflows int64 at ne[{}]",
                                    tr.name, i));
        }
        t.ne[i] = v;
    }
    if (t.ne[0] % tr.block_size != 0) {
        throw error(fmt::format("new_tensor: ne[0] = {} is not a multiple of the {} block size {}",
                                t.ne[0], tr.name, tr.block_size));
    }
    t.nb[0] = tr.type_size;
    uint64_t stride = 0;
    bool overflow = __builtin_mul_overflow(static_cast<uint64_t>(t.ne[0] / tr.block_size),
                                           static_cast<uint64_t>(tr.type_size), &stride);
    for (int i = 1; i < TSR_MAX_DIMS && !overflow; ++i) {
        t.nb[i] = stride;
        overflow = __builtin_mul_overflow(stride, static_cast<uint64_t>(t.ne[i]), &stride);
    }
    // Keep sizes addressable with signed offsets as well.
    if (overflow || stride > static_cast<uint64_t>(INT64_MAX)) {
        throw error(fmt::format("new_tensor: byte size of {} tensor [{},{},{},{}] overflows", tr.name,
                                t.ne[0], t.ne[1], t.ne[2], t.ne[3]));
    }
    return static_cast<size_t>(stride);
}

} // namespace

tensor * context::new_tensor_no_data(type t, std::span<const int64_t> ne) {
    if (impl_->tensors.size() >= impl_->p.max_tensors) {
        throw error(fmt::format("context: cannot create more than {} tensors (max_tensors)",
                                impl_->p.max_tensors));
    }
    tensor tmp{};
    init_packed(tmp, t, ne);
    impl_->tensors.push_back(tmp);
    return &impl_->tensors.back();
}

tensor * context::new_tensor(type t, std::span<const int64_t> ne) {
    if (impl_->tensors.size() >= impl_->p.max_tensors) {
        throw error(fmt::format("context: cannot create more than {} tensors (max_tensors)",
                                impl_->p.max_tensors));
    }
    tensor tmp{};
    const size_t bytes = init_packed(tmp, t, ne);
    if (impl_->p.alloc_data) {
        // Round up to the alignment so vectorized kernels may touch a whole
        // last cache line; checked against overflow by the INT64_MAX bound.
        const size_t alloc = (bytes + k_data_align - 1) / k_data_align * k_data_align;
        void * mem = nullptr;
        try {
            mem = ::operator new(alloc, std::align_val_t(k_data_align));
        } catch (const std::bad_alloc &) {
            throw error(fmt::format("context: cannot allocate {} bytes for a {} tensor {}", bytes,
                                    type_name(t), shape_str(&tmp)));
        }
        std::unique_ptr<void, aligned_free> owned(mem);
        std::memset(mem, 0, alloc);
        impl_->data.push_back(std::move(owned));
        tmp.data = mem;
    }
    impl_->tensors.push_back(tmp);
    return &impl_->tensors.back();
}

tensor * context::new_tensor_like(const tensor * like) {
    if (like == nullptr) throw error("new_tensor_like: the tensor to copy the type and shape of is null");
    return new_tensor(static_cast<type>(like->type), std::span<const int64_t>(like->ne, TSR_MAX_DIMS));
}

tensor * context::set_name(tensor * t, std::string_view name) {
    if (t == nullptr) throw error(fmt::format("set_name('{}'): the tensor is null", name));
    const size_t n = std::min(name.size(), static_cast<size_t>(TSR_MAX_NAME - 1));
    std::memcpy(t->name, name.data(), n);
    t->name[n] = '\0';
    return t;
}

tensor * context::find(std::string_view name) const {
    for (tensor & t : impl_->tensors) {
        if (name == t.name) return &t;
    }
    return nullptr;
}

bool context::alloc_data() const {
    return impl_->p.alloc_data;
}

size_t context::n_tensors() const {
    return impl_->tensors.size();
}

tensor * context::tensor_at(size_t i) const {
    if (i >= impl_->tensors.size()) {
        throw error(fmt::format("context: tensor index {} out of range (n_tensors = {})", i,
                                impl_->tensors.size()));
    }
    return &impl_->tensors[i];
}

} // namespace tessera

// llm/weight_repack.cpp — see weight_repack.hpp.
#include "weight_repack.hpp"

#include <string_view>
#include <vector>

#include "tessera/backend/buffer_type.hpp"
#include "tessera/core/error.hpp"

namespace tessera::llm {

buffer_type find_repack_buffer_type(const device & dev) {
    buffer_type buft;
    for (const buffer_type & bt : dev.extra_buffer_types()) {
        if (std::string_view(bt.name()) == k_repack_buffer_type_name) buft = bt;
    }
    return buft;
}

buffer place_repacked_weights(const std::vector<tensor *> & weights, const device & dev,
                              const std::function<void(const void *, size_t)> & release) {
    const buffer_type buft = find_repack_buffer_type(dev);
    if (!buft) return {};
    std::vector<tensor *> chosen;
    for (tensor * t : weights) chosen.push_back(t);
    if (chosen.empty()) return {};
    const size_t align = buft.alignment();
    std::vector<size_t> offs;
    size_t total = 0;
    for (const tensor * t : chosen) {
        total = (total + align - 1) / align * align;
        offs.push_back(total);
        total += buft.alloc_size(t);
    }
    buffer buf = buft.alloc(total);
    buf.set_usage(TSR_BUFFER_USAGE_WEIGHTS);
    for (size_t i = 0; i < chosen.size(); ++i) {
        tensor * t = chosen[i];
        const void * src = t->data; // the mapped file bytes
        t->buffer = nullptr;
        buf.place(t, offs[i]);
        tensor_set(t, src, 0, nbytes(t));
        if (release) release(src, nbytes(t));
    }
    return buf;
}


} // namespace tessera::llm

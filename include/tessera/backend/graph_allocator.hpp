// tessera/backend/graph_allocator.hpp — places a graph's intermediate
// tensors in one compute buffer, reusing memory of tensors no longer needed.
#pragma once

#include <cstddef>

#include "tessera/backend/buffer.hpp"
#include "tessera/backend/buffer_type.hpp"
#include "tessera/core/graph.hpp"

namespace tessera {

// Which tensors get memory: every node or leaf of the graph that has no
// data, is not a view and is not a weight (TSR_FLAG_PARAM). Views get
// data = view_src->data + view_offs once their source has data (views in
// the graph only: a view outside it keeps its data pointer). A tensor's
// memory is reused once every node reading it (directly or through views)
// has run, except tensors flagged TSR_FLAG_OUTPUT (for a view: its source)
// and tensors no node reads (the graph's results), which keep theirs. Placement is best-fit in a free
// list, each tensor taking buft.alloc_size(t) bytes rounded up to the
// buffer type's alignment.
//
// Typical use: reserve() once with the worst-case graph (largest batch),
// then allocate() every graph before computing it. Data pointers stay valid
// until the next allocate/reserve. One thread at a time.
class graph_allocator {
public:
    explicit graph_allocator(buffer_type buft);

    // Measures `g` and makes the buffer at least that large. Leaves the
    // graph's tensors untouched. Throws tessera::error as allocate does.
    void reserve(graph & g);

    // Assigns data (and buffer) to every tensor of `g` that needs it,
    // growing the buffer when `g` needs more than it has (all data placed
    // earlier is then invalid). Returns true when the buffer was
    // (re)allocated. Throws tessera::error naming the tensor when a weight
    // (TSR_FLAG_PARAM) or a view's source has no data, and naming the buffer
    // type when the buffer cannot be allocated or exceeds its max_size.
    bool allocate(graph & g);

    // Peak bytes the last measured graph needed.
    size_t peak_size() const { return peak_; }
    // Current buffer size in bytes (0 before the first reserve/allocate).
    size_t buffer_size() const { return buf_ ? buf_.size() : 0; }
    buffer & get_buffer() { return buf_; }
    const buffer_type & type() const { return buft_; }

private:
    buffer_type buft_;
    buffer buf_;
    size_t peak_ = 0;
};

} // namespace tessera

// backend/graph_allocator.cpp — memory planning for a graph's intermediate
// tensors in one buffer (graph_allocator.hpp).
//
// The plan is a simulation over offsets: tensors are placed in node order
// with a best-fit free list and released when their last reader has run.
// Reference counting follows the usual liveness scheme for dataflow graphs:
// a tensor stays alive while it has unrun consumers (n_children) or live
// views aliasing its memory (n_views).
#include "tessera/backend/graph_allocator.hpp"

#include <algorithm>
#include <unordered_map>
#include <vector>

#include <fmt/core.h>

#include "backend/abi.hpp"
#include "backend/plugin_call.hpp"
#include "tessera/core/error.hpp"

namespace tessera {

namespace {

const char * tname(const tsr_tensor * t) { return t->name[0] ? t->name : "(unnamed)"; }

size_t align_up(size_t n, size_t align) {
    size_t r = 0;
    if (__builtin_add_overflow(n, align - 1, &r)) throw error("graph_allocator: size overflow");
    return r / align * align;
}

// Offsets in an unbounded arena: free blocks lie below `top_`, everything
// from top_ up is free. Sizes are multiples of the alignment.
class arena {
public:
    size_t alloc(size_t size) {
        // Best fit among the free blocks.
        size_t best = free_.size();
        for (size_t i = 0; i < free_.size(); ++i) {
            if (free_[i].size >= size && (best == free_.size() || free_[i].size < free_[best].size)) {
                best = i;
            }
        }
        if (best < free_.size()) {
            const size_t off = free_[best].offset;
            free_[best].offset += size;
            free_[best].size -= size;
            if (free_[best].size == 0) free_.erase(free_.begin() + ptrdiff_t(best));
            return off;
        }
        // Grow at the top, starting inside a free block that touches it.
        size_t off = top_;
        if (!free_.empty() && free_.back().offset + free_.back().size == top_) {
            off = free_.back().offset;
            free_.pop_back();
        }
        if (__builtin_add_overflow(off, size, &top_)) throw error("graph_allocator: size overflow");
        peak_ = std::max(peak_, top_);
        return off;
    }

    void free(size_t offset, size_t size) {
        auto it = free_.begin();
        while (it != free_.end() && it->offset < offset) ++it;
        it = free_.insert(it, {offset, size});
        // Merge with the next block, then with the previous one.
        if (it + 1 != free_.end() && it->offset + it->size == (it + 1)->offset) {
            it->size += (it + 1)->size;
            free_.erase(it + 1);
        }
        if (it != free_.begin() && (it - 1)->offset + (it - 1)->size == it->offset) {
            (it - 1)->size += it->size;
            it = free_.erase(it) - 1;
        }
        // A block reaching the top lowers the top.
        if (it->offset + it->size == top_) {
            top_ = it->offset;
            free_.erase(it);
        }
    }

    size_t peak() const { return peak_; }

private:
    struct block {
        size_t offset, size;
    };
    std::vector<block> free_; // sorted by offset, never adjacent
    size_t top_ = 0;
    size_t peak_ = 0;
};

struct tensor_state {
    int n_children = 0; // nodes reading it that have not run yet
    int n_views = 0;    // live views aliasing its memory
    bool allocated = false;
    bool released = false;
    size_t offset = 0;
    size_t size = 0;
};

// Where every tensor goes, for one graph.
struct placement {
    std::vector<std::pair<tsr_tensor *, size_t>> tensors; // tensor, offset
    std::vector<tsr_tensor *> views;                      // in node order
    size_t peak = 0;
};

placement plan(graph & g, const buffer_type & buft, const tsr_buffer * own) {
    const size_t align = buft.alignment();
    std::unordered_map<const tsr_tensor *, tensor_state> st;
    arena mem;
    placement out;

    // Tensors this allocator places: no view, no weight, and no data yet
    // (or data it placed itself in an earlier allocate).
    auto needs_alloc = [&](const tsr_tensor * t) {
        if (t->view_src != nullptr) return false;
        if (t->flags & TSR_FLAG_PARAM) {
            if (t->data == nullptr) {
                throw error(fmt::format("graph_allocator: weight '{}' has no data (load the "
                                        "weights before allocating the graph)",
                                        tname(t)));
            }
            return false;
        }
        return t->data == nullptr || (own != nullptr && t->buffer == own);
    };
    auto place = [&](tsr_tensor * t) {
        tensor_state & s = st[t];
        if (s.allocated) return;
        s.size = align_up(buft.alloc_size(t), align);
        s.offset = mem.alloc(s.size);
        s.allocated = true;
        out.tensors.emplace_back(t, s.offset);
    };
    // Whether t will have data when the graph runs.
    auto has_data = [&](const tsr_tensor * t) {
        auto it = st.find(t);
        return (it != st.end() && it->second.allocated) ||
               (t->data != nullptr && !(own != nullptr && t->buffer == own));
    };
    // Called when t has no unrun readers left. An output keeps its memory
    // (a view flagged OUTPUT keeps its source's).
    auto release = [&](auto & self, const tsr_tensor * t) -> void {
        tensor_state & s = st[t];
        if (s.n_children != 0 || s.n_views != 0 || s.released) return;
        if (t->flags & TSR_FLAG_OUTPUT) return;
        s.released = true;
        if (t->view_src != nullptr) {
            tensor_state & v = st[t->view_src];
            if (--v.n_views == 0) self(self, t->view_src);
        } else if (s.allocated) {
            mem.free(s.offset, s.size);
        }
    };

    for (tsr_tensor * n : g.nodes()) {
        for (tsr_tensor * s : n->src) {
            if (s != nullptr) ++st[s].n_children;
        }
        if (n->view_src != nullptr) ++st[n->view_src].n_views;
    }
    // Every leaf first: inputs are written before compute, so no node may
    // share their memory while they are still to be read.
    for (tsr_tensor * l : g.leafs()) {
        if (needs_alloc(l)) place(l);
    }
    for (tsr_tensor * n : g.nodes()) {
        if (n->view_src != nullptr) {
            if (!has_data(n->view_src)) {
                throw error(fmt::format("graph_allocator: view '{}' aliases '{}', which has no "
                                        "data and is not in the graph",
                                        tname(n), tname(n->view_src)));
            }
            out.views.push_back(n);
        } else if (needs_alloc(n)) {
            place(n);
        }
        for (tsr_tensor * s : n->src) {
            if (s == nullptr) continue;
            if (!has_data(s) && s->view_src == nullptr) {
                throw error(fmt::format("graph_allocator: '{}' (a source of '{}') has no data "
                                        "and is not in the graph",
                                        tname(s), tname(n)));
            }
            tensor_state & ss = st[s];
            if (--ss.n_children == 0) release(release, s);
        }
    }
    out.peak = mem.peak();
    return out;
}

} // namespace

graph_allocator::graph_allocator(buffer_type buft) : buft_(std::move(buft)) {
    if (!buft_) throw error("graph_allocator: empty buffer type");
}

static void ensure_size(buffer & buf, const buffer_type & buft, size_t need) {
    if (need == 0 || (buf && buf.size() >= need)) return;
    if (need > buft.max_size()) {
        throw error(fmt::format("graph_allocator: the graph needs {} bytes but buffer type '{}' "
                                "allows at most {} in one buffer",
                                need, buft.name(), buft.max_size()));
    }
    buf.reset(); // free first: the old contents are not kept
    buf = buft.alloc(need);
    buf.set_usage(TSR_BUFFER_USAGE_COMPUTE);
}

void graph_allocator::reserve(graph & g) {
    const placement p = plan(g, buft_, buf_.get());
    peak_ = p.peak;
    ensure_size(buf_, buft_, p.peak);
}

bool graph_allocator::allocate(graph & g) {
    const placement p = plan(g, buft_, buf_.get());
    peak_ = p.peak;
    const tsr_buffer * before = buf_.get();
    const size_t size_before = buffer_size();
    ensure_size(buf_, buft_, p.peak);
    const bool grown = buf_.get() != before || buffer_size() != size_before;
    for (const auto & [t, offset] : p.tensors) buf_.place(t, offset);
    for (tsr_tensor * v : p.views) {
        tsr_tensor * src = v->view_src;
        v->data = static_cast<char *>(src->data) + v->view_offs;
        v->buffer = src->buffer;
        tsr_buffer * b = v->buffer;
        if (b == nullptr) continue;
        if (auto init = TSR_OPT_SLOT(tsr_buffer_i, b->iface, init_tensor)) {
            if (detail::guarded({nullptr, b}, "init_tensor", [&] { return init(b, v); }) != TSR_STATUS_SUCCESS) {
                throw error(fmt::format("graph_allocator: the buffer could not initialize view "
                                        "'{}'",
                                        tname(v)));
            }
        }
    }
    return grown;
}

} // namespace tessera

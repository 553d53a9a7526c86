// core/graph.cpp — forward graph construction (depth-first post-order).
#include "tessera/core/graph.hpp"

#include <algorithm>
#include <climits>
#include <unordered_set>

#include <fmt/format.h>

#include "tessera/core/error.hpp"
#include "tessera/core/ops.hpp"

namespace tessera {

graph::graph(size_t max_nodes) : max_nodes_(max_nodes) {
    if (max_nodes > static_cast<size_t>(INT32_MAX)) {
        throw error(fmt::format("graph: max_nodes = {} exceeds the C view's limit {}", max_nodes, INT32_MAX));
    }
}

namespace {
std::string describe(const tensor * t) {
    return fmt::format("{} '{}' {}", op_name(t->op), t->name, shape_str(t));
}
} // namespace

void graph::build_forward(tensor * out) {
    if (out == nullptr) throw error("graph: build_forward called with a null tensor");

    const size_t n_nodes0 = nodes_.size();
    const size_t n_leafs0 = leafs_.size();
    // visited_ (sorted) holds what earlier calls added; this call's visits go
    // to a hash set and are merged into visited_ at the end (O(n log n), where
    // inserting into the sorted vector one by one would be quadratic).
    std::unordered_set<const tensor *> added;
    std::unordered_set<const tensor *> in_progress; // on the DFS stack: for cycle detection

    auto is_visited = [&](const tensor * t) {
        return added.count(t) != 0 || std::binary_search(visited_.begin(), visited_.end(), t);
    };
    auto mark = [&](const tensor * t) { added.insert(t); };

    // Explicit stack (deep graphs must not overflow the call stack). Each
    // frame walks its dependencies: src[0..TSR_MAX_SRC-1], then view_src.
    struct frame {
        tensor * t;
        int next;
    };
    std::vector<frame> stack;

    try {
        if (!is_visited(out)) {
            mark(out);
            in_progress.insert(out);
            stack.push_back({out, 0});
        }
        while (!stack.empty()) {
            tensor * dep = nullptr;
            {
                frame & f = stack.back();
                while (dep == nullptr && f.next <= TSR_MAX_SRC) {
                    const int k = f.next++;
                    tensor * cand = k < TSR_MAX_SRC ? f.t->src[k] : f.t->view_src;
                    if (cand == nullptr) continue;
                    if (in_progress.count(cand) != 0) {
                        throw error(fmt::format("graph: cycle through {} (a source of {})", describe(cand),
                                                describe(f.t)));
                    }
                    if (!is_visited(cand)) dep = cand;
                }
            }
            if (dep != nullptr) {
                mark(dep);
                in_progress.insert(dep);
                stack.push_back({dep, 0});
                continue;
            }
            tensor * t = stack.back().t;
            stack.pop_back();
            in_progress.erase(t);
            std::vector<tensor *> & list = t->op == TSR_OP_NONE ? leafs_ : nodes_;
            if (list.size() >= max_nodes_) {
                throw error(fmt::format("graph: more than {} {} (max_nodes) while adding {}; raise max_nodes",
                                        max_nodes_, t->op == TSR_OP_NONE ? "leafs" : "nodes", describe(t)));
            }
            list.push_back(t);
        }
    } catch (...) {
        // Leave the graph as it was before this call (visited_ is untouched).
        nodes_.resize(n_nodes0);
        leafs_.resize(n_leafs0);
        throw;
    }
    const auto mid = static_cast<std::ptrdiff_t>(visited_.size());
    visited_.insert(visited_.end(), added.begin(), added.end());
    std::sort(visited_.begin() + mid, visited_.end());
    std::inplace_merge(visited_.begin(), visited_.begin() + mid, visited_.end());
}

tsr_graph_view graph::view() {
    tsr_graph_view v{};
    v.n_nodes = static_cast<int32_t>(nodes_.size());
    v.nodes = nodes_.data();
    v.n_leafs = static_cast<int32_t>(leafs_.size());
    v.leafs = leafs_.data();
    return v;
}

} // namespace tessera

// tessera/core/graph.hpp — a forward computation graph.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "tessera/core/tensor.hpp"

namespace tessera {

// Nodes (tensors with an op, views included) in topological order: every
// node's sources come before it or are leafs (tensors with op NONE).
class graph {
public:
    // At most max_nodes nodes and max_nodes leafs; exceeding it throws
    // tessera::error("graph: more than N nodes ...").
    explicit graph(size_t max_nodes = 8192);

    // Adds `out` and everything it depends on that is not already in the
    // graph (depth-first, sources in order). May be called several times.
    void build_forward(tensor * out);

    std::span<tensor * const> nodes() const { return nodes_; }
    std::span<tensor * const> leafs() const { return leafs_; }
    size_t max_nodes() const { return max_nodes_; }
    // The C view passed to backends (valid while the graph is unchanged).
    tsr_graph_view view();

private:
    size_t max_nodes_;
    std::vector<tensor *> nodes_;
    std::vector<tensor *> leafs_;
    std::vector<const tensor *> visited_; // sorted, for lookup
};

} // namespace tessera

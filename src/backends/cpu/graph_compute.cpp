// backends/cpu/graph_compute.cpp — the node walk run on the thread pool.
#include "backends/cpu/graph_compute.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <new>
#include <vector>

#include "backends/cpu/compute.hpp"

namespace tessera::cpu {

namespace {

// True when `node` can be handed to compute_forward.
bool node_ready(const tsr_tensor * node) {
    if (!supports_op(node) || node->data == nullptr) return false;
    for (const tsr_tensor * s : node->src) {
        if (s != nullptr && s->data == nullptr) return false;
    }
    return true;
}

// State shared by the threads of one graph run.
struct graph_run {
    std::vector<tsr_tensor *> nodes; // the nodes that compute something
    thread_pool * pool = nullptr;
    int n_threads = 1;
    tsr_abort_callback cb = nullptr;
    void * cb_data = nullptr;
    std::atomic<bool> failed{false}; // set by any thread on a data error
    // Written by thread 0 between arrivals and release (thread_pool::sync),
    // read by every thread after the release.
    bool stop = false;
    bool aborted = false;
};

// Runs on thread 0 while the others wait at the barrier before a node.
void decide(void * ctx) {
    auto * run = static_cast<graph_run *>(ctx);
    if (run->failed.load(std::memory_order_relaxed)) {
        run->stop = true;
        return;
    }
    if (run->cb == nullptr) return;
    bool abort_now = true;
    try {
        abort_now = run->cb(run->cb_data);
    } catch (...) {
        run->failed.store(true, std::memory_order_relaxed); // a throwing callback is a failure, not a crash
    }
    if (abort_now) {
        run->stop = true;
        run->aborted = !run->failed.load(std::memory_order_relaxed);
    }
}

void walk_nodes(int ith, void * ctx) {
    auto * run = static_cast<graph_run *>(ctx);
    compute_params p;
    p.ith = ith;
    p.nth = run->n_threads;
    p.wdata = run->pool->scratch(ith);
    p.wsize = run->pool->scratch_size(ith);
    for (tsr_tensor * node : run->nodes) {
        run->pool->sync(ith, decide, run);
        if (run->stop) break;
        if (!compute_forward(p, node)) run->failed.store(true, std::memory_order_relaxed);
    }
}

tsr_status compute_graph(thread_pool & pool, const tsr_graph_view & g, int n_threads, tsr_abort_callback cb,
                         void * cb_data) {
    if (g.n_nodes < 0 || (g.n_nodes > 0 && g.nodes == nullptr)) return TSR_STATUS_FAILED;
    graph_run run;
    size_t work = 0;
    try {
        run.nodes.reserve(static_cast<size_t>(g.n_nodes));
        for (int32_t i = 0; i < g.n_nodes; ++i) {
            tsr_tensor * node = g.nodes[i];
            if (node == nullptr) return TSR_STATUS_FAILED;
            if (op_is_noop(node->op)) continue;
            if (!node_ready(node)) return TSR_STATUS_FAILED;
            work = std::max(work, node_work_size(node));
            run.nodes.push_back(node);
        }
    } catch (const std::bad_alloc &) {
        return TSR_STATUS_ALLOC_FAILED;
    }
    if (run.nodes.empty()) return TSR_STATUS_SUCCESS;

    run.pool = &pool;
    run.n_threads = std::clamp(n_threads, 1, pool.size());
    run.cb = cb;
    run.cb_data = cb_data;
    try {
        pool.run(run.n_threads, work, walk_nodes, &run);
    } catch (const std::bad_alloc &) {
        return TSR_STATUS_ALLOC_FAILED;
    }
    if (run.failed.load(std::memory_order_relaxed)) return TSR_STATUS_FAILED;
    if (run.aborted) return TSR_STATUS_ABORTED;
    return TSR_STATUS_SUCCESS;
}

} // namespace

tsr_status graph_compute(thread_pool & pool, const tsr_graph_view & g, int n_threads, tsr_abort_callback cb,
                         void * cb_data) {
    try {
        return compute_graph(pool, g, n_threads, cb, cb_data);
    } catch (...) {
        return TSR_STATUS_FAILED; // nothing is expected to throw here; never let it cross the C ABI
    }
}

tsr_status graph_compute(const tsr_graph_view & g, int n_threads, tsr_abort_callback cb, void * cb_data) {
    try {
        thread_pool pool(std::clamp(n_threads, 1, thread_pool::max_threads));
        return graph_compute(pool, g, n_threads, cb, cb_data);
    } catch (const std::exception &) {
        return TSR_STATUS_FAILED;
    }
}

} // namespace tessera::cpu

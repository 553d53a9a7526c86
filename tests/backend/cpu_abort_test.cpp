// Aborting a CPU graph compute through the registry: an abort callback that
// fires after N nodes, with 1..8 threads, many times, under a watchdog.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>

#include "backend/test_support.hpp"
#include "backend/watchdog.hpp"
#include "tessera/backend/cpu.hpp"
#include "tessera/core/ops.hpp"

namespace tessera::test {
namespace {

constexpr int chain = 24;  // nodes in the graph
constexpr int64_t n = 4099; // elements per node (odd: uneven thread splits)

struct abort_after {
    std::atomic<int> calls{0};
    int limit = 0;
    static bool callback(void * self) {
        auto * a = static_cast<abort_after *>(self);
        return a->calls.fetch_add(1) + 1 > a->limit;
    }
};

// x -> scale(x, 2) -> scale(., 2) -> ... : node i holds x * 2^(i+1).
struct chain_graph {
    context ctx{context::params{chain + 4, true}};
    tsr_tensor * x;
    std::vector<tsr_tensor *> nodes;
    graph g;
    chain_graph() {
        x = ctx.new_tensor(TSR_TYPE_F32, {n});
        tsr_tensor * cur = x;
        for (int i = 0; i < chain; ++i) nodes.push_back(cur = scale(ctx, cur, 2.0f));
        g.build_forward(cur);
        float * xd = static_cast<float *>(x->data);
        for (int64_t i = 0; i < n; ++i) xd[i] = float(i % 7) - 3.0f;
    }
    void clear() {
        for (auto * t : nodes) std::memset(t->data, 0, size_t(n) * 4);
    }
    // Node i computed: element k equals x[k] * 2^(i+1) exactly.
    bool computed(int i) const {
        const float * d = static_cast<const float *>(nodes[size_t(i)]->data);
        const float * xd = static_cast<const float *>(x->data);
        for (int64_t k = 0; k < n; ++k) {
            if (d[k] != std::ldexp(xd[k], i + 1)) return false;
        }
        return true;
    }
    bool untouched(int i) const {
        const float * d = static_cast<const float *>(nodes[size_t(i)]->data);
        for (int64_t k = 0; k < n; ++k) {
            if (d[k] != 0.0f) return false;
        }
        return true;
    }
};

void run_abort_matrix(backend & be) {
    chain_graph cg;
    for (int threads = 1; threads <= 8; ++threads) {
        be.set_n_threads(threads);
        for (int limit : {0, 1, 2, 7, chain - 1, chain, chain + 5}) {
            for (int rep = 0; rep < 6; ++rep) {
                SCOPED_TRACE(testing::Message() << threads << " threads, abort after " << limit);
                cg.clear();
                abort_after a;
                a.limit = limit;
                be.set_abort_callback(&abort_after::callback, &a);
                const tsr_status st = be.graph_compute(cg.g);
                const int done = std::min(limit, chain);
                ASSERT_EQ(st, limit < chain ? TSR_STATUS_ABORTED : TSR_STATUS_SUCCESS);
                ASSERT_EQ(a.calls.load(), std::min(limit + 1, chain));
                for (int i = 0; i < chain; ++i) {
                    if (i < done) {
                        ASSERT_TRUE(cg.computed(i)) << "node " << i;
                    } else {
                        ASSERT_TRUE(cg.untouched(i)) << "node " << i;
                    }
                }
            }
        }
    }
    // The pool is reusable after aborts, and the callback can be removed.
    be.set_abort_callback(nullptr, nullptr);
    cg.clear();
    ASSERT_EQ(be.graph_compute(cg.g), TSR_STATUS_SUCCESS);
    EXPECT_TRUE(cg.computed(chain - 1));
}

TEST(CpuAbort, CompiledInAfterNNodesWithOneToEightThreads) {
    watchdog wd(std::chrono::seconds(300), "CpuAbort.CompiledIn");
    registry reg;
    reg.register_backend(cpu::backend_reg());
    backend be = reg.init_by_type(TSR_DEVICE_TYPE_CPU);
    run_abort_matrix(be);
}

TEST(CpuAbort, LoadedVariantAfterNNodesWithOneToEightThreads) {
    watchdog wd(std::chrono::seconds(300), "CpuAbort.LoadedVariant");
    registry reg;
    if (!reg.load_best("cpu", fs::path(TESSERA_BINARY_DIR)).loaded) {
        GTEST_SKIP() << "no CPU plugins (TESSERA_CPU_STATIC build)";
    }
    backend be = reg.init_by_type(TSR_DEVICE_TYPE_CPU);
    run_abort_matrix(be);
}

} // namespace
} // namespace tessera::test

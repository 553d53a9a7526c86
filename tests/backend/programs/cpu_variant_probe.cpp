// tests/backend/programs/cpu_variant_probe.cpp — loads the best CPU variant
// plugin from $TESSERA_PROBE_PLUGIN_DIR, prints "VARIANT=<name>" and checks
// the small graph (F16, Q8_0 and Q4_0 weights; 1 and 2 threads) against its
// double reference. Run under `qemu-x86_64 -cpu <model>` by
// cpu_qemu_test.cpp to check variant selection on other processors.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "backend/cpu_graph.hpp"

namespace tessera::test {
namespace {

TEST(CpuVariantProbe, BestVariantComputes) {
    const char * dir = std::getenv("TESSERA_PROBE_PLUGIN_DIR");
    ASSERT_NE(dir, nullptr) << "set TESSERA_PROBE_PLUGIN_DIR";
    registry reg;
    load_report rep = reg.load_best("cpu", dir);
    ASSERT_TRUE(rep.loaded) << "no CPU plugin in " << dir;
    for (const auto & [k, v] : rep.loaded.features()) {
        if (k == "VARIANT") std::printf("VARIANT=%s\n", v.c_str());
    }
    std::fflush(stdout);
    device d = *reg.find_device("CPU");
    for (tsr_type wt : {TSR_TYPE_F16, TSR_TYPE_Q8_0, TSR_TYPE_Q4_0}) {
        for (int n_threads : {1, 2}) {
            SCOPED_TRACE(testing::Message() << "type " << wt << ", " << n_threads << " threads");
            small_graph sg(uint32_t(7 * wt + n_threads), wt);
            buffer weights = sg.wrap_weights(d);
            backend be = d.init("n_threads=" + std::to_string(n_threads));
            graph_allocator alloc(d.default_buffer_type());
            sg.run_and_check(be, alloc);
        }
    }
}

} // namespace
} // namespace tessera::test

// tests/backend/registry_shim/graph_compute_via_registry.cpp — runs the CPU
// op tests (tests/backends/cpu/test_ops_*.cpp) through the registry: this
// file defines the one-off tessera::cpu::graph_compute they call as a
// compute on a CPU variant plugin loaded by the registry (the best one, or
// libtessera-cpu-$TESSERA_TEST_CPU_VARIANT.so), so every op test exercises
// the variant's kernels, compiled with its instruction-set flags, behind
// the C tables. Built only with the variant plugins (not TESSERA_CPU_STATIC).
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "backends/cpu/graph_compute.hpp"
#include "tessera/backend/registry.hpp"
#include "tessera/core/error.hpp"

namespace tessera::cpu {

namespace {

struct loaded_cpu {
    registry reg; // declared first: destroyed after the backend
    backend be;
    loaded_cpu() {
        const std::filesystem::path dir(TESSERA_BINARY_DIR);
        const char * want = std::getenv("TESSERA_TEST_CPU_VARIANT");
        backend_reg r = want && *want ? reg.load(dir / (std::string("libtessera-cpu-") + want + ".so"))
                                      : reg.load_best("cpu", dir).loaded;
        if (!r) throw error("no CPU plugin found in " + dir.string());
        for (const auto & [k, v] : r.features()) {
            if (k == "VARIANT") std::fprintf(stderr, "[ registry ] CPU ops run on variant %s\n", v.c_str());
        }
        be = r.devices().at(0).init();
    }
};

} // namespace

tsr_status graph_compute(const tsr_graph_view & g, int n_threads, tsr_abort_callback cb, void * cb_data) {
    static loaded_cpu cpu;
    static std::mutex mu; // the op tests are single-threaded; be safe anyway
    std::lock_guard lk(mu);
    cpu.be.set_n_threads(n_threads < 1 ? 1 : n_threads);
    cpu.be.set_abort_callback(cb, cb_data);
    return cpu.be.graph_compute(g);
}

} // namespace tessera::cpu

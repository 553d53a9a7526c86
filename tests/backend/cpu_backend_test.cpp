// The CPU backend through the registry: compiled in and as loaded variant
// plugins; device properties; zero-copy weights; 1 and 2 threads; plans;
// extension functions; supports_op/supports_buft; graph errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "backend/cpu_graph.hpp"
#include "backends/cpu/ops/mul_mat_impl.hpp"
#include "backends/cpu/ops/mul_mat_repack.hpp"
#include "backend/test_support.hpp"
#include "backends/cpu/features.hpp"
#include "backends/cpu/ops/tuning.hpp"
#include "tessera/backend/cpu.hpp"

namespace tessera::test {
namespace {

// /proc/cpuinfo read here, separately from the backend.
std::string cpuinfo_field(const std::string & key) {
    std::ifstream f("/proc/cpuinfo");
    std::string line;
    while (std::getline(f, line)) {
        if (line.rfind(key, 0) == 0) {
            const size_t c = line.find(':');
            std::string v = line.substr(c + 1);
            v.erase(0, v.find_first_not_of(" \t"));
            return v;
        }
    }
    return "";
}

std::set<std::string> cpuinfo_flags() {
    std::istringstream ss(cpuinfo_field("flags"));
    std::set<std::string> out;
    for (std::string w; ss >> w;) out.insert(w);
    return out;
}

class CpuCompiledIn : public ::testing::Test {
protected:
    void SetUp() override { cpu = reg.register_backend(cpu::backend_reg()); }
    registry reg;
    backend_reg cpu;
};

TEST_F(CpuCompiledIn, DeviceProperties) {
    EXPECT_STREQ(cpu.name(), "cpu");
    ASSERT_EQ(reg.device_count(), 1u);
    device d = reg.device_at(0);
    const device_props p = d.props();
    EXPECT_STREQ(p.name, "CPU");
    EXPECT_EQ(p.type, TSR_DEVICE_TYPE_CPU);
    const std::string model = cpuinfo_field("model name");
    if (!model.empty()) EXPECT_EQ(std::string(p.description), model);
    const double total = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
    EXPECT_NEAR(double(p.memory_total), total, 0.05 * total);
    EXPECT_GT(p.memory_free, 0u);
    EXPECT_LE(p.memory_free, p.memory_total);
    EXPECT_FALSE(p.caps.async);
    EXPECT_FALSE(p.caps.events);
    EXPECT_FALSE(p.caps.host_buffer);
    EXPECT_TRUE(p.caps.buffer_from_host_ptr);
    EXPECT_STREQ(d.default_buffer_type().name(), "CPU");
    EXPECT_EQ(d.default_buffer_type().alignment(), 64u);
    EXPECT_TRUE(d.default_buffer_type().is_host());
    ASSERT_EQ(d.extra_buffer_types().size(), 1u); // issue 6: the repacked weight layout
    EXPECT_STREQ(d.extra_buffer_types()[0].name(), "CPU_REPACK");
    EXPECT_FALSE(d.extra_buffer_types()[0].is_host());
    EXPECT_TRUE(d.supports_buft(d.extra_buffer_types()[0]));
    EXPECT_EQ(feature(cpu, "THREAD_POOL"), "1");
    EXPECT_EQ(feature(cpu, "OPENMP"), "0");
    EXPECT_EQ(feature(cpu, "STREAM_PREFETCH"), std::to_string(tessera::cpu::tuning().stream_prefetch));
    EXPECT_EQ(feature(cpu, "STREAM_PREFETCH_L2"), tessera::cpu::tuning().stream_prefetch_l2 ? "1" : "0");
    EXPECT_EQ(feature(cpu, "STREAM_PREFETCH_L2_ABOVE"), std::to_string(tessera::cpu::tuning().stream_prefetch_l2_above));
    EXPECT_EQ(feature(cpu, "AMX_GEMM"), tessera::cpu::mul_mat_repack_uses_amx() ? "1" : "0");
    EXPECT_EQ(feature(cpu, "GEMM_F32_ROWS"), tessera::cpu::gemm_f32_rows_enabled() ? "1" : "0");
    // 1 where the advice is given: TESSERA_CPU_HUGE_PAGES (ctest runs this
    // test with it 0 too), else the default 1, on Linux.
    const char * huge_env = std::getenv("TESSERA_CPU_HUGE_PAGES");
#if defined(__linux__)
    EXPECT_EQ(feature(cpu, "HUGE_PAGES"), huge_env != nullptr && std::string(huge_env) == "0" ? "0" : "1");
#else
    EXPECT_EQ(feature(cpu, "HUGE_PAGES"), "0");
#endif
    char hex[16];
    std::snprintf(hex, sizeof hex, "0x%x", tessera::cpu::detect_cpu_model().family);
    EXPECT_EQ(feature(cpu, "CPU_FAMILY"), hex);
    std::snprintf(hex, sizeof hex, "0x%x", tessera::cpu::detect_cpu_model().model);
    EXPECT_EQ(feature(cpu, "CPU_MODEL"), hex);
    const std::string variant = feature(cpu, "VARIANT");
    if (variant == "x64") {
        EXPECT_EQ(feature(cpu, "AVX2"), "0"); // a baseline build uses no AVX2 code
    } else {
        EXPECT_EQ(variant, "native"); // TESSERA_CPU_STATIC: -march=native
        EXPECT_EQ(feature(cpu, "AVX2"), cpuinfo_flags().count("avx2") ? "1" : "0");
    }
}

TEST_F(CpuCompiledIn, SmallGraphWithZeroCopyWeightsOneAndTwoThreads) {
    device d = reg.device_at(0);
    for (int n_threads : {1, 2}) {
        SCOPED_TRACE(n_threads);
        small_graph sg(42 + n_threads);
        buffer weights = sg.wrap_weights(d);
        EXPECT_EQ(sg.w->data, sg.weights_mem.data()); // zero-copy
        EXPECT_STREQ(weights.type().name(), "CPU_Mapped");
        backend be = reg.init_by_type(TSR_DEVICE_TYPE_CPU);
        be.set_n_threads(n_threads);
        graph_allocator alloc(d.default_buffer_type());
        sg.run_and_check(be, alloc);
        EXPECT_GT(alloc.peak_size(), 0u);
    }
}

TEST_F(CpuCompiledIn, PlanComputesManyTimes) {
    device d = reg.device_at(0);
    small_graph sg(7);
    buffer weights = sg.wrap_weights(d);
    backend be = d.init("n_threads=2");
    graph_allocator alloc(d.default_buffer_type());
    alloc.allocate(sg.gr);
    ASSERT_TRUE(graph_plan::supported(be));
    graph_plan plan(be, sg.gr);
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    for (int iter = 0; iter < 4; ++iter) {
        for (auto & v : sg.x_vals) v = u(rng);
        tensor_set(sg.x, sg.x_vals.data(), 0, sg.x_vals.size() * 4);
        ASSERT_EQ(plan.compute(), TSR_STATUS_SUCCESS);
        sg.check();
    }
}

// The CPU plan keeps its graph analysis between computes and makes it
// again when the thread count or the presence of an abort callback changes:
// the results stay right, and the callback still runs before every node
// (as often as for the same graph computed without a plan).
TEST_F(CpuCompiledIn, PlanRemakesItsAnalysisForNewThreadCountsAndCallbacks) {
    device d = reg.device_at(0);
    small_graph sg(11);
    buffer weights = sg.wrap_weights(d);
    backend be = d.init("n_threads=2");
    graph_allocator alloc(d.default_buffer_type());
    alloc.allocate(sg.gr);
    graph_plan plan(be, sg.gr);
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    auto new_input = [&] {
        for (auto & v : sg.x_vals) v = u(rng);
        tensor_set(sg.x, sg.x_vals.data(), 0, sg.x_vals.size() * 4);
    };
    for (int n_threads : {2, 1, 3, 2}) {
        SCOPED_TRACE(n_threads);
        be.set_n_threads(n_threads);
        new_input();
        ASSERT_EQ(plan.compute(), TSR_STATUS_SUCCESS);
        sg.check();
    }
    struct counter {
        int calls = 0;
        int abort_at = 0; // abort on this call (0: never)
    } c;
    auto cb = [](void * data) {
        auto * k = static_cast<counter *>(data);
        return ++k->calls == k->abort_at;
    };
    be.set_abort_callback(cb, &c);
    new_input();
    ASSERT_EQ(be.graph_compute(sg.gr), TSR_STATUS_SUCCESS);
    sg.check();
    const int per_graph = c.calls;
    ASSERT_GT(per_graph, 1);
    c.calls = 0;
    new_input(); // (the allocator may place later nodes over the input's bytes)
    ASSERT_EQ(plan.compute(), TSR_STATUS_SUCCESS);
    EXPECT_EQ(c.calls, per_graph);
    sg.check();
    c.calls = 0;
    c.abort_at = 2;
    EXPECT_EQ(plan.compute(), TSR_STATUS_ABORTED);
    EXPECT_EQ(c.calls, 2);
    be.set_abort_callback(nullptr, nullptr);
    c.calls = 0;
    new_input();
    ASSERT_EQ(plan.compute(), TSR_STATUS_SUCCESS);
    EXPECT_EQ(c.calls, 0);
    sg.check();
}

TEST_F(CpuCompiledIn, SharedThreadPool) {
    device d = reg.device_at(0);
    small_graph sg(9);
    buffer weights = sg.wrap_weights(d);
    threadpool pool(cpu, 3);
    EXPECT_EQ(pool.n_threads(), 3);
    backend a = d.init(), b = d.init();
    a.set_threadpool(&pool);
    b.set_threadpool(&pool);
    graph_allocator alloc(d.default_buffer_type());
    pool.pause();
    sg.run_and_check(a, alloc); // a compute works on a paused pool
    pool.resume();
    sg.run_and_check(b, alloc);
    a.set_threadpool(nullptr);
    sg.run_and_check(a, alloc);
    EXPECT_EQ(error_of([&] { threadpool(cpu, 0); }),
              "backend 'cpu': thread pool needs at least 1 thread, not 0");
}

// An abort callback that computes on a backend sharing the pool: that
// compute returns FAILED (the pool is running the compute that called the
// callback; it waited for itself forever), the outer one goes on, and a
// backend with its own pool computes from the callback as usual. Both
// graphs' values are checked.
struct nested_compute {
    backend * other = nullptr;
    graph * g = nullptr;
    tsr_status inner = TSR_STATUS_SUCCESS;
    int calls = 0;
    static bool cb(void * p) {
        auto * n = static_cast<nested_compute *>(p);
        if (n->calls++ == 0) n->inner = n->other->graph_compute(*n->g);
        return false;
    }
};

TEST_F(CpuCompiledIn, AbortCallbackComputingOnTheSamePoolFailsInsteadOfHanging) {
    device d = reg.device_at(0);
    context ctx({16, true});
    tensor * x = ctx.new_tensor(TSR_TYPE_F32, {64, 4});
    tensor * y = ctx.new_tensor(TSR_TYPE_F32, {64, 4});
    for (int i = 0; i < 256; ++i) {
        static_cast<float *>(x->data)[i] = float(i);
        static_cast<float *>(y->data)[i] = float(-i);
    }
    tensor * xa = scale(ctx, scale(ctx, x, 2.0f), 2.0f);
    tensor * yb = scale(ctx, y, 3.0f);
    graph ga, gb;
    ga.build_forward(xa);
    gb.build_forward(yb);
    for (const bool shared : {true, false}) {
        SCOPED_TRACE(shared ? "shared pool" : "own pools");
        threadpool pool(cpu, 2);
        backend a = d.init("n_threads=2"), b = d.init("n_threads=2");
        if (shared) {
            a.set_threadpool(&pool);
            b.set_threadpool(&pool);
        }
        std::memset(xa->data, 0, nbytes(xa));
        std::memset(yb->data, 0, nbytes(yb));
        nested_compute n{&b, &gb};
        a.set_abort_callback(nested_compute::cb, &n);
        EXPECT_EQ(a.graph_compute(ga), TSR_STATUS_SUCCESS);
        EXPECT_GE(n.calls, 1);
        EXPECT_EQ(n.inner, shared ? TSR_STATUS_FAILED : TSR_STATUS_SUCCESS);
        for (int i = 0; i < 256; ++i) {
            ASSERT_EQ(static_cast<float *>(xa->data)[i], 4.0f * float(i)) << i;
            if (!shared) ASSERT_EQ(static_cast<float *>(yb->data)[i], -3.0f * float(i)) << i;
        }
        a.set_threadpool(nullptr);
        b.set_threadpool(nullptr);
    }
}

TEST_F(CpuCompiledIn, ParamsAndExtensionErrors) {
    device d = reg.device_at(0);
    EXPECT_TRUE(d.init("n_threads=3;"));
    EXPECT_EQ(error_of([&] { d.init("bogus=1"); }),
              "device 'CPU': could not create a backend (params 'bogus=1')");
    EXPECT_EQ(error_of([&] { d.init("n_threads=0"); }),
              "device 'CPU': could not create a backend (params 'n_threads=0')");
    EXPECT_EQ(error_of([&] { d.init("n_threads=2x"); }),
              "device 'CPU': could not create a backend (params 'n_threads=2x')");
    // A NUL would cut the C string the backend gets ("n_threads=2" was
    // accepted and the rest ignored).
    EXPECT_EQ(error_of([&] { d.init(std::string_view("n_threads=2\0x", 13)); }),
              "device 'CPU': the backend params contain a NUL byte (at 11)");
    backend be = d.init();
    EXPECT_TRUE(be.has_n_threads());
    EXPECT_TRUE(be.has_abort_callback());
    EXPECT_EQ(error_of([&] { be.set_n_threads(0); }),
              "backend 'CPU': invalid thread count 0 (at least 1, and no more than the backend allows)");
    EXPECT_EQ(error_of([&] { be.set_n_threads(100000); }),
              "backend 'CPU': invalid thread count 100000 (at least 1, and no more than the backend allows)");
}

TEST_F(CpuCompiledIn, SupportsOpIsTruthful) {
    device d = reg.device_at(0);
    context ctx{context::params{64, false}};
    tsr_tensor * a = ctx.new_tensor(TSR_TYPE_F32, {8, 4});
    tsr_tensor * w = ctx.new_tensor(TSR_TYPE_Q8_0, {32, 4});
    tsr_tensor * x = ctx.new_tensor(TSR_TYPE_F32, {32, 2});
    tsr_tensor * ok = mul_mat(ctx, w, x);
    EXPECT_TRUE(d.supports_op(ok));
    EXPECT_TRUE(d.supports_op(add(ctx, a, a)));
    EXPECT_FALSE(d.supports_op(nullptr));

    tsr_tensor bad = *ok; // an I32 result of MUL_MAT: no kernel for that
    bad.type = TSR_TYPE_I32;
    EXPECT_FALSE(d.supports_op(&bad));
    tsr_tensor no_src = *ok;
    no_src.src[1] = nullptr;
    EXPECT_FALSE(d.supports_op(&no_src));
    tsr_tensor bad_op = *ok;
    bad_op.op = TSR_OP_COUNT + 5;
    EXPECT_FALSE(d.supports_op(&bad_op));

    // A source living in a non-host buffer cannot be read by the CPU.
    static const tsr_buffer_type_i gpu_iface = {sizeof(tsr_buffer_type_i), nullptr, nullptr,
                                                nullptr, nullptr, nullptr, nullptr};
    tsr_buffer_type gpu_type{&gpu_iface, nullptr, nullptr};
    tsr_buffer gpu_buf{};
    gpu_buf.buft = &gpu_type;
    tsr_tensor remote = *x;
    remote.buffer = &gpu_buf;
    tsr_tensor uses_remote = *ok;
    uses_remote.src[1] = &remote;
    EXPECT_FALSE(d.supports_op(&uses_remote));
    EXPECT_FALSE(d.supports_buft(&gpu_type));
    EXPECT_TRUE(d.supports_buft(d.default_buffer_type()));
    char mem[256];
    buffer wrapped = d.buffer_from_host_ptr(mem, sizeof mem, sizeof mem);
    EXPECT_TRUE(d.supports_buft(wrapped.type()));
}

TEST_F(CpuCompiledIn, GraphWithoutDataFailsCleanly) {
    device d = reg.device_at(0);
    context ctx{context::params{64, false}};
    tsr_tensor * a = ctx.new_tensor(TSR_TYPE_F32, {8, 4});
    graph g;
    g.build_forward(scale(ctx, a, 2.0f));
    backend be = d.init();
    EXPECT_EQ(be.graph_compute(g), TSR_STATUS_FAILED); // no data anywhere
}

TEST_F(CpuCompiledIn, BufferOperations) {
    device d = reg.device_at(0);
    buffer b = d.default_buffer_type().alloc(1000);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.base()) % 64, 0u);
    b.clear(0xab);
    context ctx{context::params{16, false}};
    tsr_tensor * t = ctx.new_tensor(TSR_TYPE_F32, {10});
    context::set_name(t, "t");
    EXPECT_EQ(error_of([&] { b.place(t, 3); }),
              "buffer::place: offset 3 of tensor 't' is not a multiple of buffer type 'CPU' "
              "alignment 64");
    EXPECT_EQ(error_of([&] { b.place(t, 1024); }),
              "buffer::place: tensor 't' (40 bytes at offset 1024) does not fit in the 1000-byte "
              "buffer");
    b.place(t, 64);
    EXPECT_EQ(t->data, static_cast<char *>(b.base()) + 64);
    const float vals[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    tensor_set(t, vals, 0, sizeof vals);
    float back[3] = {};
    tensor_get(t, back, 8, 12);
    EXPECT_EQ(back[0], 3.0f);
    EXPECT_EQ(back[2], 5.0f);
    tensor_memset(t, 0, 0, 8);
    tensor_get(t, back, 0, 12);
    EXPECT_EQ(back[0], 0.0f);
    EXPECT_EQ(back[2], 3.0f);
    EXPECT_EQ(error_of([&] { tensor_get(t, back, 36, 8); }),
              "tensor_get: 8 bytes at offset 36 are outside tensor 't' (40 bytes)");
    tsr_tensor * u = context::set_name(ctx.new_tensor(TSR_TYPE_F32, {10}), "u");
    EXPECT_EQ(error_of([&] { tensor_set(u, vals, 0, 4); }),
              "tensor_set: tensor 'u' has no data (allocate it first)");
    b.place(u, 128);
    tensor_copy(t, u);
    float cp[10];
    tensor_get(u, cp, 0, sizeof cp);
    EXPECT_EQ(cp[9], 10.0f);
    EXPECT_EQ(cp[0], 0.0f);
}

// ---- loaded variants --------------------------------------------------------

fs::path plugin_dir() { return fs::path(TESSERA_BINARY_DIR); }

std::vector<fs::path> variant_files() {
    std::vector<fs::path> out;
    std::error_code ec;
    for (const auto & e : fs::directory_iterator(plugin_dir(), ec)) {
        const std::string n = e.path().filename().string();
        if (n.rfind("libtessera-cpu-", 0) == 0 && n.size() > 18 && n.ends_with(".so")) out.push_back(e.path());
    }
    std::sort(out.begin(), out.end());
    return out;
}

TEST(CpuPlugin, LoadBestPicksAVariantThatFitsAndComputes) {
    if (variant_files().empty()) GTEST_SKIP() << "no CPU plugins in " << plugin_dir() << " (TESSERA_CPU_STATIC build)";
    registry reg;
    log_capture log;
    log.attach(reg);
    load_report rep = reg.load_best("cpu", plugin_dir());
    ASSERT_TRUE(rep.loaded);
    EXPECT_EQ(log.all(), "");
    const std::string variant = feature(rep.loaded, "VARIANT");
    EXPECT_EQ(rep.loaded.path(), (plugin_dir() / ("libtessera-cpu-" + variant + ".so")).string());
    // Every other variant was closed again; none scored higher.
    for (const auto & c : rep.candidates) {
        if (c.path == rep.loaded.path()) continue;
        EXPECT_FALSE(is_loaded(c.path)) << c.path;
        EXPECT_LT(c.score, rep.loaded.score()) << c.path;
    }
    // The features it reports agree with the kernel's view of this processor.
    const auto flags = cpuinfo_flags();
    if (!flags.empty()) {
        if (feature(rep.loaded, "AVX2") == "1") EXPECT_TRUE(flags.count("avx2"));
        if (feature(rep.loaded, "AVX512") == "1") EXPECT_TRUE(flags.count("avx512f"));
        if (flags.count("avx2") && rep.loaded.score() >= 4) EXPECT_EQ(feature(rep.loaded, "AVX2"), "1");
    }
    device d = *reg.find_device("CPU");
    for (int n_threads : {1, 2}) {
        small_graph sg(100 + n_threads);
        buffer weights = sg.wrap_weights(d);
        backend be = reg.init_best("n_threads=" + std::to_string(n_threads));
        graph_allocator alloc(d.default_buffer_type());
        sg.run_and_check(be, alloc);
    }
}

TEST(CpuPlugin, ThreadPoolOfAnotherFamilyIsRefused) {
    if (variant_files().empty()) GTEST_SKIP() << "no CPU plugins (TESSERA_CPU_STATIC build)";
    registry compiled_in, loaded;
    backend_reg a = compiled_in.register_backend(cpu::backend_reg());
    backend_reg b = loaded.load_best("cpu", plugin_dir()).loaded;
    ASSERT_TRUE(b);
    threadpool pool(a, 2);
    backend be = b.devices().at(0).init();
    EXPECT_EQ(error_of([&] { be.set_threadpool(&pool); }),
              "backend 'CPU': the thread pool was made by another backend family (or is empty)");
    threadpool own(b, 2);
    be.set_threadpool(&own);
    be.set_threadpool(nullptr);
}

TEST(CpuPlugin, EveryVariantThatScoresComputesCorrectly) {
    const auto files = variant_files();
    if (files.empty()) GTEST_SKIP() << "no CPU plugins (TESSERA_CPU_STATIC build)";
    int runnable = 0;
    for (const auto & f : files) {
        SCOPED_TRACE(f.string());
        registry reg;
        reg.set_log(nullptr);
        backend_reg r;
        try {
            r = reg.load(f);
        } catch (const error & e) {
            // The only acceptable refusal: this processor lacks the variant's features.
            EXPECT_NE(std::string(e.what()).find("score 0: not supported on this system"), std::string::npos)
                << e.what();
            continue;
        }
        ++runnable;
        // The plugin's code uses exactly the features its score requires:
        // its -m flags (cpu.cmake) and the table (score.cpp) agree.
        const std::string variant = feature(r, "VARIANT");
        EXPECT_EQ(f.filename().string(), "libtessera-cpu-" + variant + ".so");
        uint32_t required = 0;
        ASSERT_TRUE(cpu::variant_requirements(variant.c_str(), &required)) << variant;
        for (const auto & [name, value] : r.features()) {
            for (int bit = 0; bit < 32; ++bit) {
                if (name == cpu::feature_name(1u << bit)) {
                    EXPECT_EQ(value, (required >> bit) & 1u ? "1" : "0") << variant << " " << name;
                }
            }
        }
        device d = r.devices().at(0);
        small_graph sg(200 + runnable);
        buffer weights = sg.wrap_weights(d);
        backend be = d.init("n_threads=2");
        graph_allocator alloc(d.default_buffer_type());
        sg.run_and_check(be, alloc);
        weights.reset();
        be.reset();
        alloc = graph_allocator(d.default_buffer_type()); // drops the compute buffer
        reg.unload(r);
        EXPECT_FALSE(is_loaded(f));
    }
    EXPECT_GE(runnable, 1); // x64 runs everywhere
}

} // namespace
} // namespace tessera::test
